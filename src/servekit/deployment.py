"""What a running deployment looks like to its clients (accept, bench, verify).

``servekit up`` writes a :class:`Deployment` as ``deployment.json`` in its run
directory; ``--target NAME`` reads it back; ``--target URL`` builds a minimal one
by asking the URL. One model, so every consumer sees the same endpoints.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from servekit.errors import UsageError
from servekit.userdirs import state_dir

EndpointRole = Literal["proxy", "mixed", "prefill", "decode", "reference"]
EngineKind = Literal["vllm", "sim", "external"]


class Endpoint(BaseModel):
    """One HTTP endpoint of a deployment (an API server, a DP rank, the proxy)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    role: EndpointRole
    url: str
    engine_id: str | None = None
    log: Path | None = Field(default=None, description="log file when the process runs here")


class Deployment(BaseModel):
    """A deployment as seen from outside: where to send traffic, what to expect."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    layout: str | None = None
    engine: EngineKind = "external"
    model: str | None = Field(default=None, description="served model name")
    entry_url: str = Field(description="where clients send requests: the proxy or the engine")
    endpoints: tuple[Endpoint, ...] = ()
    reference_url: str | None = Field(
        default=None, description="a single non-PD instance serving the same model, for PD==single"
    )
    capabilities: tuple[str, ...] = ()
    run_dir: Path | None = None
    versions: dict[str, str] = Field(default_factory=dict)
    image: str | None = None
    sim_speed: float | None = Field(
        default=None, gt=0, description="simulated runs: virtual seconds per wall second"
    )

    def by_role(self, role: EndpointRole) -> tuple[Endpoint, ...]:
        return tuple(e for e in self.endpoints if e.role == role)

    @property
    def is_pd(self) -> bool:
        return bool(self.by_role("prefill")) and bool(self.by_role("decode"))

    @property
    def simulated(self) -> bool:
        return self.engine == "sim"


FOLDER_RUNS = Path(".servekit/runs")
"""Where runs lived before the per-user state folder; still listed from the current folder."""


def runs_root() -> Path:
    """Where ``servekit up`` keeps run directories: ``SERVEKIT_RUNS``, else the per-user
    state folder (``$XDG_STATE_HOME/servekit/runs``), so a run is found from any folder."""
    chosen = os.environ.get("SERVEKIT_RUNS")
    return Path(chosen).resolve() if chosen else state_dir() / "runs"


def run_roots() -> list[Path]:
    """Every folder that may hold runs: :func:`runs_root`, then (unless ``SERVEKIT_RUNS``
    is set) the current folder's ``.servekit/runs`` from earlier versions."""
    roots = [runs_root()]
    here = FOLDER_RUNS.resolve()
    if "SERVEKIT_RUNS" not in os.environ and here.is_dir() and here not in roots:
        roots.append(here)
    return roots


def run_dir_for(layout: str) -> Path:
    """Where a new run of a layout name such as ``local/1p1d`` goes."""
    return runs_root() / layout.replace("/", "__")


def run_dirs_of(layout: str) -> list[Path]:
    """Every existing run directory of ``layout`` (one per root that has it)."""
    slug = layout.replace("/", "__")
    return [root / slug for root in run_roots() if (root / slug).is_dir()]


def find_run_dir(layout: str) -> Path:
    """The run directory of ``layout`` that exists (the per-user one first), else the new one."""
    return next(iter(run_dirs_of(layout)), run_dir_for(layout))


def load_deployment(target: str) -> Deployment:
    """Resolve ``--target URL|NAME`` to a Deployment.

    A URL becomes an external deployment with that entry; a layout name reads
    the ``deployment.json`` that ``servekit up`` wrote.
    """
    if target.startswith(("http://", "https://")):
        return Deployment(entry_url=target.rstrip("/"))
    found = [d / "deployment.json" for d in run_dirs_of(target)]
    path = next((f for f in found if f.is_file()), run_dir_for(target) / "deployment.json")
    if not path.is_file():
        raise UsageError(
            f"--target {target}: no running deployment found at {path}; "
            f"start it with 'servekit up {target}' or pass a URL"
        )
    return Deployment.model_validate_json(path.read_text())
