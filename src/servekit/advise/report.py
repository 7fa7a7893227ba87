"""What ``servekit advise`` prints and writes: the ranking with its error band.

Every predicted figure is shown as the prediction and its band (the error the
published campaigns measured for this kind of calibration), and the band's
source is named under the table, so nobody reads a prediction as a measurement.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from servekit.advise.predict import Prediction
from servekit.advise.rank import Advice, Ranked
from servekit.vocabulary import atomic_write_text


def _ms(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:,.0f}" if value >= 100 else f"{value:.1f}"


def _band(value: float, pct: float | None) -> str:
    if pct is None:
        return f"{value:.2f}"
    return f"{value:.2f} ±{pct:.0f}%"


def _slo_cell(advice: Advice, pred: Prediction) -> str:
    return "yes" if pred.meets_slo else "no"


def ranking_table(advice: Advice, top: int) -> Table:
    slo, band = advice.slo, advice.band
    # beside p50: the percentile the SLO is judged at (p90 when that is p50 itself)
    tp, dp = (f"p{p:g}" if p != 50 else "p90" for p in (slo.ttft_pct, slo.tpot_pct))
    table = Table(title="layouts ranked (predicted)", show_lines=False)
    for col in (
        "#", "layout", "nodes", "endpoints", "goodput req/s", "out tok/s",
        f"TTFT p50/{tp} ms", f"TPOT p50/{dp} ms", "SLO", "notes",
    ):  # fmt: skip
        table.add_column(col, overflow="fold")
    for i, r in enumerate(advice.predicted[:top], 1):
        pred = r.pred
        assert pred is not None
        table.add_row(
            str(i),
            f"{r.cand.name}\n[dim]{r.cand.origin}[/dim]",
            str(r.cand.nodes),
            r.cand.describe(),
            _band(pred.goodput, band.goodput_pct if band else None),
            f"{pred.output_throughput:,.0f}",
            f"{_ms(pred.ttft_ms['p50'])} / {_ms(pred.ttft_ms[tp])}",
            f"{_ms(pred.tpot_ms['p50'])} / {_ms(pred.tpot_ms[dp])}",
            _slo_cell(advice, pred),
            f"{len(pred.flags)} flag(s)" if pred.flags else "",
        )
    return table


def print_advice(advice: Advice, top: int, console: Console | None = None) -> None:
    console = console or Console()
    cal, slo = advice.calibration, advice.slo
    limits = ", ".join(
        f"{n} <= {v:g} ms" for n, v in (("TTFT", slo.ttft_ms), ("TPOT", slo.tpot_ms),
                                        ("E2EL", slo.e2el_ms)) if v is not None
    ) or "none (goodput = completed requests per second)"  # fmt: skip
    console.print(f"workload: {advice.workload.summary()}")
    console.print(f"SLO: {limits}; judged at TTFT p{slo.ttft_pct:g}, TPOT p{slo.tpot_pct:g}")
    engines = "; ".join(f"{e.name} ({e.engine}) for {', '.join(e.shapes)}" for e in cal.engines)
    console.print(f"calibration: {engines}; KV hand-off "
                  + ("measured" if cal.transfer.observations else "not measured"))  # fmt: skip
    console.print(ranking_table(advice, top))
    band = advice.band
    if band is not None:
        console.print(
            f"error band: goodput ±{band.goodput_pct:.0f}%, TTFT p90 ±{band.ttft_p90_pct:.0f}%, "
            f"TPOT p50 ±{band.tpot_p50_pct:.0f}% ({advice.band_line}); docs/advise.md#error"
        )
    else:
        console.print(f"error band: {advice.band_line} (docs/advise.md#error)")
    for i, r in enumerate(advice.predicted[:top], 1):
        assert r.pred is not None
        for flag in r.pred.flags:
            console.print(f"  #{i} {r.cand.name}: outside the calibration: {flag}")
    for r in advice.ranked:
        if r.pred is None:
            console.print(
                f"not predicted: {r.cand.name} ({r.cand.origin}) needs "
                f"{', '.join(r.missing)}, which no calibrated engine stands for"
            )
    for line in advice.dropped:
        console.print(f"dropped: {line}")
    best = advice.best
    if best is not None:
        how = (
            f"servekit advise ... --write --catalog DIR derives it ({best.cand.origin})"
            if best.cand.derive is not None
            else "a catalog layout: servekit up / render it as it is"
        )
        console.print(f"best: {best.cand.name} ({how})")


def _row(rank: int, r: Ranked) -> dict[str, Any]:
    out: dict[str, Any] = {
        "rank": rank,
        "layout": r.cand.name,
        "origin": r.cand.origin,
        "nodes": r.cand.nodes,
        "endpoints": [
            {"role": p.role, "shape": p.shape.key, "count": p.count} for p in r.cand.pools
        ],
        "derive_set": list(r.cand.derive.set) if r.cand.derive else None,
        "missing_shapes": list(r.missing),
    }
    if r.pred is not None:
        out["prediction"] = {
            k: v for k, v in r.pred.__dict__.items() if k not in ("flags", "peak_batch")
        }
        out["flags"] = list(r.pred.flags)
        out["peak_batch"] = r.pred.peak_batch
    return out


def advice_json(advice: Advice) -> dict[str, Any]:
    return {
        "schema_version": "servekit.advise/1",
        "workload": advice.workload.summary(),
        "slo": advice.slo.__dict__,
        "error_band": advice.band.model_dump() if advice.band else None,
        "error_band_source": advice.band_line,
        "label": "predicted by servekit advise (virtual-time simulation of the fitted engines)",
        "ranking": [_row(i, r) for i, r in enumerate(advice.ranked, 1)],
        "dropped": advice.dropped,
    }


def write_json(advice: Advice, path: Path) -> Path:
    atomic_write_text(path, json.dumps(advice_json(advice), indent=1, allow_nan=True) + "\n")
    return path
