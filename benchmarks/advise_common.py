"""What the advisor's validation campaigns share: predict, measure, compare, tabulate.

A campaign is a set of cells (layout x request rate). For each rate the
workload is drawn once from a seed and written as a Mooncake trace; ``servekit
advise`` (the command, with ``--json``) predicts every layout of the family on
it; each layout is then started here (``servekit up``), the trace replayed by
``servekit bench --trace`` and the layout stopped
(:func:`servekit.advise.validate.measure_layout`). The error of a cell is
(predicted - measured) / measured per figure; a campaign reports the median and
the 90th percentile of the absolute errors, and per rate whether the
advisor's first choice measured within 5% of the best measured goodput.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from servekit.advise import (
    Drawn,
    Measured,
    Slo,
    Workload,
    drawn_workload,
    measure_layout,
    parse_dist,
)

FIGURES = ("goodput", "ttft_p90", "tpot_p50")


@dataclass
class Cell:
    """One layout at one rate: predicted and measured."""

    layout: str
    rate: float
    predicted: dict[str, float]
    measured: dict[str, float]
    errors: int
    requests: int
    wall_s: float

    def ape(self, name: str) -> float | None:
        """|predicted - measured| / measured in percent; both 0 (a goodput nobody meets) is
        exact, a prediction above a measured 0 is an infinite error (it counts as a miss)."""
        p, m = self.predicted.get(name), self.measured.get(name)
        if p is None or m is None or math.isnan(m) or math.isnan(p):
            return None
        if m == 0:
            return 0.0 if p == 0 else math.inf
        return abs(p - m) / abs(m) * 100


def servekit(*args: str, cwd: Path | None = None) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "servekit", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"servekit {' '.join(args[:3])} failed:\n{done.stderr[-3000:]}")
    return done.stdout


def workload(
    rate: float, requests: int, *, isl: str, osl: str, share: float, seed: int, path: Path
) -> Workload:
    w = drawn_workload(
        Drawn(parse_dist(isl, "--isl"), parse_dist(osl, "--osl"), rate, requests, share, 8, seed)
    )
    w.write_mooncake(path)
    return w


def predicted_of(row: dict[str, Any]) -> dict[str, float]:
    p = row["prediction"]
    return {
        "goodput": p["goodput"],
        "ttft_p90": p["ttft_ms"]["p90"],
        "tpot_p50": p["tpot_ms"]["p50"],
        "output_throughput": p["output_throughput"],
    }


def measured_of(m: Measured) -> dict[str, float]:
    return {
        "goodput": m.goodput,
        "ttft_p90": m.ttft_ms["p90"],
        "tpot_p50": m.tpot_ms["p50"],
        "output_throughput": m.output_throughput,
    }


def advise_json(args: list[str], out: Path) -> dict[str, Any]:
    servekit("advise", *args, "--json", str(out), "--top", "50")
    return json.loads(out.read_text())


def measure(
    layout: str, catalog: Path | None, traces: list[Path], slo: Slo, *, engine: str,
    speed: float, work: Path, warmup: Path | None = None,
) -> tuple[list[Measured], float]:  # fmt: skip
    """One start of the layout, every trace replayed on it; (figures, wall seconds).

    The host's load average before and after is printed: on a shared machine it is
    part of what was measured.
    """
    t0 = time.monotonic()
    before = os.getloadavg()[0]
    m = measure_layout(
        layout, catalog, traces, slo, engine=engine, speed=speed, work=work, warmup=warmup
    )
    print(f"  (load average {before:.1f} -> {os.getloadavg()[0]:.1f})", flush=True)
    return m, time.monotonic() - t0


def summary(cells: list[Cell]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for name in FIGURES:
        apes = [a for a in (c.ape(name) for c in cells) if a is not None]
        out[name] = {
            "median_ape": float(np.median(apes)) if apes else float("nan"),
            "p90_ape": float(np.percentile(apes, 90)) if apes else float("nan"),
            "cells": len(apes),
        }
    return out


def first_choices(cells: list[Cell], ranking: dict[float, list[str]]) -> list[dict[str, Any]]:
    """Per rate: the advisor's first choice, the best measured, and how far apart."""
    rows = []
    for rate, order in sorted(ranking.items()):
        here = {c.layout: c for c in cells if c.rate == rate}
        measured_order = [n for n in order if n in here]
        if not measured_order:
            continue
        first = measured_order[0]
        best = max(here.values(), key=lambda c: c.measured["goodput"])
        gap = (best.measured["goodput"] - here[first].measured["goodput"]) / max(
            best.measured["goodput"], 1e-9
        )
        rows.append(
            {
                "rate": rate,
                "first_choice": first,
                "first_measured_goodput": here[first].measured["goodput"],
                "best_measured": best.layout,
                "best_measured_goodput": best.measured["goodput"],
                "shortfall_pct": 100 * gap,
                "within_5pct": gap <= 0.05,
            }
        )
    return rows


