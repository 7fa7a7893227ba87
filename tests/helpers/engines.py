"""Real vLLM runs shared by the tests that only send them requests.

A vLLM CPU engine takes a minute or more to start on two cores; tests that only
read (accept, bench) ask :class:`SharedRuns` for a layout and get the one already
up, started once with the real CLI (``servekit up NAME --detach --free-ports``) in
one project folder with the tiny model. Before a run is handed to the next test
it is checked: still recorded ready, and every process's URL answering /health
within a generous deadline; a run that is not is brought down and started again,
so no test inherits another's broken run. Tests that kill, reconfigure or stop an
engine keep their own runs (tests/local/test_vllm_runs.py and the like).

tests/conftest.py stops every shared run once the next test needs none of them,
so they hold memory only while their users run (under ``--dist loadgroup`` the
real-vLLM tests run one after another on one worker: tests/helpers/parallel.py).
"""

from __future__ import annotations

import time
from pathlib import Path

from tests.helpers.cli import runs_env, servekit_cli
from tests.helpers.waiting import healthy

from servekit.local.state import read_state, seen_phase

UP_TIMEOUT_S = 900
HEALTH_DEADLINE_S = 120


class SharedRuns:
    """Layouts up on real vLLM in ``root`` (the tiny model built there), started on demand."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.env = runs_env(root)
        self._up: list[str] = []
        self._model_built = False

    def run_dir(self, layout: str) -> Path:
        return self.root / "runs" / layout.replace("/", "__")

    def up(self, layout: str) -> dict[str, str]:
        """``layout`` up and checked healthy; returns the environment that finds it."""
        if layout in self._up and not self._usable(layout):
            self._down(layout)
        if layout not in self._up:
            self._start(layout)
        return self.env

    def close(self) -> None:
        """Every shared run down (the last one's user has finished)."""
        for layout in list(self._up):
            self._down(layout)

    def _start(self, layout: str) -> None:
        if not self._model_built:
            from servekit.local.tinymodel import build_tiny_model

            build_tiny_model(self.root / ".servekit" / "models" / "tiny")
            self._model_built = True
        up = servekit_cli(
            "up", layout, "--engine", "vllm", "--detach", "--free-ports",
            cwd=self.root, env=self.env, timeout=UP_TIMEOUT_S,
        )  # fmt: skip
        self._up.append(layout)
        assert up.returncode == 0, up.stdout + up.stderr[-2000:]
        assert self._usable(layout), f"{layout} came up but does not answer /health"

    def _usable(self, layout: str) -> bool:
        """Recorded ready, and every process with a URL answers /health (generous deadline)."""
        state = read_state(self.run_dir(layout) / "state.json")
        if state is None or seen_phase(state) != "ready":
            return False
        urls = [p.url for p in state.processes if p.url]
        deadline = time.monotonic() + HEALTH_DEADLINE_S
        while not all(healthy(u) for u in urls):
            if time.monotonic() > deadline:
                return False
            time.sleep(1)
        return True

    def _down(self, layout: str) -> None:
        self._up.remove(layout)
        down = servekit_cli("down", layout, cwd=self.root, env=self.env, timeout=300)
        assert down.returncode == 0, down.stdout + down.stderr[-2000:]
