"""Checks that run before anything starts: bad input is one line and exit 2.

Each check raises :class:`~servekit.errors.UsageError` naming what is wrong and
the fix, and none of them starts a process, so a refused ``up`` leaves nothing
running.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

from servekit.catalog import Layout
from servekit.errors import UsageError
from servekit.local.state import proc_alive, state_or_why, supervisor_alive
from servekit.vocabulary import Startable

LOCAL_ACCELERATOR = "cpu"


def check_hardware(layout: Layout, engine: Startable) -> None:
    """Real engines here run on the CPU; anything else needs the simulator."""
    hw = layout.hardware
    if engine == "vllm" and hw.accelerator != LOCAL_ACCELERATOR:
        raise UsageError(
            f"layout {layout.name} needs {hw.accelerator} hardware ({layout.nodes} node(s) x "
            f"{hw.devices_per_node} devices) and this machine runs vLLM on the CPU only; "
            f"run it on the simulator: servekit up {layout.name} --engine sim"
        )


def check_engine_installed(module: str = "vllm") -> None:
    """The engine must import in this interpreter (it is the one that launches it)."""
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise UsageError(
            f"the vLLM engine is not installed in {sys.executable}; install the extra: "
            "pip install 'servekit[local]' (or run scripts/bootstrap.sh engine)"
        )


def check_model_dir(path: Path) -> None:
    """The model folder exists, is readable, and holds a config.json."""
    build = f"build it with: servekit model tiny --out {path}"
    if not path.exists():
        raise UsageError(f"model directory {path} is missing; {build}")
    if not path.is_dir():
        raise UsageError(f"model directory {path} is not a folder; {build}")
    config = path / "config.json"
    if not os.access(path, os.R_OK | os.X_OK) or (
        config.exists() and not os.access(config, os.R_OK)
    ):
        raise UsageError(
            f"model directory {path} is unreadable; fix its permissions (chmod -R a+rX)"
        )
    if not config.is_file():
        raise UsageError(f"model directory {path} has no config.json; {build}")


def check_not_running(state_path: Path, layout: str) -> None:
    """One run per layout: refuse to start over a live supervisor or its leftovers."""
    found = state_or_why(state_path)
    if isinstance(found, str):
        raise UsageError(
            f"{layout}: the previous run's {found}; its processes may still run. "
            f"Clear it with: servekit down {layout}"
        )
    state = found
    if state is None:
        return
    if state.phase not in ("failed", "stopped") and supervisor_alive(state):
        raise UsageError(
            f"{layout} is already running (supervisor pid {state.supervisor_pid}); "
            f"stop it first: servekit down {layout}"
        )
    leftovers = sorted(p.pid for p in state.processes if p.pid is not None and proc_alive(p))
    if leftovers:
        raise UsageError(
            f"{layout}: processes of the previous run are still alive (pids {leftovers}); "
            f"stop them with: servekit down {layout}"
        )
