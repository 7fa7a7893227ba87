"""Rebuild the report of a verify run from its folder: ``report.md`` and ``report.html``.

Inputs are only the run's files (``run.json``, the acceptance and benchmark
results, the kit check, the plan, the baseline), so a report can be rebuilt,
diffed or re-rendered later, and nothing in it is typed by hand.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from servekit.accept import AcceptResult, read_result
from servekit.bench import BenchResult
from servekit.catalog import NOT_OBSERVED
from servekit.errors import UsageError
from servekit.render import Plan
from servekit.report import baseline as baseline_mod
from servekit.report.boundaries import boundaries
from servekit.report.evidence import checksums, write_point_files
from servekit.report.figures import PointFiles, headline, sim_suffix, verification_table
from servekit.report.kittable import kit_section
from servekit.report.models import KitCheck, VerifyRun
from servekit.report.plots import report_plots
from servekit.report.templates_env import render_template
from servekit.report.usage import usage
from servekit.report.view import Change, Mark, Part, Plot, ReportView, Row
from servekit.vocabulary import UNCONFIRMED

RUN_FILE = "run.json"
REPORT_MD = "report.md"
REPORT_HTML = "report.html"
REPORT_FILES = (REPORT_MD, REPORT_HTML)


@dataclass(frozen=True)
class Inputs:
    """Everything read back from a run folder."""

    run: VerifyRun
    accept: AcceptResult | None
    bench: BenchResult | None
    baseline: BenchResult | None
    kit: KitCheck | None
    plan: Plan | None


def read_run(run_dir: Path) -> VerifyRun:
    path = run_dir / RUN_FILE
    if not path.is_file():
        raise UsageError(f"{run_dir}: no {RUN_FILE}; give the folder 'servekit verify' wrote")
    return VerifyRun.model_validate_json(path.read_text(encoding="utf-8"))


def read_inputs(run_dir: Path) -> Inputs:
    run = read_run(run_dir)
    f = run.files

    def path(rel: str | None) -> Path | None:
        return run_dir / rel if rel and (run_dir / rel).is_file() else None

    accept = path(f.accept)
    bench = path(f.bench)
    base = path(f.baseline)
    kit = path(f.kit)
    plan = path(f.plan)
    return Inputs(
        run=run,
        accept=read_result(accept) if accept else None,
        bench=BenchResult.read(bench) if bench else None,
        baseline=BenchResult.read(base) if base else None,
        kit=KitCheck.model_validate_json(kit.read_text()) if kit else None,
        plan=Plan.model_validate_json(plan.read_text()) if plan else None,
    )


def speeds(run: VerifyRun) -> str | None:
    """``acceptance at 50x, benchmarks at 1x`` for simulated runs whose speed is known."""
    found = [(w, s) for w, s in (("acceptance", run.accept_speed), ("benchmarks", run.bench_speed))]
    known = [f"{what} at {speed:g}x" for what, speed in found if speed is not None]
    if not run.simulated or not known:
        return None
    return ", ".join(known) + " (virtual seconds per wall second)"


def _interrupted(run: VerifyRun) -> str | None:
    stop = run.interrupted
    if stop is None:
        return None
    during = f" during {stop.step}" if stop.step else ""
    done = ", ".join(stop.finished) or "nothing"
    more = f"; {stop.detail}" if stop.detail else ""
    return f"by {stop.signal}{during}; finished before it: {done}{more}"


ENGINE_WORDS = {
    "sim": "simulated engines (servekit sim)",
    "vllm": "real vLLM engines",
    "unconfirmed": "unconfirmed: the engines could not be identified",
    "external": "unconfirmed: the engines were not asked",
}


def _observed(run: VerifyRun, fact: str) -> str:
    """`` (observed: how)`` for a fact, or that the run did not record how."""
    if run.observed is None:
        return " (how it was observed was not recorded)"
    how = run.observed.get(fact)
    return f" (observed: {how})" if how and how != NOT_OBSERVED else ""


def _facts(run: VerifyRun) -> tuple[Row, ...]:
    engine = ENGINE_WORDS.get(run.engine, run.engine) + _observed(run, "engine")
    versions = (
        ", ".join(f"{k} {v}{_observed(run, k)}" for k, v in sorted(run.versions.items()))
        or NOT_OBSERVED
    )
    took = (run.finished - run.started).total_seconds()
    rows = [
        Row("Layout", (Part(f"{run.layout}: {run.title}", run.files.plan),)),
        Row("Engine", (Part(engine, run.files.deployment),)),
        Row("Image", (Part(run.image + _observed(run, "image")),)),
        Row("Versions", (Part(versions),)),
        Row("servekit", (Part(run.servekit_version),)),
        Row("When", (Part(f"{run.started.isoformat(timespec='seconds')}, {took:.0f} s"),)),
    ]
    if run.target:
        rows.append(Row("Target", (Part(run.target),)))
    preflight = (run.observed or {}).get("preflight")
    if preflight:
        mark: Mark = (
            "ok" if preflight.startswith("passed") else "fail" if "FAILED" in preflight else "none"
        )
        rows.append(Row("Preflight", (Part(preflight, run.files.preflight),), mark))
    speed = speeds(run)
    if speed:
        rows.append(Row("Simulated speed", (Part(speed),)))
    stop = _interrupted(run)
    if stop:
        rows.append(Row("Interrupted", (Part(stop),), "fail"))
    return tuple(rows)


def _steps(run: VerifyRun) -> tuple[Row, ...]:
    out: list[Row] = []
    for s in run.steps:
        mark: Mark = "ok" if s.status == "ok" else "fail" if s.status == "fail" else "none"
        out.append(Row(s.name, (Part(f"{s.status}: {s.detail} ({s.duration_s:.1f} s)"),), mark))
    return tuple(out)


def _accept_rows(accept: AcceptResult | None, accept_dir: str) -> tuple[Row, ...]:
    if accept is None:
        return ()
    rows: list[Row] = []
    for c in accept.checks:
        responses = [e for e in c.evidence if e.kind == "response"]
        href = f"{accept_dir}/{responses[0].path}" if responses else f"{accept_dir}/result.json"
        mark: Mark = "ok" if c.verdict == "pass" else "fail" if c.verdict == "fail" else "none"
        rows.append(Row(c.id, (Part(f"{c.verdict}: {c.reason}", href),), mark))
    return tuple(rows)


def _changes(inputs: Inputs, files: PointFiles) -> tuple[tuple[Change, ...], str]:
    run = inputs.run
    if inputs.bench is None:
        return (), "No benchmark ran, so nothing can be compared."
    if inputs.baseline is None:
        return (), (
            "No baseline: no --baseline FILE was given and the ledger holds no earlier passing "
            "run of this layout on this engine whose results are still here."
        )
    changes = baseline_mod.compare(inputs.baseline, inputs.bench, files, run.files.baseline)
    base = inputs.baseline
    where = base.inputs.image or base.inputs.target
    source = f" ({run.baseline_source})" if run.baseline_source else ""
    return changes, f"Against the baseline measured {base.created} on {where}{source}."


def build_view(
    run_dir: Path, inputs: Inputs, files: PointFiles, plots: tuple[Plot, ...] = ()
) -> ReportView:
    """Compute every section of the report from the inputs."""
    run = inputs.run
    accept_dir = str(Path(run.files.accept).parent.as_posix()) if run.files.accept else "accept"
    changes, note = _changes(inputs, files)
    sums = tuple(
        (c.path, c.sha256, c.size)
        for c in checksums(run_dir, exclude=(*REPORT_FILES, "SHA256SUMS"))
    )
    verdict = run.verdict
    kit_title, kit_rows = kit_section(run_dir, inputs.kit)
    return ReportView(
        title=f"Verification of {run.layout}: {verdict}"
        + (" (simulated)" if run.simulated else "")
        + (" (unconfirmed engines)" if run.engine in UNCONFIRMED else ""),
        layout=run.layout,
        verdict=verdict,
        headline=headline(run, inputs.accept, inputs.bench, files),
        facts=_facts(run),
        changes=changes,
        changes_note=note,
        table=verification_table(
            run,
            accept=inputs.accept,
            bench=inputs.bench,
            kit=inputs.kit,
            files=files,
            accept_dir=accept_dir,
        ),
        accept_rows=_accept_rows(inputs.accept, accept_dir),
        usage=usage(inputs.plan) if inputs.plan else (),
        checksums=sums,
        boundaries=boundaries(run, inputs.accept, inputs.bench, inputs.kit),
        steps=_steps(run),
        simulated=run.simulated,
        plots=plots,
        kit_title=kit_title,
        kit_rows=kit_rows,
    )


def build_report(run_dir: Path) -> tuple[Path, Path]:
    """(Re)write ``report.md`` and ``report.html`` in ``run_dir``; returns their paths."""
    inputs = read_inputs(run_dir)
    files = write_point_files(run_dir, inputs.bench) if inputs.bench else {}
    bench = inputs.bench
    source = sim_suffix(inputs.run, bench.inputs.sim_speed) if bench else ""
    plots = report_plots(run_dir, bench, source) if bench else ()
    view = build_view(run_dir, inputs, files, plots)
    md = run_dir / REPORT_MD
    html = run_dir / REPORT_HTML
    render_template("report.md.j2", md, view=view)
    render_template("report.html.j2", html, view=view)
    return md, html
