"""Foreign baselines: files AIPerf and ``vllm bench serve`` wrote, read by definition.

The fixtures are those tools' own output against a vLLM CPU engine with the tiny
model (fixtures/foreign/README.md has the exact commands).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from tests.helpers.files import sparse_file
from tests.helpers.refusal import one_line_error

from servekit.bench.baseline import FOREIGN, compare, not_compared
from servekit.bench.foreign import read_baseline
from servekit.bench.report import render_section
from servekit.bench.schema import BenchInputs, BenchResult, Figure, Point
from servekit.errors import UsageError

FIXTURES = Path(__file__).with_name("fixtures") / "foreign"
VLLM = FIXTURES / "vllm_bench_serve.json"
AIPERF = FIXTURES / "profile_export_aiperf.json"
AIPERF_LOCAL = FIXTURES / "profile_export_aiperf_local_count.json"


def _median(result: BenchResult, name: str) -> float | None:
    return result.points[0].figures[name].median


def test_vllm_bench_serve_figures_keep_their_names_and_values() -> None:
    raw = json.loads(VLLM.read_text())
    result = read_baseline(VLLM)
    assert result.points[0].workload == FOREIGN and result.inputs.engine == "vllm bench serve"
    for name in ("ttft", "tpot", "itl", "e2el"):
        for stat in ("mean", "p50", "p90", "p99"):
            assert _median(result, f"{name}_{stat}_ms") == raw[f"{stat}_{name}_ms"]
    for name in ("request_throughput", "output_throughput", "total_token_throughput"):
        assert _median(result, name) == raw[name]
    # Goodput is in the file, its SLOs are not: refused with the reason.
    assert "goodput" not in result.points[0].figures
    assert not_compared(result) == ["goodput: the file does not record the SLOs it used"]


def test_aiperf_figures_map_by_definition_not_by_name() -> None:
    raw = json.loads(AIPERF.read_text())
    result = read_baseline(AIPERF)
    assert result.inputs.engine == f"aiperf {raw['aiperf_version']}"
    # AIPerf's "inter_token_latency" is (latency - TTFT) / (tokens - 1): servekit's TPOT;
    # its "inter_chunk_latency" is the gap between stream chunks: servekit's ITL.
    assert _median(result, "tpot_p50_ms") == raw["inter_token_latency"]["p50"]
    assert _median(result, "itl_p99_ms") == raw["inter_chunk_latency"]["p99"]
    assert _median(result, "itl_mean_ms") == raw["inter_chunk_latency"]["avg"]
    assert _median(result, "ttft_p90_ms") == raw["time_to_first_token"]["p90"]
    assert _median(result, "e2el_p50_ms") == raw["request_latency"]["p50"]
    assert _median(result, "output_throughput") == raw["output_token_throughput"]["avg"]
    assert _median(result, "request_throughput") == raw["request_throughput"]["avg"]
    assert not_compared(result) == []  # it ran with --use-server-token-count


def test_aiperf_counting_with_its_own_tokenizer_is_refused_for_token_figures() -> None:
    result = read_baseline(AIPERF_LOCAL)
    figures = result.points[0].figures
    assert "tpot_p50_ms" not in figures and "output_throughput" not in figures
    assert "ttft_p50_ms" in figures and "itl_p50_ms" in figures  # timing-only: compared
    why = not_compared(result)
    assert any(w.startswith("tpot: AIPerf counted output tokens") for w in why), why
    assert all("--use-server-token-count" in w for w in why)


def _ours(ttft: float) -> BenchResult:
    figures = {
        "ttft_p50_ms": Figure(unit="ms", median=ttft, runs=(ttft,)),
        "goodput": Figure(unit="req/s", median=1.0, runs=(1.0,)),
    }
    inputs = BenchInputs(target="t", entry_url="http://x", engine="vllm", harness="servekit")
    points = (Point(workload="concurrency_sweep", label="C=4", figures=figures),)
    return BenchResult(created="now", inputs=inputs, points=points)


@pytest.mark.parametrize("path", [VLLM, AIPERF])
def test_a_foreign_baseline_compares_with_every_serving_point(path: Path) -> None:
    before = read_baseline(path)
    rows = compare(before, _ours(100.0))
    assert [r.figure for r in rows] == ["ttft_p50_ms"]  # goodput: never compared
    assert rows[0].before == before.points[0].figures["ttft_p50_ms"].median
    text = render_section(_ours(100.0), baseline=before)
    assert "Against the baseline" in text and "ttft_p50_ms" in text


def test_a_file_no_tool_wrote_is_one_line_as_baseline(tmp_path: Path) -> None:
    """The flag as a user gives it: read before any engine is touched, else one line."""
    bad = tmp_path / "other.json"
    bad.write_text('{"some": "json"}')
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "servekit",
            "bench",
            "--target",
            "local/none",
            "--baseline",
            str(bad),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=tmp_path,
    )
    one_line_error(proc, f"--baseline {bad}: not a servekit.bench/1 result", "AIPerf")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"not json", "not JSON"),
        (b"[1, 2]", "not a servekit.bench/1 result"),
        (b'{"aiperf_version": "0.13.0"}', "a aiperf 0.13.0 file with no figure"),
        (b'{"completed": 3, "mean_ttft_ms": "fast"}', "a vllm bench serve file with no figure"),
        (b"[" * 200_000, "not JSON"),
    ],
)
def test_a_bad_baseline_is_one_line(content: bytes, message: str, tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    path.write_bytes(content)
    with pytest.raises(UsageError, match=message):
        read_baseline(path)


def test_a_huge_baseline_is_refused_before_reading(tmp_path: Path) -> None:
    path = sparse_file(tmp_path / "huge.json")
    with pytest.raises(UsageError, match="larger than 4 MiB"):
        read_baseline(path)


def test_a_fifo_baseline_is_refused_not_waited_on(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    with pytest.raises(UsageError, match="no such file"):
        read_baseline(fifo)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=20,
)


@pytest.mark.slow
@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    base=st.sampled_from([VLLM, AIPERF]),
    patch=st.dictionaries(
        st.sampled_from(
            [
                "mean_ttft_ms",
                "p99_itl_ms",
                "request_throughput",
                "time_to_first_token",
                "inter_chunk_latency",
                "input_config",
                "request_goodput",
                "goodput",
                "completed",
            ]
        ),
        JSON,
        max_size=4,
    ),
)
def test_any_damage_to_a_foreign_file_is_a_result_or_one_line(
    tmp_path: Path, base: Path, patch: dict[str, object]
) -> None:
    doc = {**json.loads(base.read_text()), **patch}
    path = tmp_path / "damaged.json"
    path.write_text(json.dumps(doc))
    try:
        result = read_baseline(path)
    except UsageError as exc:
        assert "\n" not in str(exc)
    else:
        assert all(f.median is not None for f in result.points[0].figures.values())


def test_the_baseline_bound_reflects_what_parsing_costs(tmp_path: Path) -> None:
    """Many small objects cost about 28x their bytes to parse (63 MiB peaked at 1.75 GB):
    the cap is 4 MiB, and a file just past it is refused before it is parsed."""
    from servekit.bench.foreign import MAX_BYTES

    assert MAX_BYTES <= 4 << 20
    path = tmp_path / "many.json"
    items = ",".join(['{"a":0}'] * (MAX_BYTES // 8 + 1))
    path.write_text('{"completed": 1, "mean_ttft_ms": 1, "x": [' + items + "]}")
    with pytest.raises(UsageError, match="larger than 4 MiB"):
        read_baseline(path)


def test_a_fifo_baseline_is_refused_by_the_bounded_reader_too(tmp_path: Path) -> None:
    """read_at_most refuses a FIFO itself (opened non-blocking, then fstat), whoever calls it."""
    from servekit.vocabulary import read_at_most

    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    with pytest.raises(UsageError, match=r"fifo\.json: not a regular file"):
        read_at_most(fifo, 10, str(fifo), "too large")
