"""``servekit status [--json]``: the entry URL, runs found from any folder, a killed supervisor."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from tests.helpers.cli import servekit_cli
from tests.local.conftest import alive

from servekit.local.state import (
    ProcState,
    RunState,
    read_state,
    seen_phase,
    start_ticks,
    supervisor_alive,
    write_state,
)

URL = re.compile(r"http://127\.0\.0\.1:\d+")


def user_env(state_home: Path) -> dict[str, str]:
    """An environment with the per-user state folder at ``state_home`` and no SERVEKIT_RUNS."""
    env = {k: v for k, v in os.environ.items() if k != "SERVEKIT_RUNS"}
    return {**env, "XDG_STATE_HOME": str(state_home), "COLUMNS": "200"}


def status_json(cwd: Path, env: dict[str, str], *args: str) -> list[dict[str, Any]]:
    done = servekit_cli("status", "--json", *args, cwd=cwd, env=env)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert isinstance(doc, list)
    return doc


@pytest.mark.slow
def test_status_from_another_folder_shows_the_entry_and_a_killed_supervisor(
    tmp_path: Path,
) -> None:
    env = user_env(tmp_path / "state")
    here, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    here.mkdir()
    elsewhere.mkdir()
    up = servekit_cli(
        "up", "local/single", "--engine", "sim", "--detach", "--free-ports",
        cwd=here, env=env, timeout=300,
    )  # fmt: skip
    run = tmp_path / "state/servekit/runs/local__single"
    pids: set[int] = set()
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        printed = URL.findall(up.stdout + up.stderr)
        assert printed, up.stdout + up.stderr
        (view,) = status_json(elsewhere, env)
        assert view["layout"] == "local/single"
        assert view["phase"] == "ready" and view["supervisor_alive"] is True
        assert view["entry_url"] == printed[0]
        assert Path(view["run_dir"]) == run
        assert all(p["health"] == "ok" for p in view["processes"] if p["url"])
        table = servekit_cli("status", cwd=elsewhere, env=env)
        assert table.returncode == 0, table.stderr
        assert f"entry: {printed[0]}" in table.stdout
        pids = {p["pid"] for p in view["processes"]}

        os.kill(view["supervisor_pid"], signal.SIGKILL)
        for _ in range(100):
            if not alive({view["supervisor_pid"]}):
                break
            time.sleep(0.1)
        (after,) = status_json(elsewhere, env, "local/single")
        assert after["phase"] == "unsupervised"
        assert after["recorded_phase"] == "ready"
        assert after["supervisor_alive"] is False
        table = servekit_cli("status", "local/single", cwd=elsewhere, env=env)
        assert "unsupervised" in table.stdout
        assert "servekit down local/single" in table.stdout
    finally:
        down = servekit_cli("down", "local/single", cwd=elsewhere, env=env)
    assert down.returncode == 0, down.stderr
    assert alive(pids) == set()
    state = read_state(run / "state.json")
    assert state is not None and state.phase == "stopped"
    assert "supervisor" in state.message and "was gone" in state.message
    (final,) = status_json(elsewhere, env)
    assert final["phase"] == "stopped"


def test_runs_under_the_current_folder_are_still_listed(tmp_path: Path) -> None:
    env = user_env(tmp_path / "state")
    old = tmp_path / ".servekit/runs/local__dp2"
    old.mkdir(parents=True)
    write_state(
        old / "state.json",
        RunState(
            layout="local/dp2",
            engine="vllm",
            supervisor_pid=2**22 + 11,
            started_at=1.0,
            phase="stopped",
            entry_url="http://127.0.0.1:8080",
        ),
    )
    (view,) = status_json(tmp_path, env)
    assert view["layout"] == "local/dp2"
    assert view["phase"] == "stopped"
    assert view["entry_url"] == "http://127.0.0.1:8080"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert status_json(elsewhere, env) == []  # another folder: not listed


def test_status_json_with_no_runs_is_an_empty_list(tmp_path: Path) -> None:
    assert status_json(tmp_path, user_env(tmp_path / "state")) == []


@pytest.mark.parametrize("name", ["..", "../../etc", "local/..", "a b/c", "local"])
def test_a_bad_layout_name_is_one_line(tmp_path: Path, name: str) -> None:
    done = servekit_cli("status", name, cwd=tmp_path, env=user_env(tmp_path / "state"))
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("error: ") and "layout name" in line


def state_of(pid: int, start: int | None, phase: str = "ready") -> RunState:
    proc = ProcState(name="engine", role="mixed", kind="engine", pid=2**22 + 3, log=Path("x"))
    return RunState.model_validate(
        {
            "layout": "local/single",
            "engine": "vllm",
            "supervisor_pid": pid,
            "supervisor_start": start,
            "started_at": 0.0,
            "phase": phase,
            "processes": [proc.model_dump()],
        }
    )


def test_a_reused_supervisor_pid_does_not_look_alive() -> None:
    me = os.getpid()
    assert supervisor_alive(state_of(me, start_ticks(me)))
    assert not supervisor_alive(state_of(me, (start_ticks(me) or 0) + 1))
    assert seen_phase(state_of(me, (start_ticks(me) or 0) + 1)) == "dead"


def test_seen_phase_keeps_a_recorded_end_and_flags_leftovers(tmp_path: Path) -> None:
    assert seen_phase(state_of(2**22 + 9, None, "stopped")) == "stopped"
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        state = state_of(2**22 + 9, None)
        state.processes[0].pid = sleeper.pid
        state.processes[0].pid_start = start_ticks(sleeper.pid)
        assert seen_phase(state) == "unsupervised"
    finally:
        sleeper.kill()
        sleeper.wait()
    assert seen_phase(state) == "dead"


@pytest.mark.slow
@pytest.mark.parametrize("content", [b"garbage", b"\xff\xfe", b'{"layout": 1}', b"[" * 5000])
def test_an_unreadable_state_is_said_not_taken_for_no_run(tmp_path: Path, content: bytes) -> None:
    """A full disk or a hand edit: the run's processes may still be alive, so neither
    status nor up may act as if nothing ran; down sets the record aside, keeping it."""
    env = user_env(tmp_path / "state")
    run = tmp_path / "state" / "servekit" / "runs" / "local__single"
    run.mkdir(parents=True)
    (run / "state.json").write_bytes(content)

    shown = servekit_cli("status", cwd=tmp_path, env=env)
    assert shown.returncode == 1 and "Traceback" not in shown.stderr
    assert "state.json is not a run state" in shown.stderr
    assert "servekit down local/single" in shown.stderr
    assert status_json(tmp_path, env) == []

    up = servekit_cli("up", "local/single", "--engine", "sim", cwd=tmp_path, env=env, timeout=300)
    assert up.returncode == 2, up.stderr
    assert up.stderr.count("\n") == 1 and "Clear it with: servekit down local/single" in up.stderr

    down = servekit_cli("down", "local/single", cwd=tmp_path, env=env)
    assert down.returncode == 0, down.stderr
    assert "could not be listed" in down.stdout
    (kept,) = run.glob("state.json.unreadable-*")
    assert kept.read_bytes() == content and not (run / "state.json").exists()
    aside = servekit_cli("status", cwd=tmp_path, env=env)
    assert aside.returncode == 2  # "no runs": the record is aside
