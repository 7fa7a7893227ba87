"""Ctrl-C (SIGINT) and SIGTERM sent to a running ``servekit verify ... --engine sim``.

The run must stop, tear down what it started (no process of the layout left),
write a report that opens with INTERRUPTED and says which step was running
and what had finished, and exit 130 (SIGINT) or 143 (SIGTERM).
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest
from tests.helpers.cli import own_homes, servekit_argv, servekit_cli, wide_env

LAYOUT = "a3/1node"


def start_verify(
    tmp_path: Path, out: Path, speed: str
) -> tuple[subprocess.Popen[str], dict[str, str]]:
    env = wide_env(**own_homes(tmp_path))
    cmd = servekit_argv("verify", LAYOUT, "--engine", "sim")
    cmd += ["--speed", speed, "--out", str(out), "--no-baseline"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return proc, env


def wait_for(path: Path, proc: subprocess.Popen[str], limit: float = 180.0) -> None:
    deadline = time.monotonic() + limit
    while not path.exists():
        assert proc.poll() is None, f"verify ended before {path} appeared: {proc.communicate()}"
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def nothing_left(env: dict[str, str]) -> None:
    """``servekit status --json``: the run stopped, no supervisor and no process alive."""
    done = servekit_cli("status", "--json", env=env, check=True)
    runs = json.loads(done.stdout)
    assert runs, "the interrupted run left no record"
    for run in runs:
        assert run["phase"] in ("stopped", "dead"), run
        assert not run["supervisor_alive"], run
        assert not any(p["alive"] for p in run["processes"]), run


@pytest.mark.slow
def test_ctrl_c_during_acceptance_reports_and_tears_down(tmp_path: Path) -> None:
    out = tmp_path / "run"
    # Simulated time at half speed: acceptance lasts long enough to be interrupted.
    proc, env = start_verify(tmp_path, out, "0.5")
    wait_for(out / "accept" / "evidence", proc)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stdout + stderr
    # a3/1node is an alias: the report names the layout it loads
    assert stdout.startswith("# Verification of a3/deepseekv4-flash/1node: INTERRUPTED (simulated)")
    run = json.loads((out / "run.json").read_text())
    stop = run["interrupted"]
    assert stop["signal"] == "SIGINT" and stop["step"] == "accept"
    assert stop["finished"] == ["up"] and "acceptance checks had finished" in stop["detail"]
    steps = {s["name"]: s for s in run["steps"]}
    assert steps["accept"]["detail"] == "interrupted by SIGINT"
    assert steps["down"]["status"] == "ok"
    md = (out / "report.md").read_text()
    assert "Interrupted by SIGINT while accept was running" in md
    assert (out / "SHA256SUMS").is_file()
    nothing_left(env)


@pytest.mark.slow
def test_sigterm_during_the_benchmarks_exits_143(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc, env = start_verify(tmp_path, out, "1")
    wait_for(out / "accept" / "result.json", proc)
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 143, stdout + stderr
    run = json.loads((out / "run.json").read_text())
    assert run["interrupted"]["signal"] == "SIGTERM" and run["interrupted"]["step"] == "bench"
    assert run["interrupted"]["finished"] == ["up", "accept"]
    assert "INTERRUPTED" in (out / "report.md").read_text().splitlines()[0]
    nothing_left(env)
