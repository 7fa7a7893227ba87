"""vLLM's NIXL and Mooncake connectors on the CPU: the two small changes they need, in one file.

Loaded by vLLM through ``kv_connector_module_path`` (shipped beside the rendered
scripts as ``servekit_kv_cpu.py``, like the decode guard): the factory imports
this module and takes the class named by ``kv_connector``, so a layout still
names ``NixlConnector`` or ``MooncakeConnector`` and gets vLLM's own connector
with one change each, made while its worker half is built and undone after;
nothing inside the installed vLLM, NIXL or Mooncake is edited. Each class is
created on first access (module ``__getattr__``), so a machine with only one of
the transfer engines installed can load the other.

- **NixlConnector** (``kv_buffer_device: cpu``, UCX over TCP): on the CPU the
  NIXL worker moves the calling thread, which is the thread that runs the model,
  to the last core of each NUMA node it reserves for KV transfers
  (``os.sched_setaffinity(0, ...)``); on a small machine that one core then runs
  the whole forward pass (4.5-8 s for 16 tokens instead of 0.16-0.31 s). The
  worker's affinity is put back as it was. NIXL's Python agent also sets its
  progress thread's delay to 0 (a busy loop: half a core per idle engine); the
  agent built for the worker gets :data:`PROGRESS_DELAY_US` instead
  (``SERVEKIT_NIXL_PROGRESS_DELAY_US`` overrides it).
- **MooncakeConnector** (``mooncake_protocol: tcp``): the worker asks
  ``torch.accelerator.current_device_index()``, which raises when no
  accelerator exists; while the worker is built, that answer is device 0 when
  ``torch.accelerator.current_accelerator()`` is None.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

SHIM_MODULE = "servekit_kv_cpu"
PROGRESS_DELAY_US = 1000
DELAY_ENV = "SERVEKIT_NIXL_PROGRESS_DELAY_US"
CONNECTORS = ("NixlConnector", "MooncakeConnector")


def progress_delay_us() -> int:
    """The NIXL progress thread's delay in microseconds (env override, else 1 ms)."""
    raw = os.environ.get(DELAY_ENV, "").strip()
    return int(raw) if raw.isdigit() else PROGRESS_DELAY_US


@contextlib.contextmanager
def kept_affinity() -> Iterator[None]:
    """Whatever the body does to this thread's CPU affinity is undone after it."""
    getter = getattr(os, "sched_getaffinity", None)
    before = getter(0) if getter is not None else None
    try:
        yield
    finally:
        if before is not None and os.sched_getaffinity(0) != before:
            os.sched_setaffinity(0, before)


class _PacedBindings:
    """NIXL's bindings module as its agent sees it, with the progress delay set on creation."""

    def __init__(self, real: Any, delay_us: int) -> None:
        self._real = real
        self._delay_us = delay_us

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def nixlAgent(self, name: str, config: Any) -> Any:  # NIXL's name
        config.pthrDelay = self._delay_us
        return self._real.nixlAgent(name, config)


@contextlib.contextmanager
def paced_nixl_agents(delay_us: int) -> Iterator[None]:
    """NIXL agents created in the body get a progress delay of ``delay_us``."""
    import nixl._api as api

    real = api.nixlBind
    api.nixlBind = _PacedBindings(real, delay_us)
    try:
        yield
    finally:
        api.nixlBind = real


@contextlib.contextmanager
def device_zero_without_accelerator() -> Iterator[None]:
    """``torch.accelerator.current_device_index()`` answers 0 when there is no accelerator."""
    import torch

    acc = torch.accelerator
    real = acc.current_device_index
    if acc.current_accelerator() is not None:
        yield
        return
    acc.current_device_index = lambda: 0
    try:
        yield
    finally:
        acc.current_device_index = real


def _nixl_connector() -> type:
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole
    from vllm.distributed.kv_transfer.kv_connector.v1.nixl.connector import NixlPullConnector

    class NixlConnector(NixlPullConnector):
        """vLLM's NixlConnector (pull) keeping the worker's affinity, paced progress thread."""

        def __init__(self, vllm_config: Any, role: Any, kv_cache_config: Any = None) -> None:
            if role != KVConnectorRole.WORKER:
                super().__init__(vllm_config, role, kv_cache_config)
                return
            with kept_affinity(), paced_nixl_agents(progress_delay_us()):
                super().__init__(vllm_config, role, kv_cache_config)

    return NixlConnector


def _mooncake_connector() -> type:
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole
    from vllm.distributed.kv_transfer.kv_connector.v1.mooncake import mooncake_connector

    class MooncakeConnector(mooncake_connector.MooncakeConnector):
        """vLLM's MooncakeConnector whose worker finds device 0 on a machine without one."""

        def __init__(self, vllm_config: Any, role: Any, kv_cache_config: Any = None) -> None:
            if role != KVConnectorRole.WORKER:
                super().__init__(vllm_config, role, kv_cache_config)
                return
            with device_zero_without_accelerator():
                super().__init__(vllm_config, role, kv_cache_config)

    return MooncakeConnector


_BUILDERS = {"NixlConnector": _nixl_connector, "MooncakeConnector": _mooncake_connector}
_BUILT: dict[str, type] = {}


def __getattr__(name: str) -> type:
    """``NixlConnector`` / ``MooncakeConnector``: built on first access (vLLM's getattr)."""
    builder = _BUILDERS.get(name)
    if builder is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if name not in _BUILT:
        _BUILT[name] = builder()
    return _BUILT[name]


def source_bytes() -> bytes:
    """This file's bytes (what the renderer writes beside the scripts)."""
    from pathlib import Path

    return Path(__file__).resolve().read_bytes()
