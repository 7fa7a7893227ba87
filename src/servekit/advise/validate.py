"""``--validate K``: run the top K layouts here and put the measurement beside the prediction.

Each layout is started the way a user starts it (``servekit up NAME --engine
sim|vllm --detach --free-ports``; a derived one is first written with ``layouts
new``'s writer into a scratch catalog holding its base's profiles), the
workload is replayed by ``servekit bench --trace`` with the same SLOs, and the
layout is stopped (``servekit down``) whatever happened. Runs go to a scratch
``SERVEKIT_RUNS`` so they never meet the user's own. Client-timed figures of
the simulator at ``--validate-speed S`` are put back on its clock (x S).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from servekit.advise.candidates import Candidate
from servekit.advise.predict import Prediction, Slo
from servekit.advise.rank import Advice
from servekit.catalog import PROFILES_DIR, LayoutName, resolve_catalog
from servekit.errors import UsageError

UP_TIMEOUT_S = 900
BENCH_TIMEOUT_S = 3600


@dataclass(frozen=True)
class Measured:
    """What ``servekit bench --trace`` measured, on the engine's clock."""

    goodput: float
    output_throughput: float
    ttft_ms: dict[str, float]
    tpot_ms: dict[str, float]
    errors: int
    requests: int
    folder: Path


def slo_args(slo: Slo, speed: float) -> list[str]:
    """``--slo`` for bench, in the client's time (a simulator at speed S is S times faster)."""
    parts = [
        f"{name}={value / speed:g}"
        for name, value in (("ttft", slo.ttft_ms), ("tpot", slo.tpot_ms), ("e2el", slo.e2el_ms))
        if value is not None
    ]
    return ["--slo", ",".join(parts)] if parts else []


def _servekit(args: list[str], env: dict[str, str], timeout: float, cwd: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "servekit", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if done.returncode not in (0, 1):
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise UsageError(f"servekit {' '.join(args[:2])} failed: {' | '.join(tail)}")
    return done.stdout


def _percentiles(
    rows: list[dict[str, object]], name: str, pcts: list[float], scale: float
) -> dict[str, float]:
    import numpy as np

    values = []
    for r in rows:
        ttft, lat, out = r.get("ttft_ns"), r.get("latency_ns"), r.get("output_tokens")
        if r.get("error") or not isinstance(ttft, int) or not isinstance(lat, int):
            continue
        if name == "ttft":
            values.append(ttft / 1e6 * scale)
        elif isinstance(out, int) and out > 1:
            values.append((lat - ttft) / 1e6 / (out - 1) * scale)
    if not values:
        return {f"p{p:g}": float("nan") for p in pcts}
    return {f"p{p:g}": float(np.percentile(values, p)) for p in pcts}


def _good(rows: list[dict[str, object]], slo: Slo, scale: float) -> int:
    """Requests meeting every limit, as bench counts them (a 1-token output has TPOT 0)."""
    good = 0
    for r in rows:
        ttft, lat, out = r.get("ttft_ns"), r.get("latency_ns"), r.get("output_tokens")
        if r.get("error") or not isinstance(ttft, int) or not isinstance(lat, int):
            continue
        tpot = (lat - ttft) / (out - 1) if isinstance(out, int) and out > 1 else 0.0
        good += slo.met(ttft / 1e9 * scale, tpot / 1e9 * scale, lat / 1e9 * scale)
    return good


def read_measured(folder: Path, slo: Slo, speed: float) -> Measured:
    """The trace point of a bench folder, on the engine's clock, from its per-request rows."""
    doc = json.loads((folder / "bench.json").read_text())
    point = next(p for p in doc["points"] if p["workload"] == "trace")
    rows = [
        json.loads(line)
        for line in (folder / "requests.jsonl").read_text().splitlines()
        if line.strip()
    ]
    duration = max((float(r["run_duration_s"]) for r in rows), default=0.0) * speed
    tokens = sum(
        int(r["output_tokens"])
        for r in rows
        if not r.get("error") and isinstance(r.get("output_tokens"), int)
    )
    pcts = sorted({50.0, 90.0, 99.0, slo.ttft_pct, slo.tpot_pct})
    return Measured(
        goodput=_good(rows, slo, speed) / duration if duration > 0 else 0.0,
        output_throughput=tokens / duration if duration > 0 else 0.0,
        ttft_ms=_percentiles(rows, "ttft", pcts, speed),
        tpot_ms=_percentiles(rows, "tpot", pcts, speed),
        errors=int(point.get("errors", 0)),
        requests=int(point.get("requests", 0)),
        folder=folder,
    )


def scratch_catalog(cand: Candidate, source: Path, into: Path) -> Path:
    """A catalog holding the derived layout, its base's hardware profiles beside it."""
    from servekit.layouttools import derive_layout, write_derived

    assert cand.derive is not None
    hw = LayoutName.parse(cand.name).hardware
    shutil.copytree(source / hw / PROFILES_DIR, into / hw / PROFILES_DIR, dirs_exist_ok=True)
    write_derived(cand.name, derive_layout(cand.derive), into, force=True)
    return into


def measure_layout(
    name: str,
    catalog: Path | None,
    traces: Sequence[Path],
    slo: Slo,
    *,
    engine: str = "sim",
    speed: float = 1.0,
    work: Path,
    warmup: Path | None = None,
) -> list[Measured]:
    """Start ``name`` once, replay each trace in turn with bench, stop it; their figures.

    ``warmup``: a trace replayed first and discarded: a fresh engine's first requests
    pay one-time costs (the seed's "must warm up first"), and a calibration measures
    an engine its warm-up requests have warmed.
    """
    work.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "SERVEKIT_RUNS": str(work / "runs")}
    where = ["--catalog", str(catalog)] if catalog is not None else []
    up = ["up", name, "--engine", engine, "--detach", "--free-ports", *where]
    if engine == "sim":
        up += ["--speed", f"{speed:g}"]
    clock = speed if engine == "sim" else 1.0
    found: list[Measured] = []
    try:
        _servekit(up, env, UP_TIMEOUT_S, work)
        if warmup is not None:
            out = work / "bench" / f"{name.replace('/', '__')}-warmup"
            bench = ["bench", "--target", name, "--trace", str(warmup), "--runs", "1"]
            _servekit([*bench, "--out", str(out)], env, BENCH_TIMEOUT_S, work)
        for i, trace in enumerate(traces):
            out = work / "bench" / f"{name.replace('/', '__')}-{i}-{trace.stem}"
            bench = ["bench", "--target", name, "--trace", str(trace), "--runs", "1"]
            bench += ["--warmup", "0", *slo_args(slo, clock), "--out", str(out)]
            _servekit(bench, env, BENCH_TIMEOUT_S, work)
            found.append(read_measured(out, slo, clock))
    finally:
        _servekit(["down", name], env, UP_TIMEOUT_S, work)
    return found


