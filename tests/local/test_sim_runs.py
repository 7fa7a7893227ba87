"""``servekit up NAME --engine sim``: any layout here, the real proxy, real teardown."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from tests.helpers.cli import runs_env, servekit_argv, servekit_cli
from tests.local.conftest import alive

from servekit.client import OpenAIClient
from servekit.deployment import Deployment
from servekit.local import proctree
from servekit.local.state import read_state


async def _complete(url: str, model: str) -> tuple[int | None, str]:
    async with OpenAIClient(url, model=model) as client:
        rec = await client.completion({"prompt": "hello there", "max_tokens": 8})
    return rec.status, rec.text


@pytest.mark.slow
def test_accelerator_layout_runs_on_the_simulator(tmp_path: Path) -> None:
    up = servekit_cli(
        "up", "a3/1p1d", "--engine", "sim", "--detach", "--free-ports",
        cwd=tmp_path, env=runs_env(tmp_path), timeout=300,
    )  # fmt: skip
    run = tmp_path / "runs" / "a3__1p1d"
    try:
        assert up.returncode == 0, up.stderr
        dep = Deployment.model_validate_json((run / "deployment.json").read_text())
        assert dep.engine == "sim"
        assert len(dep.by_role("prefill")) == 4
        assert len(dep.by_role("decode")) == 16
        assert dep.entry_url == dep.by_role("proxy")[0].url
        status, text = asyncio.run(_complete(dep.entry_url, dep.model or ""))
        assert status == 200
        assert text
        state = read_state(run / "state.json")
        assert state is not None
        assert [p.name for p in state.processes] == ["sim", "proxy"]
        pids = proctree.members({p.pid for p in state.processes if p.pid is not None})
        assert alive(pids) == pids
    finally:
        down = servekit_cli("down", "a3/1p1d", cwd=tmp_path, env=runs_env(tmp_path))
    assert down.returncode == 0, down.stderr
    assert alive(pids) == set()


@pytest.mark.slow
def test_foreground_up_stops_everything_on_ctrl_c(tmp_path: Path) -> None:
    env = {**os.environ, "SERVEKIT_RUNS": str(tmp_path / "runs")}
    cmd = servekit_argv("up", "local/dp2", "--engine", "sim", "--free-ports")
    up = subprocess.Popen(
        cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    state_path = tmp_path / "runs" / "local__dp2" / "state.json"
    deadline = time.monotonic() + 120
    state = read_state(state_path)
    while (state is None or state.phase != "ready") and time.monotonic() < deadline:
        assert up.poll() is None, up.stdout.read() if up.stdout else ""
        time.sleep(0.2)
        state = read_state(state_path)
    assert state is not None and state.phase == "ready"
    assert state.supervisor_pid == up.pid  # foreground: servekit itself supervises
    pids = proctree.members({p.pid for p in state.processes if p.pid is not None})
    status = servekit_cli("status", "local/dp2", cwd=tmp_path, env=runs_env(tmp_path))
    assert status.returncode == 0
    assert "proxy" in status.stdout and " ok " in status.stdout
    logs = servekit_cli("logs", "proxy", "-n", "1", cwd=tmp_path, env=runs_env(tmp_path))
    assert logs.returncode == 0 and len(logs.stdout.splitlines()) == 1
    up.send_signal(signal.SIGINT)
    out, _ = up.communicate(timeout=120)
    assert up.returncode == 0, out
    assert "stopped by SIGINT" in out
    assert alive(pids) == set()
