"""``servekit bench``'s one options model, and the parsing of its text flags.

:class:`BenchOptions` is what the typer command is generated from and what
:func:`~servekit.bench.run_bench` takes. Its validators turn each flag into
workload specs and run settings when the model is built, so every mistake is
one :class:`~servekit.errors.UsageError` naming the flag, before any request.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from copy import copy
from pathlib import Path
from typing import Any, Literal, Self

from pydantic import Field, ValidationError, field_validator, model_validator

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
from servekit.errors import UsageError, first_error
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
    if any(not math.isfinite(v) or v != int(v) for v in values):
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

    @field_validator("workload")
    @classmethod
    def _known_workloads(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        unknown = [n for n in names if n not in WORKLOAD_NAMES]
        if unknown:
            raise UsageError(
                f"--workload {unknown[0]}: unknown; choose from {', '.join(WORKLOAD_NAMES)}"
            )
        return names

    @field_validator("arrival")
    @classmethod
    def _known_arrival(cls, arrival: str) -> str:
        if arrival not in ("constant", "poisson"):
            raise UsageError(f"--arrival {arrival}: choose constant or poisson")
        return arrival

    @field_validator("slo")
    @classmethod
    def _slos_parse(cls, items: tuple[str, ...]) -> tuple[str, ...]:
        parse_slos(items)
        return items

    @model_validator(mode="after")
    def _workloads_build(self) -> Self:
        """Every workload the flags describe is built once here, so a bad flag never runs."""
        self.workloads()
        return self

    def settings(self) -> RunSettings:
        """The run settings; the API key comes from the field or ``SERVEKIT_API_KEY``."""
        return RunSettings(
            runs=self.runs,
            warmup=self.warmup,
            slo_ms=parse_slos(self.slo),
            idle_timeout_s=self.idle_timeout,
            api_key=self.api_key or os.environ.get("SERVEKIT_API_KEY"),
        )

    def workloads(self) -> list[WorkloadSpec]:
        """The workload specs of ``--workload`` and its shared flags.

        ``--trace FILE`` adds a trace replay; alone, it is the only workload.
        """
        replay: list[WorkloadSpec] = [self._trace(self.trace)] if self.trace is not None else []
        if replay and not self.workload:
            return replay
        try:
            specs = [self._one(n) for n in self.workload or DEFAULT_WORKLOADS]
        except ValidationError as exc:
            field, msg = first_error(exc)
            flag = _FLAG_OF.get(field.split(".")[0], f"workload option {field}")
            raise UsageError(f"{flag}: {msg}") from None
        return specs + replay

    def _trace(self, path: Path) -> TraceReplay:
        """The trace replay; the file is read here so a bad trace is refused before any engine."""
        if not path.is_file():
            raise UsageError(
                f"--trace {path}: no such file; pass a Mooncake JSONL or Azure CSV trace"
            )
        read_trace(path, limit=self.requests)
        try:
            return TraceReplay(path=str(path), speed=self.trace_speed, requests=self.requests)
        except ValidationError as exc:
            field, msg = first_error(exc)
            flag = {"speed": "--trace-speed", "requests": "--requests"}.get(field, "--trace")
            raise UsageError(f"{flag}: {msg}") from None

    def _one(self, name: str) -> WorkloadSpec:
        isl = {} if self.isl is None else {"input_tokens": self.isl}
        prompt = {} if self.isl is None else {"prompt_tokens": self.isl}
        osl = {} if self.osl is None else {"output_tokens": self.osl}
        shared = {} if self.requests is None else {"requests": self.requests}
        arr: Literal["constant", "poisson"] = (
            "constant" if self.arrival == "constant" else "poisson"
        )
        if name == "single":
            return SingleStream(**prompt, **osl)
        if name == "multi":
            n = parse_ints("--streams", self.streams)
            return MultiStream(**isl, **osl, **({"streams": n} if n else {}))
        if name == "prefill":
            n = parse_ints("--prefill-streams", self.prefill_streams)
            return Prefill(**prompt, **({"streams": n} if n else {}))
        if name == "rate":
            r = parse_numbers("--rates", self.rates)
            return RateSweep(**isl, **osl, **shared, arrival=arr, **({"rates": r} if r else {}))
        if name == "concurrency":
            c = parse_ints("--concurrency", self.concurrency)
            return ConcurrencySweep(**isl, **osl, **shared, **({"concurrencies": c} if c else {}))
        return KVCapacity()
