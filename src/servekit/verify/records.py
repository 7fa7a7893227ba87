"""The records a run leaves: ``run.json`` (VerifyRun) and, on pass, a ledger line.

The engine kind, versions and image are the engines' answers
(:class:`~servekit.verify.identity.Identity`), never the layout's nor the
flags': a run whose engines were never asked (start-up failed) is
``unconfirmed`` when attached and the engines it started otherwise, with
everything else ``not observed``.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from servekit import __version__
from servekit.accept import AcceptResult
from servekit.catalog import NOT_OBSERVED, LedgerRecord
from servekit.report import Interruption, VerifyRun
from servekit.verify.flow import Flow
from servekit.vocabulary import RunEngine


def engine_of(flow: Flow) -> RunEngine:
    """What the engines said they are; what was started here when they were never asked."""
    if flow.identity is not None:
        return flow.identity.kind
    return "unconfirmed" if flow.opts.attached else flow.opts.engine_choice


def _observed(flow: Flow) -> dict[str, str]:
    preflight = flow.preflight.line() if flow.preflight is not None else flow.preflight_why
    if flow.identity is not None:
        return {"image": NOT_OBSERVED, **flow.identity.observed, "preflight": preflight}
    return {
        "engine": "not asked (the deployment did not come up)",
        "image": NOT_OBSERVED,
        "preflight": preflight,
    }


def run_record(
    flow: Flow,
    started: dt.datetime,
    finished: dt.datetime,
    interrupted: Interruption | None = None,
) -> VerifyRun:
    layout = flow.loaded.layout
    identity = flow.identity
    accept_speed = flow.accept.sim_speed if flow.accept is not None else None
    bench_speed = flow.bench.inputs.sim_speed if flow.bench is not None else None
    return VerifyRun(
        layout=layout.name,
        title=layout.title,
        engine=engine_of(flow),
        target=flow.opts.target,
        quick=flow.opts.is_quick,
        image=identity.image if identity is not None else NOT_OBSERVED,
        versions=dict(identity.versions) if identity is not None else {},
        observed=_observed(flow),
        servekit_version=__version__,
        started=started,
        finished=finished,
        steps=tuple(flow.steps.outcomes),
        files=flow.files,
        baseline_source=flow.baseline_source,
        declared_workloads=tuple(layout.verify.workloads),
        derived_from=layout.provenance.derived_from,
        accept_speed=accept_speed,
        bench_speed=bench_speed,
        interrupted=interrupted,
    )


def ledger_record(
    run: VerifyRun, accept: AcceptResult | None, sums_sha: str, run_dir: Path
) -> LedgerRecord:
    """The ledger line of a run: what ran, on what, and the digest of its evidence."""
    counts = accept.counts if accept is not None else None
    return LedgerRecord(
        layout=run.layout,
        image=run.image,
        versions=run.versions,
        servekit_version=run.servekit_version,
        date=run.finished,
        engine=run.engine,
        result="pass" if run.passed else "fail",
        acceptance=f"{counts.passed}/{counts.ran}" if counts is not None else None,
        evidence_sha256=sums_sha,
        report=str(run_dir),
        observed=run.observed,
    )
