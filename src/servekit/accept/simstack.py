"""Simulated deployments: simulator endpoints behind servekit's real proxy process.

The self-check and the acceptance tests judge the checks against this stack, so
the proxy in front is the one users run (``python -m servekit.proxy``, given a
:class:`~servekit.proxy.ProxyConfig` turned into flags by the proxy's own
``to_argv``, so no flag is spelled here) and the engines are the simulator, whose
faults are the negative controls. One simulator thread serves every engine endpoint;
an endpoint named as the ``reference`` stays outside the proxy (the single
instance that PD answers are compared with).
"""

from __future__ import annotations

import contextlib
import dataclasses
import socket
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servekit.client import ReadyTarget, poll_ready
from servekit.deployment import Deployment, Endpoint
from servekit.proxy import ProxyConfig, to_argv
from servekit.sim import RunningSim, SimSpec, running_sim, spec_from_mapping
from servekit.vocabulary import url_for

READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0


@dataclass
class SimStack:
    """A running stack: the deployment clients see, the simulator, the proxy's log."""

    deployment: Deployment
    sim: RunningSim
    proxy_log: Path


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _with_logs(spec: Mapping[str, Any], log_dir: Path) -> SimSpec:
    """The spec with every endpoint logging to ``log_dir/NAME.log`` unless it says otherwise."""
    log_dir.mkdir(parents=True, exist_ok=True)
    endpoints = [
        {**e, "log": e.get("log") or str(log_dir / f"{e['name']}.log")} for e in spec["endpoints"]
    ]
    return spec_from_mapping({**spec, "endpoints": endpoints}, where="sim stack")


def proxy_config(
    spec: SimSpec, urls: Mapping[str, str], reference: str | None, **options: Any
) -> ProxyConfig:
    """The proxy in front of the spec's engines (the reference left out); ``options``:
    more of its config's fields (``migration_limit=0``...)."""
    by_role: dict[str, list[str]] = {"prefill": [], "decode": [], "mixed": []}
    modes: set[str] = set()
    bootstraps: list[str] = []
    for ep in spec.endpoints:
        if ep.name != reference:
            by_role[ep.role].append(urls[ep.name])
            modes.add(ep.kv_mode)
            if ep.role == "prefill":
                bootstraps.append(f"{ep.engine}={url_for(ep.host, ep.side_port)}")
    if not (by_role["prefill"] or by_role["decode"]):
        return ProxyConfig(replica=tuple(by_role["mixed"]), mode="replica", **options)
    mode = "prompt-keyed" if "prompt" in modes else "bootstrap" if "bootstrap" in modes else "pd"
    return ProxyConfig(
        prefill=tuple(by_role["prefill"]),
        decode=tuple(by_role["decode"]),
        mode=mode,
        prefill_bootstrap=tuple(bootstraps) if mode == "bootstrap" else (),
        **options,
    )


def _wait_healthy(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    def exited() -> None:
        if proc.poll() is not None:
            raise RuntimeError(f"proxy exited with {proc.returncode}: {log.read_text()[-400:]}")

    target = ReadyTarget("proxy", url, None)
    if poll_ready([target], READY_TIMEOUT_S, check=exited, poll_s=0.05):
        raise RuntimeError(f"proxy at {url} not healthy after {READY_TIMEOUT_S:.0f} s")


@contextlib.contextmanager
def running_proxy(config: ProxyConfig, log: Path, *, wait_healthy: bool = True) -> Iterator[str]:
    """The proxy as its own process on a free loopback port; yields its URL."""
    here = dataclasses.replace(config, host="127.0.0.1", port=_free_port())
    cmd = [sys.executable, "-m", "servekit.proxy", *to_argv(here)]
    url = url_for(here.host, here.port)
    with log.open("ab") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    try:
        if wait_healthy:
            _wait_healthy(url, proc, log)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _deployment(
    spec: SimSpec,
    sim: RunningSim,
    proxy_url: str,
    reference: str | None,
    capabilities: tuple[str, ...],
) -> Deployment:
    engines = tuple(
        Endpoint(name=e.name, role=e.role, url=sim.urls[e.name], engine_id=e.engine, log=e.log)
        for e in spec.endpoints
        if e.name != reference
    )
    return Deployment(
        engine="sim",
        model=spec.endpoints[0].served_model_name,
        entry_url=proxy_url,
        endpoints=(Endpoint(name="proxy", role="proxy", url=proxy_url), *engines),
        reference_url=sim.urls[reference] if reference else None,
        capabilities=capabilities,
        sim_speed=spec.speed,
    )


@contextlib.contextmanager
def sim_stack(
    spec: Mapping[str, Any],
    log_dir: Path,
    *,
    reference: str | None = None,
    capabilities: tuple[str, ...] = ("retrieval",),
    wait_healthy: bool = True,
    proxy_options: Mapping[str, Any] | None = None,
) -> Iterator[SimStack]:
    """Serve ``spec`` (a SimSpec mapping) with the real proxy in front; yield the stack.

    Prefill and decode endpoints go behind a PD proxy (prompt-keyed when their
    ``kv_mode`` is ``prompt``), mixed ones behind a replica proxy. Every
    endpoint logs to ``log_dir``, and the proxy to ``log_dir/proxy.log``.
    ``proxy_options``: more fields of the proxy's config (field name -> value).
    """
    checked = _with_logs(spec, log_dir)
    log = log_dir / "proxy.log"
    with running_sim(checked) as sim:
        config = proxy_config(checked, sim.urls, reference, **(proxy_options or {}))
        with running_proxy(config, log, wait_healthy=wait_healthy) as url:
            deployment = _deployment(checked, sim, url, reference, capabilities)
            yield SimStack(deployment, sim, log)
