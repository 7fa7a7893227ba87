"""Trace files as hostile input: Mooncake JSONL and Azure CSV parsed in bounded memory.

Every refusal is one UsageError naming the line and the field; a valid trace
reads back to the numbers written (times relative to the first request).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from tests.helpers.files import sparse_file

from servekit.bench import trace as trace_mod
from servekit.bench.trace import MAX_LINE_BYTES, read_trace
from servekit.bench.tracegen import TraceShape, make_trace, write_trace
from servekit.bench.workloads.trace import trace_hit_rate
from servekit.errors import UsageError


def _jsonl(path: Path, *rows: object) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def _req(
    ts: float, isl: int = 600, osl: int = 8, ids: list[int] | None = None
) -> dict[str, object]:
    return {"timestamp": ts, "input_length": isl, "output_length": osl, "hash_ids": ids or [0, 1]}


def test_mooncake_reads_back_relative_to_the_first_request(tmp_path: Path) -> None:
    path = _jsonl(
        tmp_path / "t.jsonl", _req(1000), "", _req(1000, ids=[0, 2]), _req(3500, 10, 3, [7])
    )
    trace = read_trace(path)
    assert trace.format == "mooncake" and trace.block_size == 512
    assert [r.at_s for r in trace.requests] == [0.0, 0.0, 2.5]
    assert [r.line for r in trace.requests] == [1, 3, 4]  # the blank line 2 is skipped, counted
    assert trace.requests[2].input_tokens == 10 and trace.requests[2].output_tokens == 3
    assert trace.requests[1].hash_ids == (0, 2)
    assert trace.span_s == 2.5 and trace.blocks() == (5, 4)
    assert len(read_trace(path, limit=2).requests) == 2


def test_azure_csv_reads_its_named_columns(tmp_path: Path) -> None:
    path = tmp_path / "azure.csv"
    path.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.6805900,374,44\n"
        "2023-11-16 18:15:50.9951690,396,109\n"
    )
    trace = read_trace(path)
    assert trace.format == "azure"
    assert [r.input_tokens for r in trace.requests] == [374, 396]
    assert [r.output_tokens for r in trace.requests] == [44, 109]
    assert trace.requests[1].at_s == pytest.approx(4.314579)
    assert trace.requests[0].hash_ids == ()


BAD_MOONCAKE = [
    ([_req(2000), _req(1000)], "line 2: timestamp goes back in time"),
    ([_req(0, isl=-5)], "line 1: input_length: -5 is outside"),
    ([_req(0, osl=0)], "line 1: output_length: 0 is outside"),
    (["{not json"], "line 1: not a JSON object"),
    (["[1, 2]"], "line 1: expected a JSON object, got list"),
    ([{**_req(0), "input_length": "600"}], "line 1: input_length: expected a whole number"),
    ([{**_req(0), "input_length": 6.5}], "line 1: input_length: expected a whole number"),
    ([{**_req(0), "output_length": True}], "line 1: output_length: expected a whole number"),
    ([{"timestamp": 0, "output_length": 3}], "line 1: input_length: missing"),
    ([{**_req(0), "timestamp": "0"}], "line 1: timestamp: expected milliseconds"),
    ([{**_req(0), "timestamp": -1}], "line 1: timestamp: -1 is outside"),
    (['{"timestamp": NaN, "input_length": 1, "output_length": 1}'], "line 1: timestamp: NaN"),
    ([{**_req(0), "hash_ids": "0,1"}], "line 1: hash_ids: expected a list"),
    ([{**_req(0), "hash_ids": [0, -1]}], "line 1: hash_ids: expected a list"),
    ([_req(0, isl=600, ids=[0, 1, 2])], "line 1: hash_ids: 3 blocks of 512 tokens do not fit"),
    (["[" * 100_000 + "]" * 100_000], "line 1: not a JSON object"),
    ([_req(0), "1" * 5000], "line 2: not a JSON object"),
]


@pytest.mark.parametrize(("lines", "message"), BAD_MOONCAKE)
def test_a_bad_mooncake_line_is_refused_by_line_and_field(
    lines: list[object], message: str, tmp_path: Path
) -> None:
    path = _jsonl(tmp_path / "bad.jsonl", *lines)
    with pytest.raises(UsageError) as caught:
        read_trace(path)
    assert message in str(caught.value) and "\n" not in str(caught.value)
    assert str(caught.value).startswith(f"--trace {path}: ")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "TIMESTAMP,ContextTokens\n2023-11-16 18:15:46,3\n",
            "line 1: header lacks GeneratedTokens",
        ),
        (
            "TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,3,4\n",
            "line 2: TIMESTAMP: expected a date and time",
        ),
        (
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,-3,4\n",
            "line 2: ContextTokens: -3 is outside",
        ),
        (
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,3\n",
            "line 2: expected 3 columns, got 2",
        ),
        (
            "TIMESTAMP,ContextTokens,GeneratedTokens\n"
            "2023-11-16 18:15:46,3,4\n2023-11-16 18:15:45,3,4\n",
            "line 3: timestamp goes back in time",
        ),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n", "no requests"),
        ("", "empty"),
    ],
)
def test_a_bad_azure_line_is_refused_by_line_and_field(
    text: str, message: str, tmp_path: Path
) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(UsageError, match=message):
        read_trace(path)


def test_a_one_gigabyte_line_costs_one_bounded_read(tmp_path: Path) -> None:
    """A sparse 1 GiB file without a newline: refused after reading MAX_LINE_BYTES + 1."""
    path = sparse_file(tmp_path / "huge.jsonl", head=json.dumps(_req(0)).encode() + b"\n")
    with pytest.raises(UsageError, match=rf"line 2: longer than {MAX_LINE_BYTES} bytes"):
        read_trace(path)


def test_the_line_count_is_bounded_before_requests_pile_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(trace_mod, "MAX_REQUESTS", 50)
    fifty = _jsonl(tmp_path / "ok.jsonl", *(_req(i) for i in range(50)))
    assert len(read_trace(fifty).requests) == 50  # positive control: at the bound, accepted
    over = _jsonl(tmp_path / "over.jsonl", *(_req(i) for i in range(52)))
    with pytest.raises(UsageError, match="line 52: more than 50 lines"):
        read_trace(over)


def test_the_total_of_block_ids_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trace_mod, "MAX_BLOCK_IDS", 5)
    path = _jsonl(tmp_path / "t.jsonl", _req(0), _req(1), _req(2))
    with pytest.raises(UsageError, match="line 3: hash_ids: more than 5 in the trace"):
        read_trace(path)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.binary(max_size=600))
def test_any_bytes_are_a_trace_or_one_line_refusal(tmp_path: Path, data: bytes) -> None:
    for name in ("fuzz.jsonl", "fuzz.csv"):
        path = tmp_path / name
        path.write_bytes(data)
        try:
            trace = read_trace(path)
        except UsageError as exc:
            assert "\n" not in str(exc)
        else:
            times = [r.at_s for r in trace.requests]
            assert times == sorted(times) and times[0] == 0.0
            assert all(r.input_tokens >= 1 and r.output_tokens >= 1 for r in trace.requests)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
FIELDS = st.fixed_dictionaries(
    {},
    optional={
        "timestamp": JSON_VALUES | st.integers(0, 10**6),
        "input_length": JSON_VALUES | st.integers(1, 5000),
        "output_length": JSON_VALUES | st.integers(1, 100),
        "hash_ids": JSON_VALUES | st.lists(st.integers(0, 20), max_size=12),
    },
)


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(rows=st.lists(FIELDS, min_size=1, max_size=6))
def test_any_json_rows_are_a_trace_or_a_refusal_naming_the_line(
    tmp_path: Path, rows: list[dict[str, object]]
) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    try:
        trace = read_trace(path)
    except UsageError as exc:
        assert "\n" not in str(exc) and ": line " in str(exc)
    else:
        assert len(trace.requests) == len(rows)


def test_a_generated_trace_shares_prefix_blocks_and_parses(tmp_path: Path) -> None:
    shape = TraceShape(requests=30, groups=2, shared_blocks=2, seed=7)
    assert make_trace(shape) == make_trace(shape)  # equal seeds, equal traces
    trace = read_trace(write_trace(tmp_path / "gen.jsonl", shape))
    assert len(trace.requests) == 30
    firsts = {r.hash_ids[:2] for r in trace.requests}
    assert firsts <= {(0, 1), (2, 3)} and len(firsts) == 2
    for req in trace.requests:
        assert len(req.hash_ids) == -(-req.input_tokens // 512)
    # A perfect cache hits the shared blocks of every request but each group's first.
    shared = sum(2 * 512 for _ in trace.requests) - 2 * 2 * 512
    assert trace_hit_rate(trace) == shared / sum(r.input_tokens for r in trace.requests)


AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"


def test_an_azure_csv_with_a_byte_order_mark_is_read(tmp_path: Path) -> None:
    """A spreadsheet's "CSV UTF-8" starts with a BOM; it used to be "header lacks TIMESTAMP"."""
    path = tmp_path / "bom.csv"
    path.write_bytes(b"\xef\xbb\xbf" + (AZURE_HEADER + "2023-11-16 18:15:46,3,4\n").encode())
    assert [r.input_tokens for r in read_trace(path).requests] == [3]
    path = path.rename(tmp_path / "bom.trace")  # detected by its header, not its name
    assert read_trace(path).format == "azure"


