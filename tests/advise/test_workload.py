"""Workloads: the distribution grammar, drawn requests, and traces read as bench reads them."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from servekit.advise import Drawn, drawn_workload, parse_dist, trace_workload
from servekit.advise.workload import implied_hit_rate
from servekit.bench import read_trace
from servekit.errors import UsageError


@pytest.mark.parametrize(
    ("text", "kind"),
    [("2048", "fixed"), ("uniform:128,512", "uniform"), ("normal:1000,100", "normal"),
     ("lognormal:2048,0.6", "lognormal")],
)  # fmt: skip
def test_each_form_of_the_grammar(text: str, kind: str) -> None:
    dist = parse_dist(text, "--isl")
    assert dist.kind == kind
    draws = [dist.draw(random.Random(i)) for i in range(200)]
    assert all(d >= 1 for d in draws)
    if kind == "uniform":
        assert min(draws) >= 128 and max(draws) <= 512


@pytest.mark.parametrize(
    ("text", "says"),
    [("", "expected N, uniform:A,B"), ("gamma:1,2", "expected N, uniform:A,B"),
     ("2048 tokens", "expected N"), ("-5", "expected N"), ("0", "lengths are 1.."),
     ("uniform:9,3", "needs A <= B")],
)  # fmt: skip
def test_a_bad_distribution_is_one_line_naming_the_fix(text: str, says: str) -> None:
    with pytest.raises(UsageError, match=f"--isl .*{says}"):
        parse_dist(text, "--isl")


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=60))
def test_any_text_is_a_distribution_or_a_refusal(text: str) -> None:
    try:
        dist = parse_dist(text, "--osl")
    except UsageError as exc:
        assert "\n" not in str(exc)
        return
    assert dist.draw(random.Random(0)) >= 1


def drawn(share: float = 0.5, seed: int = 3) -> Drawn:
    return Drawn(parse_dist("uniform:600,3000", "--isl"), parse_dist("64", "--osl"), 4.0, 120,
                 share, 4, seed)  # fmt: skip


def test_equal_seeds_draw_equal_requests_and_the_rate_holds() -> None:
    a, b = drawn_workload(drawn()), drawn_workload(drawn())
    assert a.requests == b.requests
    rate = len(a.requests) / a.span_s
    assert 2.5 < rate < 6  # Poisson at 4/s over 120 arrivals
    assert drawn_workload(drawn(seed=4)).requests != a.requests


def test_prefix_sharing_is_what_a_perfect_cache_would_hit() -> None:
    none = drawn_workload(drawn(share=0.0)).requests
    half = drawn_workload(drawn(share=0.5)).requests
    assert implied_hit_rate(none) == 0.0
    assert 0.25 < implied_hit_rate(half) < 0.5  # a shared block counts after its first use


def test_drawn_requests_replay_as_the_same_mooncake_trace(tmp_path: Path) -> None:
    w = drawn_workload(drawn())
    path = w.write_mooncake(tmp_path / "w.jsonl")
    back = read_trace(path)
    assert [(r.input_tokens, r.output_tokens, r.hash_ids) for r in back.requests] == [
        (r.input_tokens, r.output_tokens, r.hash_ids) for r in w.requests
    ]
    again = trace_workload(path)
    assert [r.at_s for r in again.requests] == pytest.approx([r.at_s for r in w.requests], abs=1e-3)


def test_trace_speed_compresses_the_arrivals(tmp_path: Path) -> None:
    path = drawn_workload(drawn()).write_mooncake(tmp_path / "w.jsonl")
    slow, fast = trace_workload(path), trace_workload(path, speed=2.0)
    assert fast.span_s == pytest.approx(slow.span_s / 2, rel=1e-6)