def _pct(value: float | None) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:+.1f}%"


def markdown(cells: list[Cell], choices: list[dict[str, Any]]) -> str:
    lines = [
        "| layout | rate | goodput pred / meas | err | TTFT p90 ms pred / meas | err "
        "| TPOT p50 ms pred / meas | err | failed |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for c in sorted(cells, key=lambda c: (c.rate, c.layout)):
        p, m = c.predicted, c.measured

        def err(name: str, c: Cell = c) -> str:
            if not c.measured.get(name):
                return "exact" if c.predicted.get(name) == 0 else "-"
            return _pct(100 * (c.predicted[name] - c.measured[name]) / c.measured[name])

        lines.append(
            f"| {c.layout} | {c.rate:g}/s | {p['goodput']:.2f} / {m['goodput']:.2f} | "
            f"{err('goodput')} | {p['ttft_p90']:,.0f} / {m['ttft_p90']:,.0f} | {err('ttft_p90')} | "
            f"{p['tpot_p50']:.1f} / {m['tpot_p50']:.1f} | {err('tpot_p50')} | "
            f"{c.errors}/{c.requests} |"
        )
    s = summary(cells)
    lines += [
        "",
        "| figure | median abs error | p90 abs error | cells |",
        "|---|---|---|---|",
        *(
            f"| {n} | {v['median_ape']:.1f}% | {v['p90_ape']:.1f}% | {v['cells']:.0f} |"
            for n, v in s.items()
        ),
        "",
        "| rate | advisor's first choice (measured goodput) | best measured | shortfall |",
        "|---|---|---|---|",
        *(
            f"| {r['rate']:g}/s | {r['first_choice']} ({r['first_measured_goodput']:.2f}) | "
            f"{r['best_measured']} ({r['best_measured_goodput']:.2f}) | {r['shortfall_pct']:.1f}% |"
            for r in choices
        ),
    ]
    return "\n".join(lines)


def save(path: Path, cells: list[Cell], extra: dict[str, Any]) -> None:
    path.write_text(json.dumps({"cells": [asdict(c) for c in cells], **extra}, indent=1))


def load_cells(path: Path) -> tuple[list[Cell], dict[str, Any]]:
    doc = json.loads(path.read_text())
    return [Cell(**c) for c in doc.pop("cells")], doc


BANDS = Path(__file__).resolve().parents[1] / "src" / "servekit" / "advise" / "bands.json"


def write_band(kind: str, cells: list[Cell], campaign: str, command: str) -> None:
    """Publish a campaign's error as the band ``servekit advise`` shows for ``kind``.

    The band is the 90th percentile of the absolute errors over the campaign's
    cells per figure (nine predictions in ten fell within it), beside the medians.
    """
    import datetime as dt

    s = summary(cells)
    zeros = sum(c.measured["goodput"] == 0 == c.predicted["goodput"] for c in cells)
    doc = json.loads(BANDS.read_text()) if BANDS.is_file() else {}
    doc[kind] = {
        "campaign": campaign,
        "statistic": f"90th percentile of |predicted - measured| / measured over {len(cells)} "
        f"cells (layout x rate; {zeros} where no request met the SLO, predicted and measured, "
        "count as exact)",
        "goodput_pct": round(s["goodput"]["p90_ape"], 1),
        "ttft_p90_pct": round(s["ttft_p90"]["p90_ape"], 1),
        "tpot_p50_pct": round(s["tpot_p50"]["p90_ape"], 1),
        "median_goodput_pct": round(s["goodput"]["median_ape"], 1),
        "median_ttft_p90_pct": round(s["ttft_p90"]["median_ape"], 1),
        "median_tpot_p50_pct": round(s["tpot_p50"]["median_ape"], 1),
        "cells": len(cells),
        "command": command,
        "measured": dt.datetime.now(dt.UTC).date().isoformat(),
    }
    BANDS.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
