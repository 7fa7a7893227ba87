"""Parsers of user input and of engine replies: total, precise, never raising on bad replies."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, strategies as st

from servekit.accept.checks.common import metric_sum, tokenize_count
from servekit.accept.context import context_label, parse_contexts, parse_depths
from servekit.accept.replies import read_stream
from servekit.accept.wire import Exchange
from servekit.errors import UsageError


@pytest.mark.parametrize(
    ("text", "tokens"),
    [("2k", 2048), ("144k", 147456), ("1m", 1048576), ("3000", 3000), (" 8K ", 8192)],
)
def test_context_sizes(text: str, tokens: int) -> None:
    assert parse_contexts([text]) == (tokens,)


def test_contexts_split_on_commas_keep_order_and_drop_repeats() -> None:
    assert parse_contexts(["144k,1m", "2k", "144k"]) == (147456, 1048576, 2048)


@pytest.mark.parametrize("bad", ["x", "0", "1g", "k", "-2k", "1.5k", "144kb", "2k,,oops"])
def test_bad_context_is_a_usage_error_naming_the_flag(bad: str) -> None:
    with pytest.raises(UsageError, match="--context"):
        parse_contexts([bad])


@given(st.integers(min_value=1, max_value=2**24))
def test_context_label_round_trips(tokens: int) -> None:
    assert parse_contexts([context_label(tokens)]) == (tokens,)


def test_depths() -> None:
    assert parse_depths("0.1,0.4,0.6,0.9") == (0.1, 0.4, 0.6, 0.9)
    for bad in ("0.1,0.2", "a,b,c,d", "0.1,0.2,0.3,1.5"):
        with pytest.raises(UsageError, match="--depths"):
            parse_depths(bad)


def _stream(frames: list[str]) -> Exchange:
    return Exchange(method="POST", url="u", status=200, frames=tuple(frames))


def _chunk(text: str, finish: str | None = None) -> str:
    return json.dumps(
        {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}]}
    )


@given(st.lists(st.text(max_size=8), min_size=1, max_size=20))
def test_a_well_formed_stream_joins_its_deltas(pieces: list[str]) -> None:
    frames = [_chunk(p) for p in pieces[:-1]] + [_chunk(pieces[-1], "stop"), "[DONE]"]
    reading = read_stream(_stream(frames))
    assert reading.text == "".join(pieces)
    assert reading.finish_reason == "stop"
    assert reading.problems == ()


@given(st.lists(st.text(max_size=30), max_size=10))
def test_any_frames_are_read_without_raising(frames: list[str]) -> None:
    reading = read_stream(_stream(frames))
    if "[DONE]" not in frames:
        assert "stream did not end with data: [DONE]" in reading.problems


def test_framing_problems_are_named() -> None:
    reading = read_stream(_stream([_chunk("a"), "{not json", "[DONE]", _chunk("late")]))
    assert any("not JSON" in p for p in reading.problems)
    assert any("after [DONE]" in p for p in reading.problems)


def test_metric_sum_adds_every_labelled_sample() -> None:
    text = (
        "# HELP vllm:prefix_cache_hits_total hits\n"
        'vllm:prefix_cache_hits_total{engine="0",model_name="m"} 32.0\n'
        'vllm:prefix_cache_hits_total{engine="1",model_name="m"} 16\n'
        "vllm:prefix_cache_queries_total 100\n"
    )
    assert metric_sum(text, ("vllm:prefix_cache_hits_total",)) == 48.0


@given(st.text(max_size=200))
def test_metric_sum_of_unrelated_text_is_zero(text: str) -> None:
    assert metric_sum(text, ("zz_absent_metric_total",)) == 0.0


@given(st.lists(st.integers(min_value=0, max_value=10**9), max_size=8))
def test_metric_sum_equals_the_sum_of_samples(values: list[int]) -> None:
    text = "".join(f'm_total{{i="{i}"}} {v}\n' for i, v in enumerate(values))
    assert metric_sum(text, ("m_total",)) == float(sum(values))


def test_tokenize_count_reads_count_or_tokens() -> None:
    assert tokenize_count({"count": 3, "tokens": [1, 2, 3]}) == 3
    assert tokenize_count({"tokens": [1, 2]}) == 2
    assert tokenize_count(["no"]) is None
