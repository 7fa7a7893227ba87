"""The matrix against the simulator behind servekit's real PD proxy.

Every check passes on a healthy 1p1d stack, and the checks fail when the
simulator is told to misbehave.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from servekit.accept import AcceptResult, run_acceptance
from servekit.accept.options import AcceptOptions

from .simstack import sim_pd


def run(dep: Any, out: Path, only: tuple[str, ...] = ()) -> AcceptResult:
    return run_acceptance(
        dep, out_dir=out, only=only, contexts=["2k"], options=AcceptOptions(timeout_s=60)
    )


@pytest.fixture(scope="module")
def healthy(tmp_path_factory: pytest.TempPathFactory) -> AcceptResult:
    tmp = tmp_path_factory.mktemp("healthy")
    with sim_pd(tmp, capabilities=("retrieval", "vision")) as (dep, _):
        return run(dep, tmp / "out")


def test_healthy_sim_stack_passes_every_check_but_the_known_gaps(healthy: AcceptResult) -> None:
    verdicts = {c.id: c for c in healthy.checks}
    failing = {k: v.reason for k, v in verdicts.items() if v.verdict == "fail"}
    assert failing == {}
    skipped = [k for k, v in verdicts.items() if v.verdict == "skip"]
    assert skipped == ["invariant.replicas_agree"]  # no mixed replicas in a 1p1d stack
    assert healthy.simulated
    assert verdicts["service.error_logs"].measurements["logs"] == 2
    assert (
        sum(k.startswith("needle.2k.") and v.verdict == "pass" for k, v in verdicts.items()) == 11
    )


# The simulator cannot turn its prefix cache off yet (profile.enable_prefix_caching is
# reported, not obeyed), so invariant.prefix_hot_cold is shown failing on scripted
# engines (test_matrix_scripted.py) instead.
MISBEHAVIOURS = [
    ({"decode": {"faults": {"misbehave": "wrong_code"}}}, "needle.2k"),
    ({"decode": {"faults": {"misbehave": "echo_prompt"}}}, "needle.2k"),
    ({"decode": {"faults": {"misbehave": "long_answer"}}}, "needle.2k"),
    ({"reference": {"disagree_seed": 7}}, "invariant.pd_equals_single"),
    ({"decode": {"disagree_seed": 7}}, "invariant.pd_equals_single"),
    ({"decode": {"guard": False}}, "guard.decode_direct"),
    ({"decode": {"faults": {"dead": True}}}, "service.health"),
    ({"decode": {"faults": {"error_rate": 1.0}}}, "api"),
    ({"decode": {"faults": {"error_rate": 1.0}}}, "invariant.concurrent_equals_serial"),
    ({"decode": {"faults": {"reset_rate": 1.0, "reset_after_tokens": 2}}}, "api.sse"),
    (
        {"decode": {"faults": {"reset_rate": 1.0}}},
        "invariant.stream_equals_nonstream",
    ),
]


@pytest.mark.parametrize(("setting", "only"), MISBEHAVIOURS, ids=str)
def test_checks_fail_when_the_simulator_misbehaves(
    tmp_path: Path, setting: dict[str, Any], only: str
) -> None:
    dead = setting.get("decode", {}).get("faults", {}).get("dead", False)
    with sim_pd(tmp_path, wait_healthy=not dead, **setting) as (dep, _):
        result = run(dep, tmp_path / "out", only=(only,))
    ran = [c for c in result.checks if c.verdict != "skip"]
    assert ran
    assert all(c.verdict == "fail" for c in ran), [(c.id, c.verdict, c.reason) for c in ran]
    assert result.exit_code == 1


def test_unguarded_incident_kills_the_decoder_and_the_logs_say_so(tmp_path: Path) -> None:
    with sim_pd(tmp_path, decode={"guard": False, "unguarded_incident": True}) as (dep, _):
        result = run(dep, tmp_path / "out", only=("guard", "service.error_logs"))
    guard, logs = result.checks
    assert guard.verdict == "fail"
    assert "/health right after" in guard.reason
    assert logs.verdict == "fail"
    for kind in ("EngineDeadError", "RuntimeError", "AssertionError"):
        assert logs.measurements[kind] >= 1, logs.measurements


def test_144k_matrix_calibrates_and_passes_on_a_long_context_sim(tmp_path: Path) -> None:
    from servekit.deployment import Deployment, Endpoint
    from servekit.sim.testing import running_sim

    spec = {"endpoints": [{"name": "m", "port": 0, "role": "mixed", "max_model_len": 150_000}]}
    with running_sim(spec) as sim:
        dep = Deployment(
            engine="sim",
            model="sim-model",
            entry_url=sim.url,
            endpoints=(Endpoint(name="m", role="mixed", url=sim.url),),
            capabilities=("retrieval",),
        )
        result = run_acceptance(dep, out_dir=tmp_path, only=("needle",), contexts=["144k", "1m"])
    by = {c.id: c for c in result.checks}
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


def _replicas(seeds: list[int | None]) -> dict[str, Any]:
    return {
        "endpoints": [
            {"name": f"r{i}", "port": 0, "role": "mixed", "disagree_seed": seed}
            for i, seed in enumerate(seeds)
        ]
    }


@pytest.mark.parametrize(
    ("seeds", "verdict"), [([None, None, None], "pass"), ([None, None, 3], "fail")]
)
def test_replicas_agree_on_the_simulator(
    tmp_path: Path, seeds: list[int | None], verdict: str
) -> None:
    from servekit.deployment import Deployment, Endpoint
    from servekit.sim.testing import running_sim

    with running_sim(_replicas(seeds)) as sim:
        endpoints = tuple(Endpoint(name=n, role="mixed", url=u) for n, u in sim.urls.items())
        dep = Deployment(engine="sim", entry_url=endpoints[0].url, endpoints=endpoints)
        result = run(dep, tmp_path, only=("invariant.replicas_agree",))
    (found,) = result.checks
    assert found.verdict == verdict, found.reason
