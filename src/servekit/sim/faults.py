"""Faults a simulated endpoint can suffer, set in the spec or at run time.

Two kinds, one vocabulary (every negative control of the acceptance suite is
one of these fields):

- what real clusters met: errors at a rate, latency spikes, a wedged engine
  that never answers (while /health still says 200), a connection reset in the
  middle of a stream, a 200 with an empty body (what a failing decoder looked
  like through the vendored proxy), a slow start (503 while loading weights),
  death (500 until restarted), a lost node (nothing answers, open streams go
  silent: a power cut or a partition) and a stream cut right after its
  ``finish_reason``;
- the engine bugs each acceptance check exists to catch: wrong retrieval
  answers (``misbehave``), a stream that differs from the plain answer or
  never says ``[DONE]``, answers that change in a crowd, a prefix cache that
  never hits, usage that disagrees with /tokenize, stop strings ignored, and a
  decoder that re-prefills instead of loading the KV it was handed.
"""

from __future__ import annotations

import random
from typing import Any, Literal

from pydantic import Field, ValidationError

from servekit.errors import UsageError, first_error
from servekit.vocabulary import StrictModel

Misbehave = Literal["none", "wrong_code", "echo_prompt", "long_answer"]


class FaultSpec(StrictModel):
    """Fault settings of one endpoint; all off by default."""

    error_rate: float = Field(default=0.0, ge=0, le=1, description="share of requests failed")
    error_status: int = Field(default=500, ge=400, le=599)
    spike_rate: float = Field(default=0.0, ge=0, le=1, description="share of requests delayed")
    spike_s: float = Field(default=0.0, ge=0, description="virtual seconds added by a spike")
    hang: bool = Field(default=False, description="accept requests and never answer")
    reset_rate: float = Field(default=0.0, ge=0, le=1, description="share of requests reset")
    reset_after_tokens: int = Field(default=1, ge=0, description="tokens streamed before reset")
    empty_rate: float = Field(
        default=0.0, ge=0, le=1, description="share of requests answered 200 with no body"
    )
    slow_start_s: float = Field(default=0.0, ge=0, description="/health 503 this long at start")
    dead: bool = Field(default=False, description="engine dead: /health 500, requests fail")
    misbehave: Misbehave = Field(default="none", description="answer retrieval wrongly")
    stream_mismatch: bool = Field(
        default=False, description="a stream's last token differs from the plain answer"
    )
    stream_no_done: bool = Field(default=False, description="streams end without data: [DONE]")
    crowd_drift: bool = Field(
        default=False, description="answers change when other requests share the engine"
    )
    no_prefix_cache: bool = Field(default=False, description="the prefix cache never hits")
    usage_off_by_one: bool = Field(
        default=False, description="usage.prompt_tokens is one more than /tokenize counts"
    )
    ignore_stop: bool = Field(default=False, description="stop strings are ignored")
    no_kv_handoff: bool = Field(
        default=False, description="decode re-prefills instead of loading the handed-over KV"
    )
    no_metaserver_call: bool = Field(
        default=False, description="layerwise decoder: never calls the metaserver (waits on)"
    )
    die_mid_push: bool = Field(
        default=False, description="layerwise prefill: dies after pushing half the layers"
    )
    merge_frames: bool = Field(
        default=False, description="a stream's events arrive in one write at its end"
    )
    die_after_finish: bool = Field(
        default=False,
        description="a stream's finish_reason goes out, then the connection drops (no usage, "
        "no [DONE])",
    )
    unreachable: bool = Field(
        default=False,
        description="the node is lost: its engine dies and nothing it serves answers again "
        "(requests and probes hang, open streams go silent) until the fault is cleared",
    )


def patch_faults(current: FaultSpec, patch: Any) -> FaultSpec:
    """Merge a partial mapping into ``current``; one UsageError line when invalid."""
    if not isinstance(patch, dict):
        raise UsageError("faults: expected a JSON object of fault fields")
    try:
        return FaultSpec.model_validate({**current.model_dump(), **patch})
    except ValidationError as exc:
        loc, msg = first_error(exc)
        raise UsageError(f"faults: field {loc}: {msg}") from exc


class FaultDice:
    """Seeded draws, so a fault pattern at a given rate is reproducible."""

    def __init__(self, seed: int) -> None:
        self._rng = random.Random(seed)

    def hit(self, rate: float) -> bool:
        if rate <= 0:
            return False
        if rate >= 1:
            return True
        return self._rng.random() < rate
