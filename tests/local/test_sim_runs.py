"""``servekit up NAME --engine sim``: any layout here, the real proxy, real teardown."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

from tests.local.conftest import alive

from servekit.client import OpenAIClient
from servekit.deployment import Deployment
from servekit.local import proctree
from servekit.local.state import read_state


def _servekit(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SERVEKIT_RUNS": str(root / "runs")}
    cmd = [sys.executable, "-m", "servekit", *args]
    return subprocess.run(
        cmd, cwd=root, env=env, capture_output=True, text=True, timeout=300, check=False
    )


async def _complete(url: str, model: str) -> tuple[int | None, str]:
    async with OpenAIClient(url, model=model) as client:
        rec = await client.completion({"prompt": "hello there", "max_tokens": 8})
    return rec.status, rec.text


def test_accelerator_layout_runs_on_the_simulator(tmp_path: Path) -> None:
    up = _servekit(tmp_path, "up", "a3/1p1d", "--engine", "sim", "--detach", "--free-ports")
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
        down = _servekit(tmp_path, "down", "a3/1p1d")
    assert down.returncode == 0, down.stderr
    assert alive(pids) == set()
