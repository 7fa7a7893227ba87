"""``servekit verify``: up (or attach) -> accept -> bench -> kit -> down -> report -> ledger.

Teardown always runs once something was started, also when a step fails or the
user interrupts. The report is written for failed runs too (it says what
failed); only a passing run adds a record to the layout's verification ledger.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from servekit import __version__
from servekit.accept.models import AcceptResult, write_result
from servekit.bench.schema import BenchResult, Point
from servekit.catalog.ledger import LedgerRecord, append_record, ledger_path, read_records
from servekit.catalog.loader import LoadedLayout, load
from servekit.deployment import Deployment
from servekit.errors import UsageError
from servekit.fsutil import atomic_write_text
from servekit.render.plan import build_plan
from servekit.report.build import RUN_FILE, build_report
from servekit.report.components import Components, EngineChoice
from servekit.report.evidence import sha256_file, write_sums
from servekit.report.models import Files, KitCheck, RunEngine, VerifyRun
from servekit.report.steps import StepFailed, Steps, one_line
from servekit.report.workloads import contexts_for, settings_for, workloads_for

Clock = Callable[[], dt.datetime]


class VerifyOptions(BaseModel):
    """Everything ``servekit verify`` was asked, checked before anything starts."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(description="layout name, e.g. local/1p1d")
    engine: EngineChoice = Field(default="vllm", description="--engine vllm|sim")
    target: str | None = Field(default=None, description="--target URL|NAME: attach instead")
    out: Path | None = Field(default=None, description="--out DIR: the run folder")
    baseline: Path | None = Field(default=None, description="--baseline FILE: a bench.json")
    kit: Path | None = Field(default=None, description="--kit ARCHIVE: self-check this kit")
    quick: bool | None = Field(default=None, description="short workloads; default: sim only")
    catalog: str | None = None
    record: bool = Field(default=True, description="append a ledger record on pass")
    no_baseline: bool = Field(
        default=False, description="do not compare with the last passing run in the ledger"
    )

    @property
    def is_quick(self) -> bool:
        return self.engine == "sim" if self.quick is None else self.quick


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


def reports_root() -> Path:
    """Where run folders go by default (``SERVEKIT_REPORTS`` overrides)."""
    return Path(os.environ.get("SERVEKIT_REPORTS", ".servekit/reports"))


def default_run_dir(name: str, started: dt.datetime) -> Path:
    return reports_root() / name.replace("/", "__") / started.strftime("%Y%m%dT%H%M%SZ")


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


@dataclass
class _Flow:
    """The state of one run while it goes through its steps."""

    opts: VerifyOptions
    loaded: LoadedLayout
    parts: Components
    run_dir: Path
    steps: Steps
    deployment: Deployment | None = None
    started_here: bool = False
    accept: AcceptResult | None = None
    bench: BenchResult | None = None
    kit: KitCheck | None = None
    files: Files = field(default_factory=Files)
    baseline_source: str | None = None

    def up(self) -> None:
        target = self.opts.target
        if target is not None:
            self.deployment = self.steps.run(
                "up", lambda: self.parts.attach(target), lambda d: f"attached to {d.entry_url}"
            )
            return
        self.started_here = True
        start = self.steps.now()
        try:
            dep = self.parts.runner.up(self.loaded, self.opts.engine)
        except UsageError:
            raise  # bad input (wrong hardware, port taken, no model): exit 2, no report
        except Exception as exc:
            self.steps.mark("up", False, one_line(exc), start)
            return
        self.deployment = dep
        self.steps.mark(
            "up", True, f"{len(dep.endpoints)} endpoints ready, entry {dep.entry_url}", start
        )

    def measure(self) -> None:
        dep = self.deployment
        if dep is None:
            self.steps.skip("accept", "not run: the deployment did not come up")
            self.steps.skip("bench", "not run: the deployment did not come up")
            return
        atomic_write_text(self.run_dir / "deployment.json", dep.model_dump_json(indent=2) + "\n")
        self.files = self.files.model_copy(update={"deployment": "deployment.json"})
        self._accept(dep)
        self._bench(dep)

    def _accept(self, dep: Deployment) -> None:
        layout = self.loaded.layout
        contexts = contexts_for(layout, self.opts.is_quick)
        out = self.run_dir / "accept"

        def go() -> AcceptResult:
            result = self.parts.accept(dep, out, contexts)
            write_result(result, out / "result.json")
            self.accept = result
            if not result.ok:
                c = result.counts
                raise StepFailed(f"{c.passed}/{c.ran} passed, {c.failed} failed")
            return result

        self.steps.run("accept", go, lambda r: f"{r.counts.passed}/{r.counts.ran} passed")
        if self.accept is not None:
            self.files = self.files.model_copy(update={"accept": "accept/result.json"})

    def _bench(self, dep: Deployment) -> None:
        layout = self.loaded.layout
        quick = self.opts.is_quick
        wl = workloads_for(layout, quick)

        def go() -> BenchResult:
            result = self.parts.bench(dep, wl, settings_for(quick))
            result.write(self.run_dir / "bench" / "bench.json")
            self.bench = result
            bad = [f"{p.workload} {p.label}" for p in result.points if p.errors]
            if bad:
                raise StepFailed(f"requests failed in {', '.join(bad)}")
            empty = [f"{p.workload} {p.label}" for p in result.points if _no_figure(p)]
            if empty:
                raise StepFailed(f"no valid run for {', '.join(empty)}")
            return result

        self.steps.run("bench", go, lambda r: f"{len(r.points)} points measured")
        if self.bench is not None:
            self.files = self.files.model_copy(update={"bench": "bench/bench.json"})

    def check_kit(self) -> None:
        archive = self.opts.kit
        if archive is None:
            self.steps.skip("kit", "no --kit given")
            return

        def go() -> KitCheck:
            result = self.parts.kit(archive, self.run_dir / "kit")
            atomic_write_text(
                self.run_dir / "kit" / "kit-check.json", result.model_dump_json(indent=2) + "\n"
            )
            self.kit = result
            if not result.ok:
                raise StepFailed(result.summary)
            return result

        self.steps.run("kit", go, lambda k: k.summary)
        if self.kit is not None:
            self.files = self.files.model_copy(update={"kit": "kit/kit-check.json"})

    def down(self) -> None:
        """Tear down what this run started; also after a failed or interrupted start."""
        if not self.started_here:
            self.steps.skip("down", "attached with --target: left running")
            return
        if self.deployment is None:
            try:
                detail = self.parts.runner.down(self.loaded)
            except Exception as exc:
                detail = f"nothing left to stop ({exc})"
            self.steps.skip("down", f"start-up failed; {detail}")
            return
        self.steps.run("down", lambda: self.parts.runner.down(self.loaded), lambda text: text)


