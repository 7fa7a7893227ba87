"""``servekit advise``: candidates -> predictions on the calibration -> a ranking.

The ranking puts first the layouts whose predicted TTFT and TPOT percentiles
meet the SLO, then by predicted goodput, then by fewer nodes (the same goodput
for less hardware), then by lower TTFT p90. A candidate needing an endpoint shape the calibration does
not cover is listed with the shape it lacks, never predicted from another one.
A derived candidate is derived for real (``layouts new``'s rules) before it is
shown, and dropped when a rule refuses it or its Plan differs from what was
predicted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from servekit.advise.bands import Band, band_for
from servekit.advise.candidates import Candidate, confirm, find_candidates
from servekit.advise.model import Calibration, read_calibration
from servekit.advise.options import AdviseOptions, parse_percentiles
from servekit.advise.predict import Prediction, Slo, fit_for, predict_layout
from servekit.advise.workload import Drawn, Workload, drawn_workload, parse_dist, trace_workload
from servekit.errors import UsageError

DRAWN_REQUESTS = 300


@dataclass
class Ranked:
    """One candidate and its prediction (None when its shapes are not calibrated)."""

    cand: Candidate
    pred: Prediction | None
    missing: tuple[str, ...] = ()


@dataclass
class Advice:
    """Everything ``servekit advise`` decided, and from what."""

    workload: Workload
    slo: Slo
    calibration: Calibration
    band: Band | None
    band_line: str
    ranked: list[Ranked]
    dropped: list[str] = field(default_factory=list)

    @property
    def predicted(self) -> list[Ranked]:
        return [r for r in self.ranked if r.pred is not None]

    @property
    def best(self) -> Ranked | None:
        return self.predicted[0] if self.predicted else None


def workload_of(opts: AdviseOptions) -> Workload:
    if opts.trace is not None:
        return trace_workload(opts.trace, opts.trace_speed, opts.requests)
    assert opts.isl is not None and opts.osl is not None and opts.rate is not None
    return drawn_workload(
        Drawn(
            isl=parse_dist(opts.isl, "--isl"),
            osl=parse_dist(opts.osl, "--osl"),
            rate=opts.rate,
            requests=opts.requests or DRAWN_REQUESTS,
            prefix_share=opts.prefix_share,
            prefix_groups=opts.prefix_groups,
            seed=opts.seed,
        )
    )


def slo_of(opts: AdviseOptions) -> Slo:
    from servekit.bench import parse_slos

    limits = parse_slos(opts.slo)
    pcts = parse_percentiles(opts.percentile)
    return Slo(
        ttft_ms=limits.get("ttft"),
        tpot_ms=limits.get("tpot"),
        e2el_ms=limits.get("e2el"),
        ttft_pct=pcts["ttft"],
        tpot_pct=pcts["tpot"],
    )


def covered(cal: Calibration) -> set[str]:
    """Shape keys a calibration can predict: its own, and any role of a mixed engine's."""
    keys: set[str] = set()
    for fit in cal.engines:
        for key in fit.shapes:
            keys.add(key)
            role, rest = key.split(":", 1)
            if role == "mixed":
                keys |= {f"prefill:{rest}", f"decode:{rest}"}
    return keys


def order_key(r: Ranked) -> tuple[bool, float, int, float, str]:
    """Meets the SLO, then goodput (to 0.01 req/s), fewer nodes, lower judged TTFT."""
    pred = r.pred
    assert pred is not None
    ttft = pred.ttft_ms.get("p90", 0.0)
    return (not pred.meets_slo, -round(pred.goodput, 2), r.cand.nodes, ttft, r.cand.name)


def rank(
    cands: list[Candidate], cal: Calibration, work: Workload, slo: Slo, catalog: Path | None
) -> tuple[list[Ranked], list[str]]:
    """Predict every candidate the calibration covers; derive the derived ones for real."""
    ranked: list[Ranked] = []
    for cand in cands:
        missing = tuple(sorted({p.shape.key for p in cand.pools if fit_for(cal, p) is None}))
        pred = None if missing else predict_layout(cand, cal, work.requests, slo, work.block_size)
        ranked.append(Ranked(cand, pred, missing))
    done = sorted((r for r in ranked if r.pred is not None), key=order_key)
    dropped: list[str] = []
    shown: list[Ranked] = []
    for r in done:
        real = confirm(r.cand, catalog)
        if real is None or real.signature != r.cand.signature:
            dropped.append(f"{r.cand.name} ({r.cand.origin}): 'layouts new' derives another layout")
            continue
        shown.append(Ranked(real, r.pred))
    return shown + [r for r in ranked if r.pred is None], dropped


def run_advise(opts: AdviseOptions) -> Advice:
    """The ranking the options ask for (nothing written, nothing started)."""
    assert opts.family is not None and opts.calibration is not None
    cal = read_calibration(opts.calibration)
    work = workload_of(opts)
    slo = slo_of(opts)
    cands = find_candidates(
        opts.family,
        opts.nodes,
        opts.devices_per_node,
        opts.catalog,
        derive=opts.derive,
        wanted=covered(cal),
    )
    if not cands:
        raise UsageError(
            f"--family {opts.family}: no layout fits {opts.nodes} node(s)"
            + (f" of {opts.devices_per_node} devices" if opts.devices_per_node else "")
            + "; raise --nodes or check --devices-per-node"
        )
    ranked, dropped = rank(cands, cal, work, slo, opts.catalog)
    band, line = band_for(cal.engine_kind)
    return Advice(work, slo, cal, band, line, ranked, dropped)


def write_best(advice: Advice, opts: AdviseOptions) -> str:
    """Write the best layout with ``layouts new``'s writer; the line saying what happened."""
    best = advice.best
    if best is None:
        raise UsageError("--write: no layout was predicted; calibrate the shapes listed")
    if best.cand.derive is None:
        return f"best is the catalog layout {best.cand.name}: nothing to write"
    from servekit.layouttools import derive_layout, write_derived

    derive = best.cand.derive.model_copy(update={"dry_run": False, "force": opts.force})
    path = write_derived(derive.name, derive_layout(derive), opts.catalog, opts.force)
    return f"wrote {path} ({best.cand.origin}: {' '.join(derive.set) or 'its DP x TP'})"
