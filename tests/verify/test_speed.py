"""Fast simulated time through the user commands: up --speed, then accept and bench record it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.helpers.cli import own_homes, servekit_cli, wide_env
from tests.helpers.parallel import serial

LAYOUT = "a3/1node"


@pytest.fixture
def env(tmp_path: Path) -> Iterator[dict[str, str]]:
    env = wide_env(**own_homes(tmp_path))
    yield env
    servekit_cli("down", LAYOUT, env=env)


@pytest.mark.slow
@serial  # up without --free-ports: binds a3/1node's port 8080
def test_up_at_a_speed_is_recorded_by_accept_and_bench(env: dict[str, str], tmp_path: Path) -> None:
    up = servekit_cli(
        "up", LAYOUT, "--engine", "sim", "--speed", "40", "--detach", env=env, timeout=600
    )
    assert up.returncode == 0, up.stderr
    assert "is ready (sim at 40x speed)" in up.stderr
    run = Path(env["SERVEKIT_RUNS"]) / LAYOUT.replace("/", "__")
    assert json.loads((run / "deployment.json").read_text())["sim_speed"] == 40
    assert json.loads((run / "sim.json").read_text())["time_scale"] == pytest.approx(1 / 40)

    accept = servekit_cli(
        "accept", "--target", LAYOUT, "--only", "api.sse", "--out", str(tmp_path / "a"),
        env=env, timeout=600,
    )  # fmt: skip
    assert accept.returncode == 0, accept.stderr
    result = json.loads((tmp_path / "a" / "result.json").read_text())
    assert result["sim_speed"] == 40
    response = json.loads((tmp_path / "a/evidence/api.sse/01-response.json").read_text())
    assert response["sim_speed"] == 40
    assert "accept: finished in" in accept.stderr  # the overall bar ends with its time

    bench = servekit_cli(
        "bench", "--target", LAYOUT, "--workload", "kv", "--out", str(tmp_path / "b"),
        env=env, timeout=600,
    )  # fmt: skip
    assert bench.returncode == 0, bench.stderr
    inputs = json.loads((tmp_path / "b" / "bench.json").read_text())["inputs"]
    assert inputs["sim_speed"] == 40
    assert "Simulated engines at 40x speed" in (tmp_path / "b" / "bench.md").read_text()


def test_speed_needs_the_simulator(env: dict[str, str]) -> None:
    done = servekit_cli("up", LAYOUT, "--engine", "vllm", "--speed", "5", env=env)
    assert done.returncode == 2
    assert done.stderr.strip().startswith(
        "error: --speed 5: give a positive number with --engine sim"
    )
    bad = servekit_cli("verify", LAYOUT, "--speed", "5", env=env)
    assert bad.returncode == 2 and "only simulated engines have a speed" in bad.stderr
    zero = servekit_cli("verify", LAYOUT, "--engine", "sim", "--speed", "0", env=env)
    assert zero.returncode == 2 and zero.stderr.startswith("error: --speed:")
