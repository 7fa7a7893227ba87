"""Command-line values to workload specs: the parsing ``servekit bench`` needs.

Kept here, not in the CLI module, so the CLI only forwards strings and every
mistake becomes one :class:`~servekit.errors.UsageError` naming the flag.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from copy import copy
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError

from servekit.bench.config import (
    DEFAULT_WORKLOADS,
    WORKLOAD_NAMES,
    ConcurrencySweep,
    KVCapacity,
    MultiStream,
    Prefill,
    RateSweep,
    RunSettings,
    Seconds,
    SingleStream,
    SLOName,
    TraceReplay,
    WorkloadSpec,
)
from servekit.bench.trace import read_trace
from servekit.errors import UsageError, first_error_detail
from servekit.vocabulary import StrictModel

SLO_NAMES: tuple[SLOName, ...] = ("ttft", "tpot", "e2el")


def parse_numbers(flag: str, text: str | None) -> tuple[float, ...] | None:
    """'1,4,8' -> (1.0, 4.0, 8.0); None stays None."""
    if text is None:
        return None
    try:
        values = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise UsageError(f"{flag} {text}: expected comma-separated numbers such as 1,4,8") from None
    if not values or any(v <= 0 for v in values):
        raise UsageError(f"{flag} {text}: give one or more positive numbers")
    return values


def parse_ints(flag: str, text: str | None) -> tuple[int, ...] | None:
    """'1,4,8' -> (1, 4, 8), each a whole positive number."""
    values = parse_numbers(flag, text)
    if values is None:
        return None
    if any(v != int(v) for v in values):
        raise UsageError(f"{flag} {text}: give whole numbers such as 1,4,8")
    return tuple(int(v) for v in values)


SLO_ALIASES = {"e2e": "e2el"}


def parse_slos(items: Sequence[str]) -> dict[SLOName, float]:
    """['ttft=200,tpot=50', 'e2e=900'] -> {'ttft': 200.0, 'tpot': 50.0, 'e2el': 900.0} (ms)."""
    slos: dict[SLOName, float] = {}
    for item in (part for text in items for part in text.split(",") if part.strip()):
        name, _, value = item.partition("=")
        name = SLO_ALIASES.get(name.strip(), name.strip())
        match = next((n for n in SLO_NAMES if n == name), None)
        try:
            ms = float(value)
        except ValueError:
            ms = -1.0
        if match is None or not 0 < ms < math.inf:
            raise UsageError(
                f"--slo {item}: expected NAME=MS with NAME one of ttft, tpot, e2el (or e2e)"
            )
        slos[match] = ms
    return slos


# The flag a workload field comes from, to name it in an error.
_FLAG_OF = {
    "prompt_tokens": "--isl",
    "input_tokens": "--isl",
    "output_tokens": "--osl",
    "streams": "--streams/--prefill-streams",
    "rates": "--rates",
    "requests": "--requests",
    "concurrencies": "--concurrency",
}


def build_workloads(
    names: Sequence[str],
    *,
    isl: int | None = None,
    osl: int | None = None,
    streams: str | None = None,
    prefill_streams: str | None = None,
    rates: str | None = None,
    arrival: str = "poisson",
    concurrency: str | None = None,
    requests: int | None = None,
    trace: Path | None = None,
    trace_speed: float = 1.0,
) -> list[WorkloadSpec]:
    """Workload specs from ``--workload`` names and their shared flags.

    ``--trace FILE`` adds a trace replay; alone, it is the only workload.
    """
    if trace is not None:
        replay = _trace(trace, trace_speed, requests)
        if not names:
            return [replay]
    chosen = list(names) or list(DEFAULT_WORKLOADS)
    unknown = [n for n in chosen if n not in WORKLOAD_NAMES]
    if unknown:
        raise UsageError(
            f"--workload {unknown[0]}: unknown; choose from {', '.join(WORKLOAD_NAMES)}"
        )
    if arrival not in ("constant", "poisson"):
        raise UsageError(f"--arrival {arrival}: choose constant or poisson")
    shared = {k: v for k, v in (("requests", requests),) if v is not None}
    io = {"isl": isl, "osl": osl}
    try:
        specs = [
            _one(n, io, streams, prefill_streams, rates, arrival, concurrency, shared)
            for n in chosen
        ]
    except ValidationError as exc:
        first = first_error_detail(exc)
        field = str(first.loc[0]) if first.loc else ""
        flag = _FLAG_OF.get(field, f"workload option {field}")
        raise UsageError(f"{flag}: {first.msg}") from None
    return specs + ([replay] if trace is not None else [])


def _trace(path: Path, speed: float, requests: int | None) -> TraceReplay:
    """The trace replay the flags describe; the file is read when the workload runs."""
    if not path.is_file():
        raise UsageError(f"--trace {path}: no such file; pass a Mooncake JSONL or Azure CSV trace")
    read_trace(path, limit=requests)  # a bad trace is refused before any engine is touched
    try:
        return TraceReplay(path=str(path), speed=speed, requests=requests)
    except ValidationError as exc:
        first = first_error_detail(exc)
        field = str(first.loc[0]) if first.loc else ""
        flag = {"speed": "--trace-speed", "requests": "--requests"}.get(field, "--trace")
        raise UsageError(f"{flag}: {first.msg}") from None


def _one(  # noqa: PLR0917 - private fan-out of the flags above
    name: str,
    io: dict[str, int | None],
    streams: str | None,
    prefill_streams: str | None,
    rates: str | None,
    arrival: str,
    concurrency: str | None,
    shared: dict[str, int],
) -> WorkloadSpec:
    isl = {} if io["isl"] is None else {"input_tokens": io["isl"]}
    osl = {} if io["osl"] is None else {"output_tokens": io["osl"]}
    arr: Literal["constant", "poisson"] = "constant" if arrival == "constant" else "poisson"
    if name == "single":
        p = {} if io["isl"] is None else {"prompt_tokens": io["isl"]}
        return SingleStream(**p, **osl)
    if name == "multi":
        n = parse_ints("--streams", streams)
        return MultiStream(**isl, **osl, **({"streams": n} if n else {}))
    if name == "prefill":
        n = parse_ints("--prefill-streams", prefill_streams)
        p = {} if io["isl"] is None else {"prompt_tokens": io["isl"]}
        return Prefill(**p, **({"streams": n} if n else {}))
    if name == "rate":
        r = parse_numbers("--rates", rates)
        return RateSweep(**isl, **osl, **shared, arrival=arr, **({"rates": r} if r else {}))
    if name == "concurrency":
        c = parse_ints("--concurrency", concurrency)
        return ConcurrencySweep(**isl, **osl, **shared, **({"concurrencies": c} if c else {}))
    return KVCapacity()


def _shared(name: str) -> Any:
    """A field of RunSettings, reused so its default, bounds and help exist once."""
    return copy(RunSettings.model_fields[name])


class BenchOptions(StrictModel):
    """The options of ``servekit bench``: one model for the CLI, the code and the docs."""

    target: str = Field(description="URL of the server, or a layout run by 'up'")
    workload: tuple[str, ...] = Field(
        (),
        description="repeatable: single, multi, prefill, rate, concurrency, kv (default: single, multi, prefill, kv)",
    )
    runs: int = _shared("runs")
    warmup: int = _shared("warmup")
    isl: int | None = Field(None, description="exact prompt tokens (default 1024)")
    osl: int | None = Field(None, description="generated tokens, ignore_eos (default 256)")
    streams: str | None = Field(None, description="multi-stream N (default 1,4,8,16)")
    prefill_streams: str | None = Field(None, description="prefill N (default 1,2,4)")
    rates: str | None = Field(
        None, description="request-rate sweep, requests per second (default 1,2,4)"
    )
    arrival: str = Field("poisson", description="arrivals of the rate sweep: constant or poisson")
    concurrency: str | None = Field(None, description="concurrency sweep (default 1,4,16)")
    requests: int | None = Field(
        None, description="requests per sweep point and run (default 32); with --trace: the first N"
    )
    trace: Path | None = Field(
        None, description="replay a Mooncake JSONL or Azure CSV trace (alone: the only workload)"
    )
    trace_speed: float = Field(
        1.0, description="trace seconds per engine second (simulators add their own --speed)"
    )
    slo: tuple[str, ...] = Field(
        (),
        description="goodput SLOs NAME=MS[,NAME=MS], repeatable: ttft, tpot, e2el (as vllm bench serve --goodput)",
    )
    baseline: Path | None = Field(
        None,
        description="a saved bench.json, AIPerf profile_export_aiperf.json or vllm bench serve "
        "result; prints before -> after (delta)",
    )
    out: Path | None = Field(None, description="output folder (default .servekit/bench/<UTC time>)")
    idle_timeout: Seconds = Field(
        RunSettings.model_fields["idle_timeout_s"].default,
        description=RunSettings.model_fields["idle_timeout_s"].description,
    )
    note: str | None = Field(None, description="a note stored with the result")
    api_key: str | None = Field(
        None,
        description="bearer token for the target (read from SERVEKIT_API_KEY, never argv)",
        json_schema_extra={"cli": False},
    )
