"""Every check passes against a well-behaved deployment and fails when it misbehaves.

The deployment is made of scripted engines on loopback (proxy, prefill, decode,
reference); each fault is set on one endpoint and must turn exactly the check
that watches for it into a failure.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from servekit.accept import AcceptResult, CheckResult, run_acceptance
from servekit.accept.options import AcceptOptions

from .cluster import scripted_pd, scripted_replicas

CTX = ["2k"]


def run(deployment: Any, out: Path, only: tuple[str, ...] = ()) -> AcceptResult:
    return run_acceptance(
        deployment,
        out_dir=out,
        only=only,
        contexts=CTX,
        options=AcceptOptions(timeout_s=30),
    )


def by_id(result: AcceptResult) -> dict[str, CheckResult]:
    return {c.id: c for c in result.checks}


def test_healthy_pd_deployment_passes_every_applicable_check(tmp_path: Path) -> None:
    with scripted_pd(tmp_path, capabilities=("retrieval", "vision")) as dep:
        result = run(dep, tmp_path / "out")
    checks = by_id(result)
    assert result.counts.failed == 0, [c.reason for c in result.checks if c.verdict == "fail"]
    assert result.exit_code == 0
    # applicable checks ran and passed; only the replica comparison has nothing to compare
    assert [c.id for c in result.checks if c.verdict == "skip"] == ["invariant.replicas_agree"]
    assert checks["guard.decode_direct"].measurements["guard_code_present"] == 1
    assert checks["service.proxy_health"].measurements == {
        "prefill_instances": 1,
        "decode_instances": 1,
    }
    assert checks["needle.2k.prefix_hot"].measurements["cached_tokens"] > 0
    assert len([c for c in result.checks if c.id.startswith("needle.2k.")]) == 11
    assert (tmp_path / "out" / "result.json").is_file()
    stream = checks["needle.2k.stream"].timings
    assert stream["requests"] == 1 and stream["ttft_s_first"] > 0
    assert checks["invariant.concurrent_equals_serial"].timings["requests"] == 4 * 3


FAULTS = [
    # (endpoint, fault, check that must fail)
    ("decode", {"unhealthy": True}, "service.health"),
    ("proxy", {"proxy_counts": (1, 2)}, "service.proxy_health"),
    ("proxy", {"model": "other-model"}, "service.models"),
    ("prefill", {"stream_no_done": True}, "api.sse"),
    ("prefill", {"ignore_stop": True}, "api.finish_reason"),
    ("prefill", {"usage_off_by_one": True}, "api.usage"),
    ("reference", {"disagree_salt": "x"}, "invariant.pd_equals_single"),
    ("decode", {"no_kv_handoff": True}, "invariant.pd_kv_handoff"),
    ("prefill", {"no_prefix_cache": True}, "invariant.prefix_hot_cold"),
    ("prefill", {"stream_mismatch": True}, "invariant.stream_equals_nonstream"),
    ("prefill", {"crowd_drift": True}, "invariant.concurrent_equals_serial"),
    ("prefill", {"crowd_drift": True}, "invariant.long_beside_short"),
    ("decode", {"guard": False}, "guard.decode_direct"),
    ("decode", {"guard": False, "unguarded_incident": True}, "guard.decode_direct"),
    ("prefill", {"answer_mode": "wrong_code"}, "needle.2k.A"),
    ("prefill", {"answer_mode": "echo"}, "needle.2k.turn2"),
    ("prefill", {"answer_mode": "overlong"}, "needle.2k.stream"),
    ("prefill", {"no_prefix_cache": False, "answer_mode": "wrong_code"}, "needle.2k.prefix_hot"),
]


@pytest.mark.parametrize(("where", "fault", "check"), FAULTS, ids=str)
def test_each_check_fails_when_the_deployment_misbehaves(
    tmp_path: Path, where: str, fault: dict[str, Any], check: str
) -> None:
    with scripted_pd(tmp_path, **{where: fault}) as dep:
        result = run(dep, tmp_path / "out", only=(check,))
    (found,) = result.checks
    assert found.id == check
    assert found.verdict == "fail", found.reason
    assert result.exit_code == 1


def test_the_incident_kills_an_unguarded_decoder_and_the_log_check_sees_it(
    tmp_path: Path,
) -> None:
    with scripted_pd(tmp_path, decode={"guard": False, "unguarded_incident": True}) as dep:
        result = run(dep, tmp_path / "out", only=("guard", "service.error_logs", "service.health"))
    checks = by_id(result)
    assert "/health" in checks["guard.decode_direct"].reason
    assert checks["service.health"].verdict == "pass"  # ran before the incident
    logs = checks["service.error_logs"]
    assert logs.verdict == "fail"
    assert logs.measurements["EngineDeadError"] == 1


def test_log_check_counts_each_error_kind(tmp_path: Path) -> None:
    with scripted_pd(tmp_path) as dep:
        (tmp_path / "prefill.log").write_text(
            "INFO ok\nRuntimeError: boom\nAssertionError\nINFO RuntimeError again\n"
        )
        result = run(dep, tmp_path / "out", only=("service.error_logs",))
    (found,) = result.checks
    assert found.verdict == "fail"
    assert found.measurements["RuntimeError"] == 2
    assert found.measurements["AssertionError"] == 1
    assert found.measurements["EngineDeadError"] == 0


def test_responses_api_is_skipped_not_passed_where_the_engine_lacks_it(tmp_path: Path) -> None:
    with scripted_pd(tmp_path, prefill={"offers_responses": False}) as dep:
        result = run(dep, tmp_path / "out", only=("api.responses",))
    (found,) = result.checks
    assert found.verdict == "skip"
    assert "404" in found.reason
    assert result.exit_code == 1  # nothing passed: a run of skips is not a pass


def test_capabilities_not_declared_are_skipped_with_the_reason(tmp_path: Path) -> None:
    with scripted_pd(tmp_path, capabilities=()) as dep:
        result = run(dep, tmp_path / "out", only=("needle", "api.vision"))
    assert {c.verdict for c in result.checks} == {"skip"}
    assert all("capability" in c.reason for c in result.checks)


def test_contexts_beyond_max_model_len_are_skipped(tmp_path: Path) -> None:
    with scripted_pd(tmp_path, max_model_len=4096) as dep:
        result = run_acceptance(dep, out_dir=tmp_path / "out", only=("needle.1m",), contexts=["1m"])
    assert len(result.checks) == 11
    assert all(c.verdict == "skip" and "max_model_len 4096" in c.reason for c in result.checks)


def test_replicas_agree_and_a_disagreeing_replica_fails(tmp_path: Path) -> None:
    with scripted_replicas([{}, {}, {}]) as dep:
        good = run(dep, tmp_path / "good", only=("invariant.replicas_agree",))
    with scripted_replicas([{}, {}, {"disagree_salt": "r3"}]) as dep:
        bad = run(dep, tmp_path / "bad", only=("invariant.replicas_agree",))
    assert good.checks[0].verdict == "pass"
    assert good.checks[0].measurements["replicas"] == 3
    assert bad.checks[0].verdict == "fail"
    assert "replica2" in bad.checks[0].reason


def test_an_unreachable_target_fails_every_check_with_a_reason(tmp_path: Path) -> None:
    from servekit.deployment import Deployment

    dep = Deployment(entry_url="http://127.0.0.1:9", capabilities=("retrieval",))
    result = run(dep, tmp_path / "out", only=("service", "api.sse", "needle.2k.A"))
    ran = [c for c in result.checks if c.verdict != "skip"]
    assert ran and all(c.verdict == "fail" for c in ran)
    assert result.exit_code == 1
