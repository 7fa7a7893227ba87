"""The supervisor on stand-in engines: readiness, records, death, down, no orphans.

Each test starts the real detached supervisor (``python -m servekit.local.daemon``)
on a hand-made RunSpec of simulated engines (and lifecycle spies where a process
must misbehave), so everything but vLLM is real.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.local.conftest import alive, fake_spec

from servekit.deployment import Deployment
from servekit.local.control import stop_run
from servekit.local.rundir import RunDir
from servekit.local.runspec import RunSpec
from servekit.local.state import RunState, read_state
from servekit.vocabulary import atomic_write_text

WAIT_S = 60.0


class Daemon:
    """A detached supervisor under test and its run directory."""

    def __init__(self, spec: RunSpec, ready_timeout_s: float = WAIT_S) -> None:
        self.spec = spec
        self.run = RunDir(spec.run_dir)
        self.run.reset()
        atomic_write_text(self.run.launch, spec.model_dump_json())
        cmd = [sys.executable, "-m", "servekit.local.daemon", str(self.run.root)]
        self.popen = subprocess.Popen(
            [*cmd, str(ready_timeout_s)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def state_when(self, *phases: str) -> RunState:
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            state = read_state(self.run.state)
            if state is not None and state.phase in phases:
                return state
            time.sleep(0.1)
        raise AssertionError(f"run never reached {phases}: {read_state(self.run.state)}")

    def pids(self) -> set[int]:
        state = read_state(self.run.state)
        assert state is not None
        return {p.pid for p in state.processes if p.pid is not None}


@pytest.fixture
def daemons() -> Iterator[list[Daemon]]:
    started: list[Daemon] = []
    yield started
    for d in started:
        stop_run(d.run, timeout_s=20)
        if d.popen.poll() is None:
            d.popen.kill()
        d.popen.wait()


@pytest.mark.slow
def test_ready_run_writes_records_and_down_leaves_nothing(
    tmp_path: Path, daemons: list[Daemon]
) -> None:
    spec = fake_spec(tmp_path, ["a", "b"], {"a": ["--child"], "b": ["--delay", "1.5"]})
    d = Daemon(spec)
    daemons.append(d)
    state = d.state_when("ready", "failed")
    assert state.phase == "ready", state.message
    assert all(p.phase == "ready" and p.ready_at is not None for p in state.processes)
    deployment = Deployment.model_validate_json(d.run.deployment.read_text())
    assert deployment.entry_url == spec.launch("a").url
    assert {e.name for e in deployment.endpoints} == {"a", "b"}
    assert deployment.endpoints[0].log == spec.launch("a").log
    assert "python" in deployment.versions
    assert spec.scratch.is_dir()
    pids = d.pids()
    assert alive(pids) == pids
    assert stop_run(d.run) == "test/fake: stopped"
    assert d.popen.wait(timeout=WAIT_S) == 0
    final = read_state(d.run.state)
    assert final is not None and final.phase == "stopped"
    assert "SIGTERM" in final.message
    assert alive(pids) == set()
    assert not spec.scratch.exists()
    assert not d.run.deployment.exists()


def test_death_after_ready_is_reported_and_everything_stops(
    tmp_path: Path, daemons: list[Daemon]
) -> None:
    spec = fake_spec(tmp_path, ["prefill", "decode"], {"prefill": ["--child"]})
    d = Daemon(spec)
    daemons.append(d)
    d.state_when("ready")
    victim = read_state(d.run.state).proc("decode")  # type: ignore[union-attr]
    assert victim.pid is not None
    all_pids = d.pids()
    os.kill(victim.pid, signal.SIGKILL)
    state = d.state_when("failed")
    assert d.popen.wait(timeout=WAIT_S) == 1
    assert state.message.startswith("process decode exited with code -9 (killed by SIGKILL)")
    assert "sim endpoint mixed-m-dp0 (mixed) at" in state.message  # the last log lines
    assert state.proc("decode").exit_code == -9
    assert alive(all_pids) == set()
    out = d.popen.stdout.read().decode() if d.popen.stdout else ""
    assert "exit code 1" in out


def test_death_during_startup_fails_fast(tmp_path: Path, daemons: list[Daemon]) -> None:
    spec = fake_spec(tmp_path, ["ok", "bad"])
    bad = spec.launch("bad")
    broken = bad.model_copy(update={"argv": (sys.executable, "-c", "import sys; sys.exit(7)")})
    spec = spec.model_copy(update={"launches": (spec.launch("ok"), broken)})
    d = Daemon(spec)
    daemons.append(d)
    state = d.state_when("failed", "ready")
    assert state.phase == "failed"
    assert "process bad exited with code 7" in state.message
    assert d.popen.wait(timeout=WAIT_S) == 1
    assert alive(d.pids()) == set()


@pytest.mark.slow
def test_not_ready_in_time_is_a_failure(tmp_path: Path, daemons: list[Daemon]) -> None:
    spec = fake_spec(tmp_path, ["slow"], {"slow": ["--delay", "600"]})
    d = Daemon(spec, ready_timeout_s=2.0)
    daemons.append(d)
    state = d.state_when("failed")
    assert "not ready after 2 s: slow" in state.message
    assert "/health answered 503" in state.proc("slow").detail
    assert alive(d.pids()) == set()


@pytest.mark.slow
def test_stubborn_process_is_killed_on_down(tmp_path: Path, daemons: list[Daemon]) -> None:
    spec = fake_spec(tmp_path, ["stubborn"], {"stubborn": ["--ignore-term", "--child"]})
    d = Daemon(spec)
    daemons.append(d)
    d.state_when("ready")
    pids = d.pids()
    stop_run(d.run, timeout_s=WAIT_S)
    assert alive(pids) == set()
    state = read_state(d.run.state)
    assert state is not None and state.phase == "stopped"


def test_down_cleans_up_after_a_dead_supervisor(tmp_path: Path, daemons: list[Daemon]) -> None:
    spec = fake_spec(tmp_path, ["a"], {"a": ["--child"]})
    d = Daemon(spec)
    daemons.append(d)
    d.state_when("ready")
    pids = d.pids()
    d.popen.kill()  # the supervisor dies without tearing down
    d.popen.wait()
    assert alive(pids) == pids
    assert stop_run(d.run) == "test/fake: stopped"
    assert alive(pids) == set()
    assert not spec.scratch.exists()


def test_state_json_is_plain_json(tmp_path: Path, daemons: list[Daemon]) -> None:
    d = Daemon(fake_spec(tmp_path, ["a"]))
    daemons.append(d)
    d.state_when("ready")
    doc = json.loads(d.run.state.read_text())
    assert doc["layout"] == "test/fake"
    assert doc["processes"][0]["port"] == d.spec.launch("a").port


def test_ctrl_c_tears_down_like_down(tmp_path: Path, daemons: list[Daemon]) -> None:
    spec = fake_spec(tmp_path, ["a", "b"], {"b": ["--child"]})
    d = Daemon(spec)
    daemons.append(d)
    d.state_when("ready")
    pids = d.pids()
    os.kill(d.popen.pid, signal.SIGINT)
    assert d.popen.wait(timeout=WAIT_S) == 0
    state = read_state(d.run.state)
    assert state is not None and state.phase == "stopped"
    assert state.message == "stopped by SIGINT"
    assert alive(pids) == set()