@dataclass(frozen=True)
class Validation:
    """One layout predicted and measured."""

    name: str
    predicted: Prediction
    measured: Measured


def run_validation(
    advice: Advice, k: int, engine: str, speed: float, catalog: Path | None
) -> list[Validation]:
    """Run the top ``k`` predicted layouts and measure them on the same workload."""
    source = resolve_catalog(catalog)
    out: list[Validation] = []
    with tempfile.TemporaryDirectory(prefix="servekit-advise-") as tmp:
        work = Path(tmp)
        trace = advice.workload.write_mooncake(work / "workload.jsonl")
        for i, r in enumerate(advice.predicted[:k]):
            assert r.pred is not None
            where: Path | None = catalog
            if r.cand.derive is not None:
                where = scratch_catalog(r.cand, source, work / f"catalog-{i}")
            (measured,) = measure_layout(
                r.cand.name, where, [trace], advice.slo, engine=engine, speed=speed, work=work,
                warmup=trace if engine == "vllm" else None,
            )  # fmt: skip
            out.append(Validation(r.cand.name, r.pred, measured))
    return out


def _ape(pred: float, meas: float) -> str:
    if meas == 0 or math.isnan(meas) or math.isnan(pred):
        return "-"
    return f"{100 * (pred - meas) / meas:+.1f}%"


def validation_rows(vals: list[Validation], slo: Slo) -> tuple[list[str], list[list[str]]]:
    """Predicted | measured | error per figure, one row per layout."""
    tp, dp = f"p{slo.ttft_pct:g}", f"p{slo.tpot_pct:g}"
    header = [
        "layout", "goodput pred", "meas", "err", f"TTFT {tp} pred", "meas", "err",
        f"TPOT {dp} pred", "meas", "err", "failed",
    ]  # fmt: skip
    rows = []
    for v in vals:
        p, m = v.predicted, v.measured
        rows.append(
            [
                v.name,
                f"{p.goodput:.2f}", f"{m.goodput:.2f}", _ape(p.goodput, m.goodput),
                f"{p.ttft_ms[tp]:,.0f}", f"{m.ttft_ms[tp]:,.0f}", _ape(p.ttft_ms[tp], m.ttft_ms[tp]),
                f"{p.tpot_ms[dp]:.1f}", f"{m.tpot_ms[dp]:.1f}", _ape(p.tpot_ms[dp], m.tpot_ms[dp]),
                f"{m.errors}/{m.requests}",
            ]
        )  # fmt: skip
    return header, rows