def test_an_azure_timestamp_keeps_its_utc_offset(tmp_path: Path) -> None:
    """Ordered with their offsets (10:00+02:00 is 08:00 UTC), so no "goes back in time"."""
    path = tmp_path / "tz.csv"
    path.write_text(
        AZURE_HEADER + "2023-11-16 10:00:00.5000000+02:00,3,4\n"
        "2023-11-16 09:30:00+00:00,3,4\n"
        "2023-11-16 09:30:01.25Z,3,4\n"
        "2023-11-16 09:30:02,3,4\n"
    )
    assert [r.at_s for r in read_trace(path).requests] == [0.0, 5399.5, 5400.75, 5401.5]


@pytest.mark.parametrize(
    "stamps",
    [
        ("0001-01-01 00:00:00", "9999-12-31 23:59:59.9999999"),
        ("2023-11-16 18:15:46", "2023-12-16 18:15:47"),
    ],
)
def test_an_azure_trace_is_held_to_the_span_mooncake_is(
    stamps: tuple[str, str], tmp_path: Path
) -> None:
    """Years 0001..9999 used to be accepted and the replay waited; 30 days is the bound."""
    path = tmp_path / "long.csv"
    path.write_text(AZURE_HEADER + "".join(f"{s},3,4\n" for s in stamps))
    with pytest.raises(UsageError, match=r"line 3: timestamp: .* days after the first request"):
        read_trace(path)
    path.write_text(AZURE_HEADER + "2023-11-16 18:15:46,3,4\n2023-12-16 18:15:46,3,4\n")
    assert read_trace(path).span_s == trace_mod.MAX_TIME_S


def test_an_azure_timestamp_with_trailing_text_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(AZURE_HEADER + "2023-11-16 18:15:46.5.5,3,4\n")
    with pytest.raises(UsageError, match="line 2: TIMESTAMP: expected a date and time"):
        read_trace(path)
