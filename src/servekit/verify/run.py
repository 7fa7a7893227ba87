"""``servekit verify``: up (or attach) -> accept -> bench -> kit -> down -> report -> ledger.

Teardown always runs once something was started, also when a step fails or the
user interrupts. The report is written for failed runs too (it says what
failed); only a passing run adds a record to the layout's verification ledger.
"""

from __future__ import annotations

import datetime as dt
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from servekit.bench.schema import BenchResult
from servekit.catalog.ledger import LedgerRecord, append_record, ledger_path, read_records
from servekit.catalog.loader import load
from servekit.errors import UsageError
from servekit.fsutil import atomic_write_text
from servekit.render.plan import build_plan
from servekit.report.build import RUN_FILE, build_report
from servekit.report.evidence import write_sums
from servekit.report.models import VerifyRun
from servekit.verify.components import Components
from servekit.verify.flow import Flow
from servekit.verify.options import VerifyOptions, default_run_dir
from servekit.verify.records import ledger_record, run_record
from servekit.verify.steps import Steps

__all__ = ["VerifyOptions", "VerifyOutcome", "verify"]

Clock = Callable[[], dt.datetime]


@dataclass(frozen=True)
class VerifyOutcome:
    """What a verify run produced."""

    run: VerifyRun
    run_dir: Path
    report_md: Path
    report_html: Path
    evidence_sha256: str
    ledger: Path | None
    record: LedgerRecord | None

    @property
    def exit_code(self) -> int:
        return 0 if self.run.passed else 1


def _utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _check_inputs(opts: VerifyOptions) -> None:
    if opts.baseline is not None:
        BenchResult.read(opts.baseline)
    if opts.kit is not None and not opts.kit.is_file():
        raise UsageError(f"--kit {opts.kit}: no such file; pass a kit archive (.tar.zst)")
    out = opts.out
    if out is not None and out.exists() and not out.is_dir():
        raise UsageError(f"--out {out}: exists and is not a folder; pick a folder")
    if out is not None and out.is_dir() and any(out.iterdir()) and not (out / RUN_FILE).is_file():
        raise UsageError(
            f"--out {out}: folder is not empty and holds no earlier verify run; "
            "pick an empty or new folder"
        )


def _fresh_run_dir(path: Path) -> Path:
    """An empty run folder: an earlier run's folder at the same path is replaced."""
    if (path / RUN_FILE).is_file():
        shutil.rmtree(path)
    path.mkdir(parents=True, exist_ok=True)
    return path


def _write_static(flow: Flow) -> None:
    """The plan and the baseline, copied in so the report rebuilds from this folder."""
    plan = build_plan(flow.loaded.layout)
    atomic_write_text(flow.run_dir / "plan.json", plan.model_dump_json(indent=2) + "\n")
    flow.files = flow.files.model_copy(update={"plan": "plan.json"})
    source = _baseline_source(flow)
    if source is not None:
        path, flow.baseline_source = source
        shutil.copyfile(path, flow.run_dir / "baseline.json")
        flow.files = flow.files.model_copy(update={"baseline": "baseline.json"})


def _baseline_source(flow: Flow) -> tuple[Path, str] | None:
    """``--baseline FILE``, else the bench.json of the last passing run of this layout
    on the same engine kind in the ledger (when its folder is still here)."""
    if flow.opts.baseline is not None:
        return flow.opts.baseline, f"--baseline {flow.opts.baseline}"
    if flow.opts.no_baseline:
        return None
    engine = flow.opts.engine
    records = [
        r
        for r in read_records(ledger_path(flow.loaded))
        if r.result == "pass" and r.engine == engine and r.layout == flow.loaded.layout.name
    ]
    for record in sorted(records, key=lambda r: r.date, reverse=True):
        bench = Path(record.report) / "bench" / "bench.json"
        if bench.is_file() and Path(record.report).resolve() != flow.run_dir:
            return bench, f"the previous passing {engine} run in the ledger ({record.day})"
    return None


def verify(opts: VerifyOptions, parts: Components, clock: Clock = _utc_now) -> VerifyOutcome:
    """Run the whole flow and return where its report is."""
    loaded = load(opts.name, opts.catalog)
    _check_inputs(opts)
    started = clock()
    run_dir = _fresh_run_dir((opts.out or default_run_dir(opts.name, started)).resolve())
    flow = Flow(opts, loaded, parts, run_dir, Steps())
    _write_static(flow)
    try:
        flow.up()
        flow.measure()
        flow.check_kit()
    finally:
        flow.down()
    run = run_record(flow, started, clock())
    atomic_write_text(run_dir / RUN_FILE, run.model_dump_json(indent=2) + "\n")
    md, html = build_report(run_dir)
    sums = write_sums(run_dir)
    record = ledger = None
    if run.passed and opts.record:
        record = ledger_record(run, flow.accept, sums, run_dir)
        ledger = append_record(loaded, record)
    return VerifyOutcome(run, run_dir, md, html, sums, ledger, record)
