"""Small pieces of the report: number formats, workloads, boundaries, usage, verdicts."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from servekit.accept.models import AcceptResult, CheckResult
from servekit.bench.config import KVCapacity, MultiStream, Prefill, SingleStream
from servekit.catalog.loader import load
from servekit.catalog.schema import VERIFY_WORKLOADS
from servekit.errors import UsageError
from servekit.numbers import delta, fmt
from servekit.render.plan import build_plan
from servekit.report.boundaries import boundaries
from servekit.report.figures import cache_row, headline
from servekit.report.models import StepOutcome, VerifyRun
from servekit.report.usage import usage
from servekit.verify.workloads import contexts_for, workloads_for


@pytest.mark.parametrize(
    ("value", "unit", "text"),
    [
        (2987727, "tokens", "2,987,727"),
        (113.44, "tok/s", "113.4"),
        (24.844, "ms", "24.84"),
        (7135.2, "tok/s", "7,135"),
        (0.843, "", "0.843"),
        (0.0, "ms", "0.00"),
        (0.0363, "ms", "0.0363"),
        (None, "ms", "n/a"),
    ],
)
def test_fmt(value: float | None, unit: str, text: str) -> None:
    assert fmt(value, unit) == text


def test_delta() -> None:
    assert delta(113.4, 116.4) == "+2.6%"
    assert delta(25.28, 24.84) == "-1.7%"
    assert delta(None, 1.0) == delta(0.0, 1.0) == "n/a"


def test_quick_workloads_follow_the_layout_and_add_kv(catalog: Path) -> None:
    layout = load("local/1p1d", str(catalog)).layout
    wl = workloads_for(layout, quick=True)
    assert [type(w) for w in wl] == [SingleStream, MultiStream, Prefill, KVCapacity]
    multi = wl[1]
    assert isinstance(multi, MultiStream) and multi.streams == layout.verify.concurrency
    assert isinstance(wl[0], SingleStream) and wl[0].prompt_tokens == 128
    full = workloads_for(layout, quick=False)
    assert isinstance(full[0], SingleStream) and full[0].prompt_tokens == 1024


@pytest.mark.parametrize("quick", [True, False])
def test_every_workload_the_schema_allows_builds(catalog: Path, quick: bool) -> None:
    layout = load("local/1p1d", str(catalog)).layout
    every = layout.model_copy(
        update={"verify": layout.verify.model_copy(update={"workloads": VERIFY_WORKLOADS})}
    )
    built = workloads_for(every, quick=quick)
    assert len(built) == len(VERIFY_WORKLOADS)
    assert len({type(w) for w in built}) == len(VERIFY_WORKLOADS)


def test_unknown_workload_names_the_field(catalog: Path) -> None:
    layout = load("local/1p1d", str(catalog)).layout
    bad = layout.model_copy(
        update={"verify": layout.verify.model_copy(update={"workloads": ("x",)})}
    )
    with pytest.raises(UsageError, match=r"verify\.workloads has unknown workload 'x'"):
        workloads_for(bad, quick=True)


def test_contexts_fit_the_model(catalog: Path) -> None:
    assert contexts_for(load("local/1p1d", str(catalog)).layout, quick=False) == ("2k",)
    assert contexts_for(load("a3/1p1d", str(catalog)).layout, quick=False) == ("144k", "1m")
    assert contexts_for(load("a3/1p1d", str(catalog)).layout, quick=True) == ("2k",)


def run_record(**kw: object) -> VerifyRun:
    base: dict[str, object] = {
        "layout": "a3/2p2d",
        "title": "t",
        "engine": "sim",
        "image": "img",
        "servekit_version": "0.1.0",
        "started": dt.datetime(2026, 11, 1, tzinfo=dt.UTC),
        "finished": dt.datetime(2026, 11, 1, 0, 5, tzinfo=dt.UTC),
        "steps": (
            StepOutcome(name="up", status="ok"),
            StepOutcome(name="accept", status="ok"),
            StepOutcome(name="bench", status="ok"),
        ),
        "declared_workloads": ("single-stream", "prefill"),
        "derived_from": "a3/1p1d",
    }
    base.update(kw)
    return VerifyRun.model_validate(base)


def test_verdict_needs_up_accept_bench_and_a_good_kit() -> None:
    assert run_record().passed
    kit_bad = (*run_record().steps, StepOutcome(name="kit", status="fail"))
    assert not run_record(steps=kit_bad).passed
    down_bad = (*run_record().steps, StepOutcome(name="down", status="fail", detail="x"))
    assert run_record(steps=down_bad).passed
    assert not run_record(steps=run_record().steps[:2]).passed


def test_boundaries_name_sim_derivation_skips_and_missing_workloads() -> None:
    skip = [
        CheckResult(id=f"needle.2k.{c}", group="needle", verdict="skip", reason="no retrieval")
        for c in "AB"
    ]
    accept = AcceptResult(
        target="x", model="m", simulated=True, started_at="t", duration_s=1.0,
        contexts=(2048,), checks=tuple(skip),
    )  # fmt: skip
    lines = boundaries(run_record(), accept, None, None)
    text = "\n".join(lines)
    assert lines[0].startswith("Every figure in this report comes from simulated engines")
    assert "derived from a3/1p1d" in text.lower()
    assert "Skipped 2 checks (needle.2k.A, needle.2k.B): no retrieval" in text
    assert "No benchmark ran" in text
    assert "No image kit was given" in text
    assert "No long-context (needle) check ran." in text


def test_usage_for_a_cluster_layout_renders_and_names_the_entry(catalog: Path) -> None:
    plan = build_plan(load("a3/1p1d", str(catalog)).layout)
    steps = usage(plan)
    lines = [line for s in steps for line in s.lines]
    # a3/1p1d is an alias: the usage names the layout it loads
    out = "out/a3-deepseekv4-flash-1p1d"
    assert f"servekit render a3/deepseekv4-flash/1p1d --target modelarts --out {out}" in lines
    assert any(x.startswith("sh /root/script/run.sh") for x in lines)  # ModelArts: one entry
    # node folders only where the nodes target wrote them (tests/platforms/test_start.py)
    assert f"servekit render a3/deepseekv4-flash/1p1d --target nodes --out {out}-nodes" in lines
    assert f"bash {out}-nodes/node1/run.sh   # on node 1" in lines
    assert not any(f"{out}/node" in x for x in lines)
    assert any(
        "http://${NODE0_IP}:8080/v1/chat/completions" in x and "deepseek_v4" in x for x in lines
    )


def test_usage_for_a_local_layout_uses_up(catalog: Path) -> None:
    plan = build_plan(load("local/1p1d", str(catalog)).layout)
    lines = [line for s in usage(plan) for line in s.lines]
    assert lines[0] == "servekit up local/1p1d"
    assert "http://127.0.0.1:8000/v1/chat/completions" in lines[1]


def test_boundaries_name_the_contexts_when_needles_ran() -> None:
    check = CheckResult(id="needle.2k.A", group="needle", verdict="pass", reason="found")
    accept = AcceptResult(
        target="x", model="m", simulated=False, started_at="t", duration_s=1.0,
        contexts=(2048,), checks=(check,),
    )  # fmt: skip
    lines = boundaries(run_record(engine="vllm", derived_from=None), accept, None, None)
    assert "Long-context acceptance ran at 2,048 tokens only." in lines
    assert not any("simulated" in line for line in lines)


def test_boundaries_say_when_a_point_has_no_valid_run() -> None:
    from servekit.bench.schema import BenchInputs, BenchResult, Figure, Point

    empty = Figure(unit="tok/s", median=None)
    point = Point(workload="single_stream", label="ISL=128", figures={"tok_per_s": empty})
    bench = BenchResult(
        created="t", inputs=BenchInputs(target="x", entry_url="http://127.0.0.1:1"), points=(point,)
    )
    lines = boundaries(run_record(), None, bench, None)
    assert "single_stream ISL=128: no valid run; no figure is claimed." in lines
    assert "Declared workload prefill produced no figure." in lines


def test_kit_adapter_runs_the_real_kit_verifier_and_keeps_its_evidence(tmp_path: Path) -> None:
    import json

    from servekit.kit import KitVerifyOptions
    from servekit.verify.adapters import kit

    archive = tmp_path / "broken-kit.tar.zst"
    archive.write_bytes(b"not a kit")
    check = kit(KitVerifyOptions(archive=archive, out=tmp_path / "kit"))
    assert not check.ok
    assert check.evidence == "kit/kit-verify.json"
    assert check.summary.startswith("0/") and "kit checks passed (sidecar" in check.summary
    report = json.loads((tmp_path / "kit" / "kit-verify.json").read_text())
    assert any(c["status"] == "fail" for c in report["checks"])
    assert check.archive_sha256 is not None and len(check.archive_sha256) == 64


def test_kv_capacity_of_identical_ranks_reads_as_one_part() -> None:
    from servekit.bench.schema import BenchInputs, BenchResult, Figure, Point
    from servekit.report.figures import kv_row

    def point(name: str, role: str, tokens: float) -> Point:
        fig = Figure(unit="tokens", median=tokens)
        return Point(
            workload="kv_capacity",
            label=name,
            params={"role": role},
            figures={"kv_cache_tokens": fig},
        )

    points = (
        point("p.dp0", "prefill", 100.0),
        *(point(f"d.dp{i}", "decode", 2987648.0) for i in range(3)),
    )
    bench = BenchResult(
        created="t", inputs=BenchInputs(target="x", entry_url="http://127.0.0.1:1"), points=points
    )
    files = {p.key: f"bench/points/{p.label}.json" for p in points}
    row = kv_row("KV capacity", bench, files)
    assert row is not None and row.mark == "ok"
    assert [(p.text, p.href) for p in row.parts] == [
        ("p.dp0: KV 100 tokens", "bench/points/p.dp0.json"),
        ("decode x3 (d.dp0 .. d.dp2): KV 2,987,648 tokens each", "bench/points/d.dp0.json"),
    ]


def _accept(*verdicts: tuple[str, str, str]) -> AcceptResult:
    checks = tuple(
        CheckResult(id=i, group=i.split(".")[0], verdict=v, reason=r)  # type: ignore[arg-type]
        for i, v, r in verdicts
    )
    return AcceptResult(
        target="x", model="m", simulated=True, started_at="t", duration_s=1.0, checks=checks
    )


def test_the_headline_says_passed_failed_and_skipped_with_the_reason_in_a_word() -> None:
    accept = _accept(
        ("api.sse", "pass", "ok"),
        ("vision.image", "skip", "the model does not declare the vision capability"),
        ("vision.multi", "skip", "the model does not declare the vision capability"),
        ("pd.single", "skip", "no reference endpoint given (Deployment.reference_url)"),
    )
    run = run_record(files={"accept": "accept/result.json"})
    first = headline(run, accept, None, {})[0].text
    assert first == (
        "acceptance 1/1 passed, 0 failed, 3 skipped (capability 2, reference 1) (simulated)"
    )
    real = headline(run_record(engine="vllm"), accept, None, {})[0].text
    assert real.endswith("(real engines)")
    doubtful = headline(run_record(engine="unconfirmed"), accept, None, {})[0].text
    assert doubtful.endswith("(engines unconfirmed)")


def test_a_row_whose_checks_were_all_skipped_is_no_failure() -> None:
    skips = _accept(("cache.prefix.x", "skip", "not a PD deployment"))
    row = cache_row(run_record(), skips, "accept")
    assert row is not None and row.mark == "none"  # drawn as –, never the red ✗
    failing = _accept(("cache.prefix.x", "skip", "n/a"), ("cache.prefix.y", "fail", "slow"))
    row = cache_row(run_record(), failing, "accept")
    assert row is not None and row.mark == "fail"
