"""What the report says about speeds and interrupts, from run.json alone."""

from __future__ import annotations

import datetime as dt

from servekit.report.boundaries import boundaries
from servekit.report.build import speeds
from servekit.report.models import Interruption, StepOutcome, VerifyRun

T0 = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)


def run(**kw: object) -> VerifyRun:
    base: dict[str, object] = {
        "layout": "a3/1p1d",
        "title": "t",
        "engine": "sim",
        "image": "img",
        "servekit_version": "0",
        "started": T0,
        "finished": T0,
        "steps": (
            StepOutcome(name="up", status="ok"),
            StepOutcome(name="accept", status="ok"),
            StepOutcome(name="bench", status="ok"),
        ),
    }
    base.update(kw)
    return VerifyRun.model_validate(base)


def test_speeds_are_stated_and_a_fast_run_is_a_boundary() -> None:
    r = run(accept_speed=50.0, bench_speed=1.0)
    assert speeds(r) == "acceptance at 50x, benchmarks at 1x (virtual seconds per wall second)"
    lines = boundaries(r, None, None, None)
    assert any("Acceptance ran on simulated time at 50x speed" in b for b in lines)
    assert not any("benchmarks ran on simulated time" in b for b in lines)
    assert speeds(run(engine="vllm", accept_speed=None)) is None


def test_an_attached_simulator_of_unknown_speed_says_so() -> None:
    lines = boundaries(run(target="http://h:8080"), None, None, None)
    assert any("speed is unknown" in b for b in lines)


def test_an_interrupted_run_never_passes_and_says_what_finished() -> None:
    stop = Interruption(signal="SIGTERM", step="bench", finished=("up", "accept"), detail="")
    r = run(interrupted=stop)
    assert not r.passed and r.verdict == "INTERRUPTED"
    first = boundaries(r, None, None, None)[0]
    assert first.startswith("Interrupted by SIGTERM while bench was running: only up, accept")


def test_the_cache_row_says_when_prefix_caching_is_off() -> None:
    from servekit.accept.models import AcceptResult, CheckResult
    from servekit.report.figures import cache_row

    def result(off: bool) -> AcceptResult:
        m: dict[str, float | bool] = {"speedup": 1.01, "prefill_prefix_cache_hits": 0.0}
        if off:
            m["prefix_caching_off"] = True
        check = CheckResult(
            id="cache.2k.cold_hot_hot", group="cache", verdict="pass", reason="", measurements=m
        )
        return AcceptResult(
            target="t", model="m", simulated=True, started_at="s", duration_s=1, checks=(check,)
        )

    off = cache_row(run(), result(True), "accept")
    assert (
        off is not None
        and "prefix caching off on the engines (no hit expected)" in off.parts[0].text
    )
    on = cache_row(run(), result(False), "accept")
    assert on is not None and "hot TTFT 1.01x faster than cold" in on.parts[0].text
