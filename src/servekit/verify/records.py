"""The records a run leaves: ``run.json`` (VerifyRun) and, on pass, a ledger line."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from servekit import __version__
from servekit.accept.models import AcceptResult
from servekit.catalog.ledger import LedgerRecord
from servekit.deployment import Deployment
from servekit.report.models import Interruption, RunEngine, VerifyRun
from servekit.verify.flow import Flow
from servekit.verify.options import VerifyOptions


def engine_of(opts: VerifyOptions, dep: Deployment | None) -> RunEngine:
    if dep is not None and dep.engine != "external":
        return dep.engine
    return opts.engine


def _versions(flow: Flow) -> dict[str, str]:
    found = dict(flow.loaded.layout.versions)
    if flow.deployment is not None and flow.opts.engine != "sim":
        for key in found:
            if key in flow.deployment.versions:
                found[key] = flow.deployment.versions[key]
    return found


def run_record(
    flow: Flow,
    started: dt.datetime,
    finished: dt.datetime,
    interrupted: Interruption | None = None,
) -> VerifyRun:
    layout = flow.loaded.layout
    dep = flow.deployment
    accept_speed = flow.accept.sim_speed if flow.accept is not None else None
    bench_speed = flow.bench.inputs.sim_speed if flow.bench is not None else None
    return VerifyRun(
        layout=layout.name,
        title=layout.title,
        engine=engine_of(flow.opts, dep),
        target=flow.opts.target,
        quick=flow.opts.is_quick,
        image=(dep.image if dep is not None and dep.image else layout.image),
        versions=_versions(flow),
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
    )
