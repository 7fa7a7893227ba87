"""servekit verify end to end on the simulator: report, evidence, ledger, teardown."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest

from servekit.accept.models import AcceptResult, CheckResult
from servekit.catalog.ledger import read_records, verification_status
from servekit.catalog.loader import load
from servekit.errors import UsageError
from servekit.kit import KitVerifyOptions
from servekit.report.build import build_report
from servekit.report.models import KitCheck
from servekit.verify.run import VerifyOptions, VerifyOutcome, verify

from .support import SimRunner, components

LINK = re.compile(r"\]\(([^)]+)\)")


def options(catalog: Path, out: Path, **kw: object) -> VerifyOptions:
    base: dict[str, object] = {
        "name": "local/1p1d",
        "engine": "sim",
        "out": out,
        "catalog": str(catalog),
    }
    base.update(kw)
    return VerifyOptions.model_validate(base)


def passed(out: VerifyOutcome) -> VerifyOutcome:
    """The outcome, after checking the run passed (the steps say why when not)."""
    assert out.exit_code == 0, [s for s in out.run.steps if s.status != "ok"]
    return out


@pytest.mark.slow
def test_passing_sim_run_writes_report_evidence_and_a_sim_ledger_record(
    catalog: Path, tmp_path: Path, runner: SimRunner
) -> None:
    out = passed(verify(options(catalog, tmp_path / "run"), components(runner)))
    assert runner.ups == runner.downs == ["local/1p1d"]
    lines = out.report_md.read_text().splitlines()
    assert lines[0] == "# Verification of local/1p1d: PASS (simulated)"
    accept = out.run_dir / "accept" / "result.json"
    n = AcceptResult.model_validate_json(accept.read_text()).counts.passed
    assert f"acceptance {n}/{n} passed, 0 failed, " in lines[2] and "(simulated)" in lines[2]
    assert "single-stream decode" in lines[2] and "tok/s" in lines[2]
    assert "prefill" in lines[2]
    assert out.record is not None and out.record.engine == "sim"
    assert read_records(out.ledger) == [out.record]  # type: ignore[arg-type]
    status = verification_status(load("local/1p1d", catalog))
    assert status.state == "simulated-only"
    assert "not hardware-verified" in status.reason


@pytest.mark.slow
def test_every_link_in_the_report_opens_a_file_of_the_run(
    catalog: Path, tmp_path: Path, runner: SimRunner
) -> None:
    out = passed(verify(options(catalog, tmp_path / "run"), components(runner)))
    links = LINK.findall(out.report_md.read_text())
    assert len(links) > 20
    for href in links:
        assert (out.run_dir / href).is_file(), href
    html = out.report_html.read_text()
    assert "http://" not in html.replace("http://127.0.0.1", "")
    assert "<link" not in html and "<script src" not in html


@pytest.mark.slow
def test_checksums_cover_every_file_and_the_ledger_keeps_their_digest(
    catalog: Path, tmp_path: Path, runner: SimRunner
) -> None:
    out = passed(verify(options(catalog, tmp_path / "run"), components(runner)))
    sums = (out.run_dir / "SHA256SUMS").read_text()
    assert hashlib.sha256(sums.encode()).hexdigest() == out.evidence_sha256
    assert out.record is not None and out.record.evidence_sha256 == out.evidence_sha256
    listed = {}
    for line in sums.splitlines():
        digest, rel = line.split("  ", 1)
        listed[rel] = digest
        assert hashlib.sha256((out.run_dir / rel).read_bytes()).hexdigest() == digest
    files = {p.relative_to(out.run_dir).as_posix() for p in out.run_dir.rglob("*") if p.is_file()}
    assert set(listed) == files - {"SHA256SUMS"}
    assert "report.md" in listed and "bench/bench.json" in listed


@pytest.mark.slow
def test_sim_figures_are_labelled_simulated_everywhere(
    catalog: Path, tmp_path: Path, runner: SimRunner
) -> None:
    out = passed(verify(options(catalog, tmp_path / "run"), components(runner)))
    md = out.report_md.read_text()
    table = md.split("## Verification", 1)[1].split("##", 1)[0]
    rows = [r for r in table.splitlines() if "tok/s" in r or "tokens" in r]
    assert rows
    assert all("(simulated)" in r for r in rows)
    assert "never counts as hardware verification" in md
    assert "Quick mode" in md


@pytest.mark.slow
def test_failed_acceptance_fails_the_run_keeps_the_ledger_and_tears_down(
    catalog: Path, tmp_path: Path, runner: SimRunner
) -> None:
    def bad_accept(deployment: object, out_dir: Path, contexts: object) -> AcceptResult:
        check = CheckResult(id="needle.2k.A", group="needle", verdict="fail", reason="wrong code")
        return AcceptResult(
            target="x", model="m", simulated=True, started_at="t", duration_s=0.1, checks=(check,)
        )

    out = verify(options(catalog, tmp_path / "run"), components(runner, accept=bad_accept))
    assert out.exit_code == 1
    assert out.record is None and out.ledger is None
    assert runner.downs == ["local/1p1d"]
    md = out.report_md.read_text()
    assert md.startswith("# Verification of local/1p1d: FAIL (simulated)")
    assert "0/1 passed, 1 failed" in md and "needle.2k.A" in md
    assert not (catalog / "local/1p1d/verification.jsonl").exists()


def test_failed_start_still_reports_and_skips_measurements(catalog: Path, tmp_path: Path) -> None:
    runner = SimRunner(fail_up=True)
    out = verify(options(catalog, tmp_path / "run"), components(runner))
    assert out.exit_code == 1
    steps = {s.name: s for s in out.run.steps}
    assert steps["up"].status == "fail" and "engine died" in steps["up"].detail
    assert steps["accept"].status == steps["bench"].status == "skipped"
    assert runner.downs == ["local/1p1d"]  # teardown is attempted after a failed start
    assert "The acceptance suite did not run." in out.report_md.read_text()


def test_interrupt_during_bench_tears_down_and_reports_it(
    catalog: Path, tmp_path: Path, runner: SimRunner
) -> None:
    def interrupted(*_: object) -> object:
        raise KeyboardInterrupt

    out = verify(options(catalog, tmp_path / "run"), components(runner, bench=interrupted))
    assert runner.downs == ["local/1p1d"]
    assert out.exit_code == 130 and out.record is None and out.ledger is None
    stop = out.run.interrupted
    assert stop is not None and stop.signal == "SIGINT" and stop.step == "bench"
    assert stop.finished == ("up", "accept")
    steps = {s.name: s for s in out.run.steps}
    assert steps["bench"].status == "fail" and steps["bench"].detail == "interrupted by SIGINT"
    assert steps["down"].status == "ok"
    md = out.report_md.read_text()
    assert md.startswith("# Verification of local/1p1d: INTERRUPTED (simulated)")
    assert "Interrupted by SIGINT while bench was running" in md
    assert (out.run_dir / "SHA256SUMS").is_file()


@pytest.mark.slow
def test_baseline_gives_before_after_with_deltas(
    catalog: Path, tmp_path: Path, runner: SimRunner
) -> None:
    first = passed(verify(options(catalog, tmp_path / "one"), components(runner)))
    baseline = first.run_dir / "bench" / "bench.json"
    second = passed(
        verify(options(catalog, tmp_path / "two", baseline=baseline), components(runner))
    )
    md = second.report_md.read_text()
    changed = md.split("## What changed against the baseline", 1)[1].split("## Verification")[0]
    rows = [r for r in changed.splitlines() if r.startswith("| ") and "->" in r][1:]
    assert any("single_stream ISL=128 tok_per_s" in r for r in rows)
    assert all(r.count("(simulated)") == 2 for r in rows)
    assert all(re.search(r"\| [+-]\d+\.\d%|\| n/a", r) for r in rows)
    assert "(baseline.json)" in changed
    assert (second.run_dir / "baseline.json").read_bytes() == baseline.read_bytes()


@pytest.mark.slow
def test_without_baseline_the_section_says_how_to_get_one(
    catalog: Path, tmp_path: Path, runner: SimRunner
) -> None:
    out = passed(verify(options(catalog, tmp_path / "run"), components(runner)))
    assert "No baseline: no --baseline FILE was given" in out.report_md.read_text()


@pytest.mark.slow
def test_the_previous_passing_run_in_the_ledger_is_the_default_baseline(
    catalog: Path, tmp_path: Path, runner: SimRunner
) -> None:
    first = passed(verify(options(catalog, tmp_path / "one"), components(runner)))
    second = passed(verify(options(catalog, tmp_path / "two"), components(runner)))
    assert second.run.baseline_source is not None
    assert second.run.baseline_source.startswith("the previous passing sim run in the ledger")
    copied = (second.run_dir / "baseline.json").read_bytes()
    assert copied == (first.run_dir / "bench" / "bench.json").read_bytes()
    assert "single_stream ISL=128 tok_per_s" in second.report_md.read_text()
    third = passed(
        verify(options(catalog, tmp_path / "three", no_baseline=True), components(runner))
    )
    assert third.run.files.baseline is None


@pytest.mark.slow
@pytest.mark.parametrize("alias", [True, False])
def test_a_run_recorded_under_an_old_name_is_the_default_baseline(
    catalog: Path, tmp_path: Path, runner: SimRunner, alias: bool
) -> None:
    """A passing run recorded under a name that is now an alias of the layout (as the
    runs of a3/1p1d are) is the layout's history: the next run compares with it
    (positive control: without the alias it is another layout's, and there is none)."""
    first = passed(verify(options(catalog, tmp_path / "one"), components(runner)))
    assert first.record is not None and first.ledger is not None
    old = first.record.model_copy(update={"layout": "local/old-1p1d"})
    first.ledger.write_text(old.model_dump_json() + "\n", encoding="utf-8")
    if alias:
        (catalog / "aliases.yaml").write_text("local/old-1p1d: local/1p1d\n", encoding="utf-8")
    second = passed(verify(options(catalog, tmp_path / "two"), components(runner)))
    if alias:
        assert second.run.baseline_source is not None
        assert second.run.baseline_source.startswith("the previous passing sim run")
        copied = (second.run_dir / "baseline.json").read_bytes()
        assert copied == (first.run_dir / "bench" / "bench.json").read_bytes()
    else:
        assert second.run.baseline_source is None and second.run.files.baseline is None


def test_attach_with_target_leaves_the_deployment_running(
    catalog: Path, tmp_path: Path, runner: SimRunner
) -> None:
    from servekit.sim.testing import running_sim

    from .support import sim_spec

    idle = SimRunner()
    with running_sim(sim_spec()) as sim:
        out = verify(options(catalog, tmp_path / "run", target=sim.url), components(idle))
    assert idle.ups == [] and idle.downs == []
    assert out.run.step("down") is not None
    md = out.report_md.read_text()
    assert f"Attached to a running deployment at {sim.url}" in md


@pytest.mark.slow
def test_kit_row_links_its_evidence_and_a_bad_kit_fails_the_run(
    catalog: Path, tmp_path: Path, runner: SimRunner
) -> None:
    archive = tmp_path / "kit.tar.zst"
    archive.write_bytes(b"kit")

    def kit(ok: bool):  # type: ignore[no-untyped-def]
        def check(opts: KitVerifyOptions) -> KitCheck:
            path, out_dir = opts.archive, opts.out
            assert out_dir is not None
            out_dir.mkdir(parents=True, exist_ok=True)
            (out_dir / "kit-verify.json").write_text('{"checks": []}\n')
            summary = "12/12 kit checks passed" if ok else "11/12 kit checks passed (payload)"
            return KitCheck(
                archive=str(path), ok=ok, summary=summary, evidence="kit/kit-verify.json"
            )

        return check

    good = verify(
        options(catalog, tmp_path / "good", kit=archive), components(runner, kit=kit(True))
    )
    assert good.exit_code == 0
    assert "[12/12 kit checks passed](kit/kit-verify.json)" in good.report_md.read_text()
    bad = verify(
        options(catalog, tmp_path / "bad", kit=archive), components(runner, kit=kit(False))
    )
    assert bad.exit_code == 1
    assert "❌ [11/12 kit checks passed (payload)]" in bad.report_md.read_text()


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("baseline", "missing.json", "--baseline"),
        ("kit", "missing.tar.zst", "--kit"),
        ("name", "local/nope", "unknown layout"),
    ],
)
def test_bad_input_is_a_usage_error_before_anything_starts(
    catalog: Path, tmp_path: Path, field: str, value: str, message: str
) -> None:
    runner = SimRunner()
    opts = options(
        catalog, tmp_path / "run", **{field: tmp_path / value if field != "name" else value}
    )
    with pytest.raises(UsageError, match=message):
        verify(opts, components(runner))
    assert runner.ups == []


