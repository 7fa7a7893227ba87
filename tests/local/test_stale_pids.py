"""A state file whose pids now belong to other processes: nothing of theirs is signalled.

After a reboot or a pid wrap the pids in an old state.json name unrelated
processes. ``down`` used to check only the supervisor's start time, so an
engine pid reused by another process group got that group killed. Each
recorded process now carries its start time from spawn, and only a pid that
still has it is this run's.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.helpers.cli import servekit_cli
from tests.local.test_status import user_env

from servekit.local.preflight import check_not_running
from servekit.local.state import ProcState, RunState, start_ticks, write_state


@pytest.fixture
def stranger() -> Iterator[subprocess.Popen[bytes]]:
    """An unrelated process in its own process group (session), as after a pid reuse."""
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True
    )
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def dead_pid() -> int:
    """A pid no process has now (a finished child's, reaped)."""
    done = subprocess.Popen(["true"])
    done.wait()
    return done.pid


def write_run(tmp_path: Path, pid: int, pid_start: int | None) -> Path:
    run = tmp_path / "state" / "servekit" / "runs" / "local__single"
    run.mkdir(parents=True)
    proc = ProcState(
        name="engine", role="mixed", kind="vllm", pid=pid, pid_start=pid_start,
        log=run / "logs" / "engine.log", phase="ready",
    )  # fmt: skip
    state = RunState(
        layout="local/single", engine="vllm", supervisor_pid=dead_pid(),
        supervisor_start=1, phase="ready", started_at=time.time(), processes=[proc],
    )  # fmt: skip
    write_state(run / "state.json", state)
    return run


@pytest.mark.parametrize("recorded", ["later", "none"])
def test_down_leaves_a_reused_engine_pid_alive_and_says_why(
    tmp_path: Path, stranger: subprocess.Popen[bytes], recorded: str
) -> None:
    start = start_ticks(stranger.pid)
    assert start is not None
    run = write_run(tmp_path, stranger.pid, start - 1 if recorded == "later" else None)
    env = user_env(tmp_path / "state")
    check_not_running(run / "state.json", "local/single")  # up: not "still alive"
    down = servekit_cli("down", "local/single", cwd=tmp_path, env=env, timeout=300)
    assert down.returncode == 0, down.stderr
    lines = down.stdout.strip().splitlines()
    assert len(lines) == 1, down.stdout
    assert f"left alone engine pid {stranger.pid}" in lines[0]
    assert "now belongs to another process" in lines[0]
    time.sleep(0.5)
    assert stranger.poll() is None, "down killed a process that was not the run's"
    os.kill(stranger.pid, 0)


def test_down_stops_an_engine_that_is_still_the_recorded_process(
    tmp_path: Path, stranger: subprocess.Popen[bytes]
) -> None:
    """Positive control: the same state with the true start time stops it."""
    run = write_run(tmp_path, stranger.pid, start_ticks(stranger.pid))
    with pytest.raises(Exception, match="still alive"):
        check_not_running(run / "state.json", "local/single")
    down = servekit_cli(
        "down", "local/single", cwd=tmp_path, env=user_env(tmp_path / "state"), timeout=300
    )
    assert down.returncode == 0 and "left alone" not in down.stdout, down.stdout
    assert stranger.wait(timeout=30) is not None
