"""``servekit verify``: up (or attach) -> accept -> bench -> kit -> down -> report -> ledger.

Teardown always runs once something was started, also when a step fails or the
user interrupts. The report is written for failed runs too (it says what
failed); only a passing run adds a record to the layout's verification ledger.

Ctrl-C or SIGTERM stops the measurements where they are: the running step is
recorded as interrupted, teardown runs (further signals ignored until the
report is written), the report opens with INTERRUPTED and says which step
was running and what had finished, and the exit code is 130 or 143.
"""

from __future__ import annotations

import datetime as dt
import shutil
import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from servekit.bench import BenchResult
from servekit.catalog import LedgerRecord, append_record, ledger_records, load
from servekit.errors import UsageError
from servekit.render import build_plan
from servekit.report import RUN_FILE, Interruption, VerifyRun, build_report, write_sums
from servekit.verify.attach import check_attach_inputs
from servekit.verify.components import Components
from servekit.verify.flow import Flow
from servekit.verify.interrupts import Interrupts
from servekit.verify.options import VerifyOptions, default_run_dir
from servekit.verify.progress import VerifyProgress
from servekit.verify.records import ledger_record, run_record
from servekit.verify.steps import Steps
from servekit.vocabulary import atomic_write_text

__all__ = ["VerifyOptions", "VerifyOutcome", "main", "verify"]

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
        """0 pass, 1 fail, 128 + the signal (130, 143) when interrupted."""
        stop = self.run.interrupted
        if stop is not None:
            return 128 + int(signal.Signals[stop.signal])
        return 0 if self.run.passed else 1


def _utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _check_kit_inputs(opts: VerifyOptions) -> None:
    if opts.kit is None and opts.kit_rows_asked:
        raise UsageError(
            "--kit-repo/--kit-base/--kit-smoke/--kit-nonce/--kit-baseline: give --kit ARCHIVE too"
        )
    if opts.kit_nonce is not None and opts.kit_smoke is None:
        raise UsageError("--kit-nonce applies to --kit-smoke: give --kit-smoke LOG too")
    if opts.kit_repo is not None and not opts.kit_repo.is_dir():
        raise UsageError(
            f"--kit-repo {opts.kit_repo}: no such folder; give the kit's source checkout"
        )
    if opts.kit_smoke is not None and not opts.kit_smoke.is_file():
        raise UsageError(f"--kit-smoke {opts.kit_smoke}: no such file; give selftest.sh's log")


def _check_inputs(opts: VerifyOptions) -> None:
    _check_kit_inputs(opts)
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
    engine = flow.opts.engine_choice
    # every record of the layout, those made under its old names (aliases.yaml) too
    records = [
        r
        for r in ledger_records(flow.loaded)
        if r.result == "pass" and r.engine == engine and r.layout == flow.loaded.layout.name
    ]
    for record in sorted(records, key=lambda r: r.date, reverse=True):
        bench = Path(record.report) / "bench" / "bench.json"
        if bench.is_file() and Path(record.report).resolve() != flow.run_dir:
            return bench, f"the previous passing {engine} run in the ledger ({record.day})"
    return None


def verify(
    opts: VerifyOptions,
    parts: Components,
    clock: Clock = _utc_now,
    progress: VerifyProgress | None = None,
) -> VerifyOutcome:
    """Run the whole flow and return where its report is."""
    loaded = load(opts.name, opts.catalog)
    _check_inputs(opts)
    check_attach_inputs(opts, loaded.layout)
    started = clock()
    # under the layout's own name, whichever of its names (aliases.yaml) was given
    wanted = (opts.out or default_run_dir(loaded.layout.name, started)).resolve()
    made = not wanted.exists()
    run_dir = _fresh_run_dir(wanted)
    flow = Flow(opts, loaded, parts, run_dir, Steps(), progress=progress or VerifyProgress())
    flow.made_run_dir = made
    _write_static(flow)
    with Interrupts() as interrupts:
        flow.steps.interrupt_name = interrupts.name
        stopped = None
        try:
            flow.up()
            flow.measure()
        except KeyboardInterrupt:
            stopped = flow.interruption(interrupts.name(), _running_step(flow))
        finally:
            with interrupts.shielded():
                flow.down()
        with interrupts.shielded():
            return _finish(flow, started, clock(), stopped)


def _running_step(flow: Flow) -> str | None:
    """The step an interrupt stopped: the last one recorded as interrupted."""
    for outcome in reversed(flow.steps.outcomes):
        if outcome.detail.startswith("interrupted by"):
            return outcome.name
    return flow.steps.current


def _finish(
    flow: Flow, started: dt.datetime, finished: dt.datetime, stopped: Interruption | None
) -> VerifyOutcome:
    """run.json, the reports, the checksums and (on pass) the ledger record."""
    run_dir = flow.run_dir
    run = run_record(flow, started, finished, stopped)
    atomic_write_text(run_dir / RUN_FILE, run.model_dump_json(indent=2) + "\n")
    md, html = build_report(run_dir)
    sums = write_sums(run_dir)
    record = ledger = None
    if run.passed and flow.opts.record:
        record = ledger_record(run, flow.accept, sums, run_dir)
        ledger = append_record(flow.loaded, record)
    return VerifyOutcome(run, run_dir, md, html, sums, ledger, record)


def main(opts: VerifyOptions) -> int:
    """``servekit verify``: run the flow with the real parts and print where its report is.

    Prints the report's first lines, the ledger line and the paths; the exit
    code is the run's.
    """
    from servekit.verify.adapters import real_components

    outcome = verify(opts, real_components(opts.catalog))
    for line in outcome.run_dir.joinpath("report.md").read_text().splitlines()[:3]:
        if line.strip():
            print(line)
    if outcome.ledger is not None:
        print(f"ledger: {outcome.ledger} (+1 {outcome.run.engine} record)")
    else:
        print("ledger: unchanged (only a passing run is recorded)")
    print(f"report: {outcome.report_md}")
    print(f"html:   {outcome.report_html}")
    return outcome.exit_code
