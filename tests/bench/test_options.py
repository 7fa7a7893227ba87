"""BenchOptions validates itself and builds the workloads and settings a run measures."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from servekit.bench import BenchOptions, MultiStream, RunSettings, SingleStream
from servekit.errors import UsageError

URL = "http://127.0.0.1:9"


def test_the_model_builds_the_workloads_and_settings() -> None:
    options = BenchOptions(
        target=URL, workload=("single", "multi"), streams="1,2", isl=16, osl=4, runs=2
    )
    single, multi = options.workloads()
    assert single == SingleStream(prompt_tokens=16, output_tokens=4)
    assert multi == MultiStream(streams=(1, 2), input_tokens=16, output_tokens=4)
    assert options.settings() == RunSettings(runs=2)


def test_the_api_key_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SERVEKIT_API_KEY", "sk-test")
    assert BenchOptions(target=URL).settings().api_key == "sk-test"


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"workload": ("nope",)}, "--workload nope: unknown"),
        ({"arrival": "bursty"}, "--arrival bursty: choose constant or poisson"),
        ({"slo": ("ttft",)}, "--slo ttft: expected NAME=MS"),
        ({"streams": "1,x"}, "--streams 1,x: expected comma-separated numbers"),
        ({"workload": ("multi",), "streams": "100000000"}, "--streams/--prefill-streams: "),
        ({"trace": Path("no-such-trace.jsonl")}, "--trace no-such-trace.jsonl: no such file"),
    ],
)
def test_a_bad_value_names_its_flag(fields: dict[str, object], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        BenchOptions.model_validate({"target": URL, **fields})


@given(st.text(alphabet="0123456789,.-ex ", max_size=12))
def test_any_streams_text_builds_or_is_refused_in_one_line(text: str) -> None:
    try:
        options = BenchOptions(target=URL, workload=("multi",), streams=text)
    except UsageError as exc:
        assert str(exc).startswith("--streams") and "\n" not in str(exc)
    else:
        (multi,) = options.workloads()
        assert isinstance(multi, MultiStream) and all(n >= 1 for n in multi.streams)
