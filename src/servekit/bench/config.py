"""What to measure: one pydantic model per workload, plus the run settings.

Each field carries its description, which the CLI help and docs/bench.md
repeat, so the configuration surface is written down once. Defaults follow the
seeds' method (``shared/reference/verification.md``): ISL/OSL 1024/256, N in
{1, 4, 8, 16}, prefill at N = 1/2/4, three runs per figure.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Literal

from pydantic import Field, TypeAdapter

from servekit.vocabulary import StrictModel

SLOName = Literal["ttft", "tpot", "e2el"]

# Bounds a careless or hostile command line cannot get past: a point of 10**9
# streams or an infinite timeout would exhaust memory or never end.
MAX_TOKENS = 1 << 24
Tokens = Annotated[int, Field(ge=1, le=MAX_TOKENS)]
Decoded = Annotated[int, Field(ge=2, le=MAX_TOKENS)]
InFlight = Annotated[int, Field(ge=1, le=4096)]
Requests = Annotated[int, Field(ge=1, le=1_000_000)]
Rate = Annotated[float, Field(gt=0, le=1_000_000, allow_inf_nan=False)]
Seconds = Annotated[float, Field(gt=0, le=86400, allow_inf_nan=False)]


class WorkloadSpec(StrictModel):
    """Base of every workload spec (accept any of them where a list mixes kinds)."""


class SingleStream(WorkloadSpec):
    """One greedy ``ignore_eos`` stream at a time on an idle engine."""

    kind: Literal["single_stream"] = "single_stream"
    prompt_tokens: Tokens = Field(1024, description="exact prompt length (via /tokenize)")
    output_tokens: Decoded = Field(256, description="generated tokens (ignore_eos)")
    sample_interval_s: Seconds = Field(0.25, description="/metrics sampling period")
    max_retries: int = Field(
        3, ge=0, le=100, description="re-runs of a point invalidated by other load"
    )


class MultiStream(WorkloadSpec):
    """N concurrent streams with unique prefixes (no prefix-cache help)."""

    kind: Literal["multi_stream"] = "multi_stream"
    streams: tuple[InFlight, ...] = Field((1, 4, 8, 16), description="concurrent streams per point")
    input_tokens: Tokens = Field(1024, description="exact prompt length")
    output_tokens: Decoded = Field(256, description="generated tokens (ignore_eos)")


class Prefill(WorkloadSpec):
    """Prefill throughput with cold prefixes, after a warm-up request."""

    kind: Literal["prefill"] = "prefill"
    streams: tuple[InFlight, ...] = Field((1, 2, 4), description="concurrent prefills per point")
    prompt_tokens: Tokens = Field(1024, description="exact prompt length")


class RateSweep(WorkloadSpec):
    """Open-loop load at fixed request rates (constant or Poisson arrivals)."""

    kind: Literal["rate_sweep"] = "rate_sweep"
    rates: tuple[Rate, ...] = Field((1.0, 2.0, 4.0), description="requests per second")
    arrival: Literal["constant", "poisson"] = Field("poisson", description="arrival process")
    requests: Requests = Field(32, description="requests per point and run")
    input_tokens: Tokens = Field(1024, description="exact prompt length")
    output_tokens: Tokens = Field(256, description="generated tokens (ignore_eos)")
    seed: int = Field(0, description="seed of the Poisson arrivals")


class ConcurrencySweep(WorkloadSpec):
    """Closed-loop load: at most C requests in flight."""

    kind: Literal["concurrency_sweep"] = "concurrency_sweep"
    concurrencies: tuple[InFlight, ...] = Field((1, 4, 16), description="requests in flight")
    requests: Requests = Field(32, description="requests per point and run")
    input_tokens: Tokens = Field(1024, description="exact prompt length")
    output_tokens: Tokens = Field(256, description="generated tokens (ignore_eos)")


class TraceReplay(WorkloadSpec):
    """Replay a request trace (Mooncake JSONL or Azure CSV) on its own clock."""

    kind: Literal["trace"] = "trace"
    path: str = Field(description="the trace file")
    format: Literal["mooncake", "azure"] | None = Field(
        None, description="trace format (default: by name and header)"
    )
    speed: Rate = Field(1.0, description="trace seconds replayed per engine second")
    block_size: Tokens = Field(512, description="prompt tokens per hash_ids block")
    requests: Requests | None = Field(None, description="replay only the first N requests")


class KVCapacity(WorkloadSpec):
    """KV cache capacity in tokens from the engine log or /metrics."""

    kind: Literal["kv_capacity"] = "kv_capacity"


Workload = Annotated[
    SingleStream | MultiStream | Prefill | RateSweep | ConcurrencySweep | TraceReplay | KVCapacity,
    Field(discriminator="kind"),
]

_WORKLOADS: TypeAdapter[tuple[Workload, ...]] = TypeAdapter(tuple[Workload, ...])

WORKLOAD_NAMES: dict[str, type[WorkloadSpec]] = {
    "single": SingleStream,
    "multi": MultiStream,
    "prefill": Prefill,
    "rate": RateSweep,
    "concurrency": ConcurrencySweep,
    "kv": KVCapacity,
}

DEFAULT_WORKLOADS = ("single", "multi", "prefill", "kv")


def as_workloads(specs: Sequence[WorkloadSpec]) -> tuple[Workload, ...]:
    """Specs as the discriminated union the result schema stores (validated)."""
    return _WORKLOADS.validate_python([w.model_dump() for w in specs])


def default_workloads() -> list[WorkloadSpec]:
    """The seeds' release table: single/multi-stream decode, prefill, KV capacity."""
    return [SingleStream(), MultiStream(), Prefill(), KVCapacity()]


class RunSettings(StrictModel):
    """Settings shared by every workload."""

    runs: int = Field(3, ge=1, le=100, description="runs per figure; the figure is their median")
    warmup: int = Field(
        1, ge=0, le=100, description="warm-up requests before measuring (discarded)"
    )
    slo_ms: dict[SLOName, Annotated[float, Field(gt=0, allow_inf_nan=False)]] = Field(
        default_factory=dict, description="goodput SLOs in ms, e.g. ttft=200 tpot=50"
    )
    idle_timeout_s: Seconds = Field(120.0, description="how long to wait for an idle engine")
    request_timeout_s: Seconds = Field(600.0, description="per-request read timeout")
    api_key: str | None = Field(None, description="bearer token for the target")
