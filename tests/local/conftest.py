"""Shared helpers for the local-run tests: process checks and hand-made RunSpecs.

The engines of a hand-made RunSpec are the simulator (``python -m servekit.sim
serve``); only those that must misbehave as processes (a child left behind,
SIGTERM ignored) are the lifecycle spy ``fake_engine.py``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from servekit.local import proctree
from servekit.local.ports import free_ports
from servekit.local.runspec import EndpointSpec, Launch, RunSpec

FAKE_ENGINE = Path(__file__).with_name("fake_engine.py")


def alive(pids: set[int]) -> set[int]:
    """The pids of ``pids`` still running (zombies count as gone)."""
    table = proctree.snapshot()
    return {p for p in pids if p in table and table[p][2] != "Z"}


LIFECYCLE_FLAGS = ("--child", "--ignore-term")


def engine_launch(port: int, flags: list[str]) -> tuple[tuple[str, ...], dict[str, str]]:
    """argv and env of one engine: the simulator, or the lifecycle spy when flags need it.

    ``--delay S`` is the simulator's slow start (/health 503 for S seconds).
    """
    if any(f in LIFECYCLE_FLAGS for f in flags):
        return (sys.executable, str(FAKE_ENGINE), str(port), "m", *flags), {}
    argv = (sys.executable, "-m", "servekit.sim", "serve", "m", "--host", "127.0.0.1")
    env = {"SERVEKIT_SIM_PROFILE": "zero"}
    if "--delay" in flags:
        delay = float(flags[flags.index("--delay") + 1])
        env["SERVEKIT_SIM_FAULTS"] = json.dumps({"slow_start_s": delay})
    return (*argv, "--port", str(port)), env


def fake_spec(tmp: Path, names: list[str], extra: dict[str, list[str]] | None = None) -> RunSpec:
    """A RunSpec of stand-in engines (one per name) on free loopback ports."""
    run_dir = tmp / "run"
    launches, endpoints = [], []
    for name, port in zip(names, free_ports(len(names)), strict=True):
        url = f"http://127.0.0.1:{port}"
        argv, env = engine_launch(port, (extra or {}).get(name, []))
        launches.append(
            Launch(
                name=name,
                role="mixed",
                kind="engine",
                argv=argv,
                env=env,
                url=url,
                port=port,
                ready_urls=(url,),
                ready_model="m",
                log=run_dir / "logs" / f"{name}.log",
            )
        )
        endpoints.append(
            EndpointSpec(name=name, role="mixed", url=url, engine_id=None, process=name)
        )
    return RunSpec(
        layout="test/fake",
        engine="vllm",
        model="m",
        cwd=tmp,
        run_dir=run_dir,
        scratch=run_dir / "scratch",
        entry=names[0],
        launches=tuple(launches),
        endpoints=tuple(endpoints),
    )


@pytest.fixture
def runs_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point SERVEKIT_RUNS at a temporary folder."""
    root = tmp_path / "runs"
    monkeypatch.setenv("SERVEKIT_RUNS", str(root))
    return root
