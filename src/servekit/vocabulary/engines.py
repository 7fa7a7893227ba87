"""Two different questions about an engine, two names.

:data:`EngineKind` is the engine *family* a layout's accelerator runs
(``vllm-ascend``, ``vllm``, ``vllm-cpu``): it picks defaults, device variables
and connector behaviour. :data:`ServedBy` is what serves a deployment's
endpoints: real ``vllm``, servekit's ``sim``ulator, or ``external`` engines that
servekit did not start and has not asked. Both once called ``EngineKind``;
one meaning each now.
"""

from __future__ import annotations

from typing import Literal, get_args

EngineKind = Literal["vllm-ascend", "vllm", "vllm-cpu"]
"""The engine family: vLLM on Ascend NPUs, on GPUs, or on the CPU."""
ENGINE_KINDS: tuple[EngineKind, ...] = get_args(EngineKind)

Startable = Literal["vllm", "sim"]
"""The engines servekit starts itself: real vLLM or the simulator."""
STARTABLE: tuple[Startable, ...] = get_args(Startable)

ServedBy = Literal[Startable, "external"]
"""What serves a deployment: engines servekit started, or someone else's."""
SERVED_BY: tuple[ServedBy, ...] = get_args(ServedBy)

Observed = Literal[Startable, "unconfirmed"]
"""What the engines said they are when asked (``unconfirmed``: they did not say)."""

RunEngine = Literal[ServedBy, "unconfirmed"]
"""What a recorded run says served it (``unconfirmed``: the engines were not asked)."""
UNCONFIRMED: tuple[RunEngine, ...] = ("unconfirmed", "external")
"""The run engines a report cannot vouch for."""