def _no_figure(point: Point) -> bool:
    """A measured point none of whose figures has a value (KV capacity may be unknown)."""
    if point.workload == "kv_capacity" or not point.figures:
        return False
    return all(f.median is None for f in point.figures.values())


def _engine_of(opts: VerifyOptions, dep: Deployment | None) -> RunEngine:
    if dep is not None and dep.engine != "external":
        return dep.engine
    return opts.engine


def _write_static(flow: _Flow) -> None:
    """The plan and the baseline, copied in so the report rebuilds from this folder."""
    plan = build_plan(flow.loaded.layout)
    atomic_write_text(flow.run_dir / "plan.json", plan.model_dump_json(indent=2) + "\n")
    flow.files = flow.files.model_copy(update={"plan": "plan.json"})
    source = _baseline_source(flow)
    if source is not None:
        path, flow.baseline_source = source
        shutil.copyfile(path, flow.run_dir / "baseline.json")
        flow.files = flow.files.model_copy(update={"baseline": "baseline.json"})


def _baseline_source(flow: _Flow) -> tuple[Path, str] | None:
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


def _versions(flow: _Flow) -> dict[str, str]:
    found = dict(flow.loaded.layout.versions)
    if flow.deployment is not None and flow.opts.engine != "sim":
        for key in found:
            if key in flow.deployment.versions:
                found[key] = flow.deployment.versions[key]
    return found


def _run_record(flow: _Flow, started: dt.datetime, finished: dt.datetime) -> VerifyRun:
    layout = flow.loaded.layout
    dep = flow.deployment
    return VerifyRun(
        layout=layout.name,
        title=layout.title,
        engine=_engine_of(flow.opts, dep),
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
    )


def _ledger_record(run: VerifyRun, sums_sha: str, run_dir: Path) -> LedgerRecord:
    accept = None
    step = run.step("accept")
    if step is not None and step.status == "ok":
        accept = step.detail.split(" ", 1)[0]
    return LedgerRecord(
        layout=run.layout,
        image=run.image,
        versions=run.versions,
        servekit_version=run.servekit_version,
        date=run.finished,
        engine=run.engine,
        result="pass" if run.passed else "fail",
        acceptance=accept,
        evidence_sha256=sums_sha,
        report=str(run_dir),
    )


def verify(opts: VerifyOptions, parts: Components, clock: Clock = _utc_now) -> VerifyOutcome:
    """Run the whole flow and return where its report is."""
    loaded = load(opts.name, opts.catalog)
    _check_inputs(opts)
    started = clock()
    run_dir = _fresh_run_dir((opts.out or default_run_dir(opts.name, started)).resolve())
    flow = _Flow(opts, loaded, parts, run_dir, Steps())
    _write_static(flow)
    try:
        flow.up()
        flow.measure()
        flow.check_kit()
    finally:
        flow.down()
    run = _run_record(flow, started, clock())
    atomic_write_text(run_dir / RUN_FILE, run.model_dump_json(indent=2) + "\n")
    md, html = build_report(run_dir)
    sums = write_sums(run_dir)
    record = ledger = None
    if run.passed and opts.record:
        record = _ledger_record(run, sums, run_dir)
        ledger = append_record(loaded, record)
    return VerifyOutcome(run, run_dir, md, html, sums, ledger, record)


def archive_sha(path: Path) -> str:
    """sha256 of a kit archive (for the kit row)."""
    return sha256_file(path)
