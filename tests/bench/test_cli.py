"""``servekit bench`` as a user runs it: a real process against a loopback engine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.helpers.cli import servekit_cli

from .conftest import Engine, Setup


@pytest.mark.slow
def test_bench_writes_results_and_compares_with_a_baseline(engine: Engine, tmp_path: Path) -> None:
    common = ["bench", "--target", engine.url, "--workload", "single", "--workload", "multi"]
    common += ["--streams", "1,2", "--isl", "16", "--osl", "4", "--runs", "1"]
    first = servekit_cli(*common, "--out", str(tmp_path / "a"), cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert "Single-stream decode" in first.stdout and "Multi-stream decode" in first.stdout
    saved = json.loads((tmp_path / "a" / "bench.json").read_text())
    assert [p["label"] for p in saved["points"]] == ["ISL=16", "N=1", "N=2"]
    second = servekit_cli(
        *common,
        "--out",
        str(tmp_path / "b"),
        "--baseline",
        str(tmp_path / "a" / "bench.json"),
        cwd=tmp_path,
    )
    assert second.returncode == 0, second.stderr
    assert "before -> after (delta)" in second.stdout
    assert "Against the baseline" in (tmp_path / "b" / "bench.md").read_text()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--workload", "nope"], "--workload nope: unknown"),
        (["--slo", "ttft"], "--slo ttft: expected NAME=MS"),
        (["--streams", "1,x"], "--streams 1,x: expected comma-separated numbers"),
        (["--arrival", "bursty"], "--arrival bursty: choose constant or poisson"),
        (["--baseline", "missing.json"], "--baseline missing.json: no such file"),
        (["--runs", "0"], "--runs: Input should be greater than or equal to 1"),
        (["--runs", "100000000"], "--runs: Input should be less than or equal to 100"),
        (["--workload", "multi", "--streams", "100000000"], "--streams/--prefill-streams: "),
        (["--osl", "10000000000"], "--osl: Input should be less than or equal to"),
        (["--workload", "rate", "--rates", "1e400"], "--rates: Input should be a finite number"),
        (["--idle-timeout", "inf"], "--idle-timeout: Input should be a finite number"),
        (["--slo", "ttft=inf"], "--slo ttft=inf: expected NAME=MS"),
        (["--target", "http://127.0.0.1:99999"], "Port out of range"),
    ],
)
def test_bad_flags_are_one_line_and_exit_2(extra: list[str], message: str, tmp_path: Path) -> None:
    proc = servekit_cli("bench", "--target", "http://127.0.0.1:9", *extra, cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"error: {proc.stderr.strip().removeprefix('error: ')}"
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("engine", [Setup(busy=True)], indirect=True)
def test_an_engine_that_never_idles_is_one_line_and_exit_1(engine: Engine, tmp_path: Path) -> None:
    proc = servekit_cli(
        "bench",
        "--target",
        engine.url,
        "--workload",
        "single",
        "--isl",
        "16",
        "--osl",
        "4",
        "--idle-timeout",
        "0.3",
        cwd=tmp_path,
    )
    assert proc.returncode == 1
    assert proc.stderr.strip().startswith("error: engine not idle after")
    assert "Traceback" not in proc.stderr


def test_unknown_layout_name_is_a_usage_error(tmp_path: Path) -> None:
    proc = servekit_cli("bench", "--target", "local/none", cwd=tmp_path)
    assert proc.returncode == 2 and "servekit up local/none" in proc.stderr


def test_unreachable_url_is_a_usage_error(tmp_path: Path) -> None:
    proc = servekit_cli("bench", "--target", "http://127.0.0.1:9", "--runs", "1", cwd=tmp_path)
    assert proc.returncode == 2 and "cannot list models" in proc.stderr


def test_a_server_that_never_answers_is_one_line_not_a_hang(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """It takes the connection and says nothing: before, the run waited its request timeout."""
    import asyncio

    from tests.proxy.backends import black_hole

    from servekit.bench import runner
    from servekit.bench.config import SingleStream
    from servekit.deployment import Deployment
    from servekit.errors import UsageError

    monkeypatch.setattr(runner, "DISCOVERY_TIMEOUT_S", 0.5)

    async def scenario() -> None:
        url, server = await black_hole()
        try:
            with pytest.raises(UsageError, match=r"/v1/models did not answer"):
                await runner.bench_async(Deployment(entry_url=url), [SingleStream()])
        finally:
            server.close()

    asyncio.run(scenario())
