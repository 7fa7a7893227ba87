"""Acceptance against a proxy whose engines are out of reach (engine_access: relay).

Metrics come from the proxy's /metrics/engines; the checks that need an
engine's own port say so instead of failing; nothing needing direct access is
counted as passed.
"""

from __future__ import annotations

from pathlib import Path

from tests.accept.stacks import sim_pd

from servekit.accept import AcceptOptions, run_accept
from servekit.deployment import RELAY_PATH, Deployment

ONLY = (
    "service",
    "guard",
    "invariant.pd_kv_handoff",
    "invariant.prefix_hot_cold",
    "cache",
)


def relayed(dep: Deployment) -> Deployment:
    return dep.model_copy(
        update={"engine_access": "relay", "metrics_relay": dep.entry_url + RELAY_PATH}
    )


def test_checks_read_engine_metrics_through_the_proxy(tmp_path: Path) -> None:
    with sim_pd(tmp_path / "logs") as stack:
        options = AcceptOptions(only=ONLY, context=("2k",), out=tmp_path / "out")
        result = run_accept(options, deployment=relayed(stack.deployment))
    verdicts = {c.id: (c.verdict, c.reason) for c in result.checks}
    assert verdicts["service.health"][0] == "pass"
    assert "reached only through the proxy" in verdicts["service.health"][1]
    assert verdicts["service.proxy_health"][0] == "pass"
    assert verdicts["invariant.pd_kv_handoff"][0] == "pass"
    assert verdicts["invariant.prefix_hot_cold"] == (
        "pass",
        "hot equals cold byte for byte and hit the prefix cache",
    )
    cache = next(c for c in result.checks if c.id == "cache.2k.cold_hot_hot")
    assert cache.verdict == "pass" and cache.measurements["prefill_prefix_cache_hits"] > 0
    guard, why = verdicts["guard.decode_direct"]
    assert guard == "skip" and "needs direct access; pass --nodes" in why
    requests = (tmp_path / "out").rglob("*-request.json")
    assert any(RELAY_PATH in path.read_text() for path in requests), "nothing read the relay"


def test_error_logs_say_how_to_give_them(tmp_path: Path) -> None:
    with sim_pd(tmp_path / "logs") as stack:
        bare = stack.deployment.model_copy(
            update={
                "endpoints": tuple(
                    e.model_copy(update={"log": None}) for e in stack.deployment.endpoints
                )
            }
        )
        options = AcceptOptions(only=("service.error_logs",), out=tmp_path / "out")
        result = run_accept(options, deployment=bare)
    (check,) = result.checks
    assert check.verdict == "skip" and "pass --logs DIR to verify" in check.reason


def test_prefix_caching_off_is_said_not_failed(tmp_path: Path) -> None:
    off = {"profile": {"name": "zero", "enable_prefix_caching": False}}
    with sim_pd(tmp_path / "logs", prefill=off) as stack:
        options = AcceptOptions(only=("invariant.prefix_hot_cold",), out=tmp_path / "out")
        result = run_accept(options, deployment=stack.deployment)
    (check,) = result.checks
    assert check.verdict == "pass" and "prefix caching off" in check.reason
