"""Helpers for the report tests: a simulator-backed runner and real accept/bench parts.

Runs use servekit's real acceptance suite and benchmark against the real
simulator on loopback; only the runner is a test double (it starts the
simulator in a thread instead of a detached supervisor).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servekit.accept import AcceptOptions, run_accept
from servekit.accept.models import AcceptResult
from servekit.bench.config import RunSettings, Workload
from servekit.bench.runner import run_workloads
from servekit.bench.schema import BenchResult
from servekit.catalog.loader import LoadedLayout
from servekit.deployment import Deployment, Endpoint
from servekit.report.models import KitCheck
from servekit.sim.testing import RunningSim, running_sim
from servekit.verify import adapters
from servekit.verify.components import Components
from servekit.vocabulary import Startable

# Checks that hold on the simulator with a plain mixed endpoint.
SAFE_CHECKS = ("service.health", "service.models", "api.sse", "api.usage", "invariant")


def sim_spec(name: str = "tiny-llama") -> dict[str, Any]:
    return {
        "endpoints": [
            {
                "name": "e0",
                "port": 0,
                "role": "mixed",
                "served_model_name": name,
                "max_model_len": 4096,
                "profile": "cpu-tiny",
            }
        ]
    }


@dataclass
class SimRunner:
    """A Runner that serves the layout from a simulator thread on loopback."""

    ups: list[str] = field(default_factory=list)
    downs: list[str] = field(default_factory=list)
    fail_up: bool = False
    _stack: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)
    sim: RunningSim | None = None

    def up(self, loaded: LoadedLayout, engine: Startable) -> Deployment:
        self.ups.append(loaded.layout.name)
        if self.fail_up:
            raise RuntimeError("engine died during start-up")
        self.sim = self._stack.enter_context(running_sim(sim_spec(loaded.layout.model.served_name)))
        return Deployment(
            layout=loaded.layout.name,
            engine=engine,
            model=loaded.layout.model.served_name,
            entry_url=self.sim.url,
            endpoints=(Endpoint(name="e0", role="mixed", url=self.sim.url),),
        )

    def down(self, loaded: LoadedLayout) -> str:
        self.downs.append(loaded.layout.name)
        self._stack.close()
        self.sim = None
        return f"{loaded.layout.name}: stopped"


def safe_accept(deployment: Deployment, out_dir: Path, contexts: Sequence[str]) -> AcceptResult:
    options = AcceptOptions(only=SAFE_CHECKS, context=tuple(contexts), out=out_dir)
    return run_accept(options, deployment=deployment)


def real_bench(
    deployment: Deployment, workloads: Sequence[Workload], settings: RunSettings
) -> BenchResult:
    return run_workloads(deployment, workloads, settings)


def no_kit(archive: Path, out_dir: Path) -> KitCheck:
    raise AssertionError("kit verifier called without --kit")


def components(runner: SimRunner, **override: Any) -> Components:
    parts: dict[str, Any] = {
        "runner": runner,
        "attach": adapters.attach,
        "accept": safe_accept,
        "bench": real_bench,
        "kit": no_kit,
    }
    parts.update(override)
    return Components(**parts)
