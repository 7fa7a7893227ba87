"""Observations read from ``servekit bench`` results: what the engine was seen to do.

Every number here is a figure or a per-request row ``servekit bench`` wrote
(``bench.json``, ``requests.jsonl``), read back, never a setting of the
engine: multi-stream points give decode step times at a batch and a context,
single-stream and prefill points give prefill times at a prompt length and a
batch, trace-replay rows of requests that ran alone give prefill times with
prefix hits, and the KV capacity point gives the cache size. Client-timed
figures of a simulated deployment at speed S are S times too fast; they are
put back on the engine's clock here (``inputs.sim_speed``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from servekit.bench import BenchResult, RequestRow, read_rows
from servekit.errors import UsageError

BENCH_FILE = "bench.json"
ROWS_FILE = "requests.jsonl"


@dataclass(frozen=True, slots=True)
class DecodeObs:
    """A decode step time at ``batch`` sequences of ``context`` tokens each (mean)."""

    batch: int
    context: float
    step_s: float
    acceptance: float | None
    ttft_s: float | None
    output_tokens: int
    source: str


@dataclass(frozen=True, slots=True)
class PrefillObs:
    """Prompts sent at once (``prompts``, their ``cached`` tokens) and the median TTFT."""

    prompts: tuple[int, ...]
    cached: tuple[int, ...]
    ttft_s: float
    source: str


@dataclass(slots=True)
class Observations:
    """Everything one engine (or one PD pair) was seen doing."""

    decode: list[DecodeObs] = field(default_factory=list)
    prefill: list[PrefillObs] = field(default_factory=list)
    kv_tokens: list[int] = field(default_factory=list)
    engines: set[str] = field(default_factory=set)
    sources: list[str] = field(default_factory=list)

    def extend(self, other: Observations) -> None:
        self.decode += other.decode
        self.prefill += other.prefill
        self.kv_tokens += other.kv_tokens
        self.engines |= other.engines
        self.sources += other.sources


def read_bench_dir(path: Path, flag: str = "--from-bench") -> tuple[BenchResult, list[RequestRow]]:
    """A folder ``servekit bench`` wrote (bench.json, requests.jsonl when there)."""
    file = path / BENCH_FILE if path.is_dir() else path
    if not file.is_file():
        raise UsageError(f"{flag} {path}: no {BENCH_FILE}; pass a folder 'servekit bench' wrote")
    try:
        result = BenchResult.read(file)
    except UsageError as exc:
        raise UsageError(f"{flag} {path}: {exc}") from None
    rows_file = file.parent / ROWS_FILE
    rows = read_rows(rows_file) if rows_file.is_file() else []
    return result, rows


def engine_of(result: BenchResult) -> str:
    """sim, vllm, or external; a URL that answered /version as the simulator is the simulator."""
    from servekit.sim import SIM_VERSION

    engine = result.inputs.engine
    if engine == "external" and result.inputs.versions.get("engine") == SIM_VERSION:
        return "sim"
    return engine


def _median(result: BenchResult, workload: str, label: str, name: str) -> float | None:
    point = result.point(workload, label)
    fig = point.figures.get(name) if point is not None else None
    return fig.median if fig is not None else None


def _int(value: object, default: int = 0) -> int:
    return int(value) if isinstance(value, int | float) else default


def observations_of(result: BenchResult, rows: Sequence[RequestRow], source: str) -> Observations:
    """The observations in one bench result (its per-request rows for the trace)."""
    scale = result.inputs.sim_speed or 1.0  # engine seconds per client second
    obs = Observations(engines={engine_of(result)}, sources=[source])
    for p in result.points:
        figs = {k: f.median for k, f in p.figures.items()}
        if p.workload == "multi_stream" and figs.get("ms_per_step"):
            isl, osl = _int(p.params.get("input_tokens")), _int(p.params.get("output_tokens"))
            ttft = figs.get("ttft_p50_ms")
            obs.decode.append(
                DecodeObs(
                    batch=_int(p.params.get("streams"), 1),
                    context=isl + osl / 2,
                    step_s=float(figs["ms_per_step"] or 0) * scale / 1000,
                    acceptance=figs.get("acceptance_length"),
                    ttft_s=ttft * scale / 1000 if ttft is not None else None,
                    output_tokens=osl,
                    source=f"{source}: multi_stream {p.label}",
                )
            )
        elif p.workload == "single_stream":
            isl, osl = _int(p.params.get("prompt_tokens")), _int(p.params.get("output_tokens"))
            if figs.get("ms_per_step"):
                obs.decode.append(
                    DecodeObs(1, isl + osl / 2, float(figs["ms_per_step"] or 0) * scale / 1000,
                              figs.get("acceptance_length"), None, osl,
                              f"{source}: single_stream {p.label}")
                )  # fmt: skip
            if figs.get("ttft_ms"):
                obs.prefill.append(
                    PrefillObs((isl,), (0,), float(figs["ttft_ms"] or 0) * scale / 1000,
                               f"{source}: single_stream {p.label} TTFT")
                )  # fmt: skip
        elif p.workload == "prefill" and figs.get("ttft_p50_ms"):
            n, isl = _int(p.params.get("streams"), 1), _int(p.params.get("prompt_tokens"))
            obs.prefill.append(
                PrefillObs((isl,) * n, (0,) * n, float(figs["ttft_p50_ms"] or 0) * scale / 1000,
                           f"{source}: prefill {p.label} ISL={isl}")
            )  # fmt: skip
        elif p.workload == "kv_capacity" and figs.get("kv_cache_tokens"):
            obs.kv_tokens.append(int(figs["kv_cache_tokens"] or 0))
    obs.prefill += alone_prefills(rows, scale, source)
    return obs


def alone_prefills(rows: Iterable[RequestRow], scale: float, source: str) -> list[PrefillObs]:
    """Trace-replay requests that ran alone: TTFT against prompt and prefix-cache hits.

    A request counts only when no other request of its run was in flight at any
    moment of its life (so its TTFT is its own prefill, with the hits the
    engine reported in ``usage``).
    """
    by_run: dict[tuple[str, int], list[RequestRow]] = {}
    for row in rows:
        if row.workload == "trace":
            by_run.setdefault((row.point, row.run), []).append(row)
    out: list[PrefillObs] = []
    for (point, run), members in by_run.items():
        spans = [(r.send_ns, r.send_ns + r.latency_ns) for r in members]
        for i, r in enumerate(members):
            if r.error or r.ttft_ns is None or not r.prompt_tokens:
                continue
            start, end = spans[i]
            if any(s < end and start < e for j, (s, e) in enumerate(spans) if j != i):
                continue
            out.append(
                PrefillObs(
                    (r.prompt_tokens,),
                    (r.cached_tokens or 0,),
                    r.ttft_ns * scale / 1e9,
                    f"{source}: trace {point} run {run} request {r.index}",
                )
            )
    return out
