"""The matrix against the simulator behind servekit's real proxy process.

Every check passes on a healthy 1p1d stack; the checks that the self-check
does not cover (it flips faults at run time on one stack) are shown failing
here on stacks built with the fault: no guard, the unguarded incident, a dead
or erroring decoder, resets, a proxy that fronts fewer instances than the
deployment declares, a wrong model, disagreeing replicas.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from servekit.accept import AcceptResult, CheckResult, run_accept
from servekit.accept.options import AcceptOptions
from servekit.deployment import Deployment, Endpoint

from .stacks import sim_pd, sim_replicas


def run(dep: Deployment, out: Path, only: tuple[str, ...] = ()) -> AcceptResult:
    options = AcceptOptions(only=only, context=("2k",), timeout_s=60, out=out)
    return run_accept(options, deployment=dep)


def by_id(result: AcceptResult) -> dict[str, CheckResult]:
    return {c.id: c for c in result.checks}


@pytest.fixture(scope="module")
def healthy(tmp_path_factory: pytest.TempPathFactory) -> AcceptResult:
    tmp = tmp_path_factory.mktemp("healthy")
    with sim_pd(tmp, capabilities=("retrieval", "vision")) as stack:
        return run(stack.deployment, tmp / "out")


def test_healthy_stack_passes_every_applicable_check(healthy: AcceptResult) -> None:
    checks = by_id(healthy)
    failing = {k: v.reason for k, v in checks.items() if v.verdict == "fail"}
    assert failing == {}
    assert healthy.exit_code == 0 and healthy.simulated and healthy.sim_speed == 1.0
    skipped = [k for k, v in checks.items() if v.verdict == "skip"]
    assert skipped == ["invariant.replicas_agree"]  # no mixed replicas in a 1p1d stack
    assert checks["service.error_logs"].measurements["logs"] == 2
    assert checks["service.proxy_health"].measurements == {
        "prefill_instances": 1,
        "decode_instances": 1,
    }
    assert checks["guard.decode_direct"].measurements["guard_code_present"] == 1
    assert sum(k.startswith("needle.2k.") and v.verdict == "pass" for k, v in checks.items()) == 11
    assert int(checks["needle.2k.prefix_hot"].measurements["cached_tokens"]) > 0
    cold_hot_hot = checks["cache.2k.cold_hot_hot"]
    figures = cold_hot_hot.measurements
    assert float(figures["prefill_prefix_cache_hits"]) > 0  # prefill-side hits...
    assert float(figures["decode_external_prefix_cache_hits"]) > 0  # ...beside decode-side
    assert float(figures["speedup"]) > 0 and int(figures["hot2_cached_tokens"]) > 0
    # 3 streams, and /metrics of both engines before and after (kept as evidence)
    assert cold_hot_hot.timings["requests"] == 3 + 2 * 2
    assert checks["api.responses_images"].measurements["images"] == 2
    stream = checks["needle.2k.stream"].timings
    assert stream["requests"] == 1 and stream["ttft_s_first"] > 0
    assert checks["invariant.concurrent_equals_serial"].timings["requests"] == 4 * 3


FAULTS = [
    # (endpoint fields, checks that must fail)
    ({"decode": {"guard": False}}, "guard.decode_direct"),
    ({"decode": {"faults": {"dead": True}}}, "service.health"),
    ({"decode": {"faults": {"error_rate": 1.0}}}, "api"),
    ({"decode": {"faults": {"error_rate": 1.0}}}, "invariant.concurrent_equals_serial"),
    ({"decode": {"faults": {"reset_rate": 1.0, "reset_after_tokens": 2}}}, "api.sse"),
    ({"decode": {"faults": {"reset_rate": 1.0}}}, "invariant.stream_equals_nonstream"),
    ({"decode": {"disagree_seed": 7}}, "invariant.pd_equals_single"),
]


@pytest.mark.parametrize(("fields", "only"), FAULTS, ids=str)
def test_each_check_fails_when_the_stack_misbehaves(
    tmp_path: Path, fields: dict[str, Any], only: str
) -> None:
    dead = fields.get("decode", {}).get("faults", {}).get("dead", False)
    with sim_pd(tmp_path, wait_healthy=not dead, **fields) as stack:
        result = run(stack.deployment, tmp_path / "out", only=(only,))
    ran = [c for c in result.checks if c.verdict != "skip"]
    assert ran
    assert all(c.verdict == "fail" for c in ran), [(c.id, c.verdict, c.reason) for c in ran]
    assert result.exit_code == 1


def test_models_fails_when_the_entry_serves_another_model(tmp_path: Path) -> None:
    other = {"served_model_name": "other"}
    with sim_pd(tmp_path, prefill=other, decode=other) as stack:
        dep = stack.deployment.model_copy(update={"model": "sim-model"})
        result = run(dep, tmp_path / "out", only=("service.models",))
    (found,) = result.checks
    assert found.verdict == "fail" and "other" in found.reason


def test_images_fail_where_vision_is_declared_but_the_engines_are_blind(tmp_path: Path) -> None:
    blind = {"vision": False}
    with sim_pd(tmp_path, prefill=blind, decode=blind, capabilities=("vision",)) as stack:
        result = run(stack.deployment, tmp_path / "out", only=("api.responses_images",))
    (found,) = result.checks
    assert found.verdict == "fail" and "multimodal" in found.reason


def test_proxy_health_fails_when_the_proxy_fronts_fewer_instances(tmp_path: Path) -> None:
    with sim_pd(tmp_path) as stack:
        dep = stack.deployment
        extra = Endpoint(name="decode-1", role="decode", url=dep.by_role("decode")[0].url)
        dep = dep.model_copy(update={"endpoints": (*dep.endpoints, extra)})
        result = run(dep, tmp_path / "out", only=("service.proxy_health",))
    (found,) = result.checks
    assert found.verdict == "fail" and "decode_instances" in found.reason


def test_unguarded_incident_kills_the_decoder_and_the_logs_say_so(tmp_path: Path) -> None:
    with sim_pd(tmp_path, decode={"guard": False, "unguarded_incident": True}) as stack:
        result = run(
            stack.deployment,
            tmp_path / "out",
            only=("service.health", "guard", "service.error_logs"),
        )
    checks = by_id(result)
    assert checks["service.health"].verdict == "pass"  # ran before the incident
    assert checks["guard.decode_direct"].verdict == "fail"
    assert "/health right after" in checks["guard.decode_direct"].reason
    logs = checks["service.error_logs"]
    assert logs.verdict == "fail"
    for kind in ("EngineDeadError", "RuntimeError", "AssertionError"):
        assert int(logs.measurements[kind]) >= 1, logs.measurements


def test_log_check_counts_each_error_kind(tmp_path: Path) -> None:
    with sim_pd(tmp_path) as stack:
        with (tmp_path / "prefill.log").open("a") as log:
            log.write("INFO ok\nRuntimeError: boom\nAssertionError\nINFO RuntimeError again\n")
        result = run(stack.deployment, tmp_path / "out", only=("service.error_logs",))
    (found,) = result.checks
    assert found.verdict == "fail"
    assert found.measurements["RuntimeError"] == 2
    assert found.measurements["AssertionError"] == 1
    assert found.measurements["EngineDeadError"] == 0


def test_responses_api_is_skipped_not_passed_where_the_engine_lacks_it(tmp_path: Path) -> None:
    off = {"responses_api": False}
    with sim_pd(tmp_path, prefill=off, decode=off) as stack:
        result = run(stack.deployment, tmp_path / "out", only=("api.responses",))
    (found,) = result.checks
    assert found.verdict == "skip" and "404" in found.reason
    assert result.exit_code == 1  # nothing passed: a run of skips is not a pass


def test_capabilities_not_declared_are_skipped_with_the_reason(tmp_path: Path) -> None:
    only = ("needle", "cache", "api.vision", "api.responses_images")
    with sim_pd(tmp_path, capabilities=()) as stack:
        result = run(stack.deployment, tmp_path / "out", only=only)
    assert len(result.checks) == 11 + 1 + 2
    assert {c.verdict for c in result.checks} == {"skip"}
    assert all("capability" in c.reason for c in result.checks)


@pytest.mark.slow
def test_144k_matrix_calibrates_and_1m_is_skipped_beyond_max_model_len(tmp_path: Path) -> None:
    with sim_pd(tmp_path, max_model_len=150_000) as stack:
        options = AcceptOptions(only=("needle",), context=("144k", "1m"), out=tmp_path / "out")
        result = run_accept(options, deployment=stack.deployment)
    by = by_id(result)
    assert [c.verdict for c in result.checks if c.id.startswith("needle.144k.")] == ["pass"] * 11
    assert all(
        c.verdict == "skip" and "max_model_len 150000" in c.reason
        for c in result.checks
        if c.id.startswith("needle.1m.")
    )
    a = by["needle.144k.A"].measurements
    assert abs(int(a["prompt_tokens"]) - int(a["target_tokens"])) <= 737
    assert int(a["iterations"]) <= 6
    assert int(by["needle.144k.prefix_hot"].measurements["cached_tokens"]) > 140_000


@pytest.mark.parametrize(
    ("seeds", "verdict"), [([None, None, None], "pass"), ([None, None, 3], "fail")]
)
def test_replicas_agree_and_a_disagreeing_replica_fails(
    tmp_path: Path, seeds: list[int | None], verdict: str
) -> None:
    with sim_replicas(tmp_path, seeds) as stack:
        result = run(stack.deployment, tmp_path / "out", only=("invariant.replicas_agree",))
    (found,) = result.checks
    assert found.verdict == verdict, found.reason
    if verdict == "fail":
        assert "replica2" in found.reason
    else:
        assert found.measurements["replicas"] == 3


def test_an_unreachable_target_fails_every_check_with_a_reason(tmp_path: Path) -> None:
    dep = Deployment(entry_url="http://127.0.0.1:9", capabilities=("retrieval",))
    result = run(dep, tmp_path / "out", only=("service", "api.sse", "needle.2k.A"))
    ran = [c for c in result.checks if c.verdict != "skip"]
    assert ran and all(c.verdict == "fail" for c in ran)
    assert result.exit_code == 1


def _verdicts_and_answers(result: AcceptResult) -> dict[str, tuple[str, object]]:
    return {c.id: (c.verdict, c.measurements.get("answer")) for c in result.checks}


@pytest.mark.slow
def test_verdicts_do_not_depend_on_the_simulators_speed(tmp_path: Path) -> None:
    # A profile with real latency (prefill and decode cost virtual time): at speed 50
    # the same checks pass with the same answers as at real time.
    tiny = {"profile": "cpu-tiny"}
    only = ("needle.2k", "cache.2k", "invariant.prefix_hot_cold", "api.sse")
    results = {}
    for speed in (1.0, 50.0):
        with sim_pd(tmp_path / str(speed), speed=speed, prefill=tiny, decode=tiny) as stack:
            results[speed] = run(stack.deployment, tmp_path / f"out{speed}", only=only)
    assert results[50.0].sim_speed == 50.0 and results[1.0].sim_speed == 1.0
    assert _verdicts_and_answers(results[50.0]) == _verdicts_and_answers(results[1.0])
    assert {c.verdict for c in results[50.0].checks} == {"pass"}
