"""What the supervisor runs: the Plan's processes, resolved for this machine.

The Plan is built once with loopback hosts, the local port map and this
interpreter, so its argv is used exactly as planned; this module only adds what
running here needs (log paths, the readiness rule, the working directory) and
the endpoints that ``deployment.json`` will list. ``launch.json`` in the run
directory holds a :class:`RunSpec`, which is all a detached supervisor reads.
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import Field

from servekit.render import Plan, ProcessPlan, resolve_env
from servekit.vocabulary import EndpointRole, Startable, StrictModel


class Launch(StrictModel):
    """One process to start here and how to know it is ready."""

    name: str
    role: str
    kind: str
    argv: tuple[str, ...]
    env: dict[str, str]
    url: str | None
    port: int | None
    ready_urls: tuple[str, ...]
    ready_model: str | None
    ready_backends: dict[str, int] = Field(
        default_factory=dict,
        description="proxy /health counts that must be reached, e.g. replica_instances: 2",
    )
    log: Path


class EndpointSpec(StrictModel):
    """An HTTP endpoint clients may use, and the process that serves it."""

    name: str
    role: EndpointRole
    url: str
    engine_id: str | None
    process: str


class RunSpec(StrictModel):
    """A whole local run: every launch, every endpoint, where it lives."""

    layout: str
    layout_names: tuple[str, ...] = Field(
        default=(), description="every name of the layout (up's name, its own, its aliases)"
    )
    engine: Startable
    model: str
    capabilities: tuple[str, ...] = ()
    cwd: Path
    run_dir: Path
    scratch: Path
    entry: str
    launches: tuple[Launch, ...]
    endpoints: tuple[EndpointSpec, ...]
    notes: tuple[str, ...] = Field(
        default=(), description="one line each: what preparing the run did on the user's behalf"
    )
    sim_speed: float | None = Field(
        default=None, gt=0, description="simulated runs: virtual seconds per wall second"
    )

    def launch(self, name: str) -> Launch:
        for item in self.launches:
            if item.name == name:
                return item
        raise KeyError(name)

    @property
    def entry_url(self) -> str:
        for ep in self.endpoints:
            if self.entry in (ep.process, ep.name):
                return ep.url
        raise KeyError(self.entry)


def _endpoint(proc: ProcessPlan) -> EndpointSpec | None:
    if proc.url is None or proc.headless:
        return None
    return EndpointSpec(
        name=proc.name,
        role=proc.role,
        url=proc.url,
        engine_id=proc.engine_id,
        process=proc.name,
    )


LOCAL_NIC = "lo"


def _launch(proc: ProcessPlan, plan: Plan, logs: Path) -> Launch:
    env = resolve_env(proc.env, node_ip=proc.host, node_nic=LOCAL_NIC, inherited=os.environ)
    return Launch(
        name=proc.name,
        role=proc.role,
        kind=proc.kind,
        argv=proc.argv,
        env=env,
        url=proc.url,
        port=proc.api_port,
        ready_urls=(proc.url,) if proc.url is not None else (),
        ready_model=plan.served_model_name if proc.kind == "engine" else None,
        ready_backends=proc.proxy.backend_counts() if proc.proxy is not None else {},
        log=logs / f"{proc.name}.log",
    )


def vllm_run_spec(
    plan: Plan,
    *,
    run_dir: Path,
    scratch: Path,
    cwd: Path,
    capabilities: tuple[str, ...] = (),
) -> RunSpec:
    """Every Plan process becomes a launch; every API process an endpoint."""
    logs = run_dir / "logs"
    endpoints = tuple(e for p in plan.processes if (e := _endpoint(p)) is not None)
    return RunSpec(
        layout=plan.layout,
        engine="vllm",
        model=plan.served_model_name,
        capabilities=capabilities,
        cwd=cwd,
        run_dir=run_dir,
        scratch=scratch,
        entry=plan.entry,
        launches=tuple(_launch(p, plan, logs) for p in plan.processes),
        endpoints=endpoints,
    )
