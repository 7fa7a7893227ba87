"""The acceptance run's overall bar: checks weighted by the tokens they send."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from servekit.accept.models import CheckResult
from servekit.accept.options import AcceptOptions
from servekit.accept.progress import accept_progress, check_weight, weights_for


@pytest.mark.parametrize(
    ("check_id", "weight"),
    [
        ("service.health", 1.0),
        ("needle.2k.A", 1.0 + 2048 / 32768),
        ("needle.144k.stream", 5.5),
        ("cache.1m.cold_hot_hot", 33.0),
        ("needle.bogus.A", 1.0),
    ],
)
def test_long_context_checks_weigh_their_context(check_id: str, weight: float) -> None:
    assert check_weight(check_id) == pytest.approx(weight)


def test_the_seed_matrix_weighs_mostly_its_1m_checks() -> None:
    weights = weights_for(AcceptOptions())
    long = sum(w for k, w in weights.items() if ".1m." in k)
    assert long > 0.8 * sum(weights.values())
    assert next(iter(weights)) == "service.health"


def test_the_bar_prints_each_verdict_and_ends_with_its_time() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=False, width=120)
    weights = {"service.health": 1.0, "needle.144k.A": 5.5}
    with accept_progress(weights, console) as on_result:
        for check_id in weights:
            on_result(CheckResult(id=check_id, group="x", verdict="pass", reason="ok"))
    text = out.getvalue()
    assert "PASS service.health" in text and "PASS needle.144k.A" in text
    assert "accept: finished in" in text and text.rstrip().endswith("done")
