"""``servekit bench --trace`` as a user runs it: bad traces are one line and exit 2.

The trace is read before any engine is touched (the target here listens on
nothing), in bounded memory: a sparse 1 GiB file and a million-and-two-line
file cost one bounded read and one bounded count.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.helpers.cli import servekit_cli, servekit_inproc
from tests.helpers.files import sparse_file
from tests.helpers.refusal import one_line_error

from servekit.bench.trace import MAX_LINE_BYTES, MAX_REQUESTS
from servekit.bench.tracegen import TraceShape, write_trace

from .conftest import Engine

FOREIGN = Path(__file__).with_name("fixtures") / "foreign"


def _row(ts: int, isl: object = 700) -> str:
    return json.dumps(
        {"timestamp": ts, "input_length": isl, "output_length": 4, "hash_ids": [0, 1]}
    )


def _many_lines(path: Path) -> None:
    path.write_bytes(b"\n" * (MAX_REQUESTS + 2))


CASES = [
    ("back.jsonl", f"{_row(500)}\n{_row(100)}\n", "line 2: timestamp goes back in time"),
    ("type.jsonl", f"{_row(0, [1])}\n", "line 1: input_length: expected a whole number"),
    ("gib.jsonl", sparse_file, f"line 1: longer than {MAX_LINE_BYTES} bytes"),
    ("lines.jsonl", _many_lines, f"line {MAX_REQUESTS + 2}: more than {MAX_REQUESTS} lines"),
]


# The other refusals are the same code path, checked in-process by test_trace.py.
@pytest.mark.parametrize(("name", "content", "message"), CASES, ids=[c[0] for c in CASES])
def test_a_bad_trace_is_one_line_and_exit_2(
    name: str, content: object, message: str, tmp_path: Path
) -> None:
    path = tmp_path / name
    if callable(content):
        content(path)
    else:
        path.write_text(str(content))
    proc = servekit_inproc(
        "bench", "--target", "http://127.0.0.1:9", "--trace", str(path), cwd=tmp_path
    )
    one_line_error(proc, f"--trace {path}: ", message)


def test_trace_flags_are_checked_by_name(tmp_path: Path) -> None:
    path = write_trace(tmp_path / "t.jsonl", TraceShape(requests=2))
    missing = servekit_inproc(
        "bench", "--target", "x", "--trace", str(tmp_path / "no.jsonl"), cwd=tmp_path
    )
    one_line_error(missing, "no such file")
    speed = servekit_inproc(
        "bench", "--target", "x", "--trace", str(path), "--trace-speed", "0", cwd=tmp_path
    )
    one_line_error(speed, "--trace-speed: ")


def test_bench_replays_a_trace_with_slos_against_a_foreign_baseline(
    engine: Engine, tmp_path: Path
) -> None:
    shape = TraceShape(requests=6, rate=20.0, groups=1, shared_blocks=1, own_blocks=(0, 0), seed=4)
    path = write_trace(tmp_path / "t.jsonl", shape)
    proc = servekit_cli(
        "bench",
        "--target",
        engine.url,
        "--trace",
        str(path),
        "--trace-speed",
        "2",
        "--slo",
        "ttft=500,tpot=50,e2e=2000",
        "--runs",
        "1",
        "--baseline",
        str(FOREIGN / "profile_export_aiperf_local_count.json"),
        "--out",
        str(tmp_path / "out"),
        cwd=tmp_path,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Trace replay" in proc.stdout and "lateness_p99_ms" in proc.stdout
    assert "not compared (definitions differ): tpot: AIPerf counted output tokens" in proc.stdout
    md = (tmp_path / "out" / "bench.md").read_text()
    assert "Goodput: requests per second meeting every SLO" in md and "e2el <= 2000 ms" in md
    assert "prefix_cache_hits" in md and "Against the baseline (aiperf 0.13.0" in md
    rows = (tmp_path / "out" / "requests.jsonl").read_text().splitlines()
    assert len(rows) == 6 and all(json.loads(r)["lateness_ns"] is not None for r in rows)
    saved = json.loads((tmp_path / "out" / "bench.json").read_text())
    assert saved["points"][0]["params"]["speed"] == 2.0
    assert (tmp_path / "out" / "trace_goodput.png").stat().st_size > 0
