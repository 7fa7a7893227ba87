"""``servekit bench --target NAME`` on a PD layout run by ``servekit up --engine sim``.

The whole path a user takes: the layout's deployment.json, requests through
its PD proxy, /tokenize and /metrics from its engines, KV capacity per engine,
results on disk, then a second run against the first as its baseline.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.helpers.cli import layout_up, servekit_cli

LAYOUT = "local/1p1d"


@pytest.fixture
def layout_env(tmp_path: Path) -> Iterator[dict[str, str]]:
    env = {**os.environ, "SERVEKIT_RUNS": str(tmp_path / "runs"), "COLUMNS": "200"}
    with layout_up(LAYOUT, engine="sim", cwd=tmp_path, env=env, timeout=300):
        yield env


@pytest.mark.slow
def test_bench_a_pd_layout_by_name_and_compare_with_the_first_run(
    layout_env: dict[str, str], tmp_path: Path
) -> None:
    args = ["bench", "--target", LAYOUT, "--workload", "single", "--workload", "multi"]
    args += ["--workload", "kv", "--isl", "128", "--osl", "32", "--streams", "1,2", "--runs", "2"]
    first = servekit_cli(
        *args, "--out", str(tmp_path / "a"), env=layout_env, cwd=tmp_path, timeout=300
    )
    assert first.returncode == 0, first.stderr[-2000:]
    result = json.loads((tmp_path / "a" / "bench.json").read_text())
    assert result["inputs"]["layout"] == LAYOUT and result["inputs"]["engine"] == "sim"
    points = {(p["workload"], p["label"]): p for p in result["points"]}
    single = points[("single_stream", "ISL=128")]
    assert single["errors"] == 0 and single["invalid_runs"] == 0
    # Through the PD proxy each request is two engine legs, never "foreign".
    assert single["evidence"]["idle_checked"] is True
    assert {r["foreign_requests"] for r in single["evidence"]["runs"]} == {0.0}
    assert points[("multi_stream", "N=2")]["requests"] == 4
    kv = {label: p for (w, label), p in points.items() if w == "kv_capacity"}
    assert set(kv) == {"prefill", "decode"}
    assert all(p["figures"]["kv_cache_tokens"]["median"] > 0 for p in kv.values())
    second = servekit_cli(
        *args,
        "--out",
        str(tmp_path / "b"),
        "--baseline",
        str(tmp_path / "a" / "bench.json"),
        env=layout_env,
        cwd=tmp_path,
        timeout=300,
    )
    assert second.returncode == 0, second.stderr[-2000:]
    assert "before -> after (delta)" in (tmp_path / "b" / "bench.md").read_text()