@pytest.mark.slow
def test_report_is_rebuilt_identically_from_its_files(
    catalog: Path, tmp_path: Path, runner: SimRunner
) -> None:
    out = verify(options(catalog, tmp_path / "run"), components(runner))
    md, html = out.report_md.read_text(), out.report_html.read_text()
    out.report_md.unlink()
    out.report_html.unlink()
    build_report(out.run_dir)
    assert out.report_md.read_text() == md
    assert out.report_html.read_text() == html


@pytest.mark.slow
def test_out_folder_of_an_earlier_run_is_replaced_and_a_foreign_one_refused(
    catalog: Path, tmp_path: Path, runner: SimRunner
) -> None:
    out = tmp_path / "run"
    verify(options(catalog, out), components(runner))
    (out / "bench" / "points" / "leftover.json").write_text("{}")
    verify(options(catalog, out), components(runner))
    assert not (out / "bench" / "points" / "leftover.json").exists()
    foreign = tmp_path / "docs"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(UsageError, match="not empty"):
        verify(options(catalog, foreign), components(runner))
    assert (foreign / "notes.txt").read_text() == "mine"


def test_a_workload_without_a_valid_run_fails_the_run(
    catalog: Path, tmp_path: Path, runner: SimRunner
) -> None:
    from servekit.bench.schema import BenchInputs, BenchResult, Figure, Point

    def empty_bench(deployment: object, workloads: object, settings: object) -> BenchResult:
        point = Point(
            workload="single_stream",
            label="ISL=128",
            figures={"tok_per_s": Figure(unit="tok/s", median=None)},
        )
        inputs = BenchInputs(target="x", entry_url="http://127.0.0.1:1", engine="sim")
        return BenchResult(created="t", inputs=inputs, points=(point,))

    out = verify(options(catalog, tmp_path / "run"), components(runner, bench=empty_bench))
    assert out.exit_code == 1
    step = out.run.step("bench")
    assert step is not None and step.detail == "StepFailed: no valid run for single_stream ISL=128"
    assert "single-stream decode no valid run" in out.report_md.read_text().splitlines()[2]


def test_the_kit_is_checked_even_when_the_start_fails(catalog: Path, tmp_path: Path) -> None:
    archive = tmp_path / "kit.tar.zst"
    archive.write_bytes(b"kit")
    checked: list[Path] = []

    def kit(opts: KitVerifyOptions) -> KitCheck:
        path, out_dir = opts.archive, opts.out
        assert out_dir is not None
        checked.append(path)
        out_dir.mkdir(parents=True, exist_ok=True)
        return KitCheck(archive=str(path), ok=True, summary="1/1 kit checks passed")

    runner = SimRunner(fail_up=True)
    out = verify(options(catalog, tmp_path / "run", kit=archive), components(runner, kit=kit))
    assert out.exit_code == 1 and checked == [archive]
    assert out.run.step("kit") is not None and out.run.step("kit").status == "ok"  # type: ignore[union-attr]
