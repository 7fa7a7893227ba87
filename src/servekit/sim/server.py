"""Run a SimSpec: every endpoint on its own port, all in one asyncio process.

Each endpoint has its own aiohttp application and runner (its own router and
metrics registry); the optional admin server reaches every endpoint by name.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
from pathlib import Path
from typing import Any

from aiohttp import web

from servekit.errors import UsageError
from servekit.sim.admin import build_admin_app
from servekit.sim.clock import Clock
from servekit.sim.endpoint import SimEndpoint
from servekit.sim.http import build_app
from servekit.sim.pd import KvRegistry
from servekit.sim.protocols.bootstrap import (
    bootstrap_app,
    has_side_channel,
    serves_bootstrap,
    side_channel_app,
)
from servekit.sim.spec import SimSpec
from servekit.vocabulary import atomic_write_text, url_for

log = logging.getLogger("servekit.sim")
ABORT_S = 0.01


class SimServer:
    """A running simulator: its endpoints by name and their base URLs."""

    def __init__(self, spec: SimSpec, *, shutdown_timeout_s: float = 60.0) -> None:
        self.spec = spec
        self.shutdown_timeout_s = shutdown_timeout_s
        """How long a stop lets requests in flight finish before it cancels them (aiohttp's
        graceful shutdown); ``servekit sim serve`` passes vLLM's ``--shutdown-timeout``."""
        self.clock = Clock(spec.time_scale)
        self.kv_registry = KvRegistry()
        self.endpoints: dict[str, SimEndpoint] = {
            e.name: SimEndpoint(e, self.clock, self.kv_registry, spec.seed + i)
            for i, e in enumerate(spec.endpoints)
        }
        self.admin_url: str | None = None
        self._runners: list[web.AppRunner] = []

    @property
    def urls(self) -> dict[str, str]:
        """Base URL of every endpoint, by endpoint name."""
        return {name: ep.url for name, ep in self.endpoints.items()}

    async def start(self) -> None:
        try:
            for ep in self.endpoints.values():
                ep.url = await self._bind(build_app(ep), ep.spec.host, ep.spec.port)
                if has_side_channel(ep.spec):  # vLLM's MooncakeConnector, across processes
                    bound = await self._bind(side_channel_app(ep), ep.spec.host, 0)
                    port = int(bound.rsplit(":", 1)[1])  # the system's pick, as the connector's
                    ep.worker_addr = url_for(ep.spec.worker_host, port, scheme="tcp")
                if serves_bootstrap(ep.spec):
                    await self._bind(bootstrap_app(ep), ep.spec.host, ep.spec.bootstrap_server_port)
                ep.start()
            if self.spec.admin is not None:
                admin = self.spec.admin
                self.admin_url = await self._bind(
                    build_admin_app(self.endpoints), admin.host, admin.port
                )
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        for runner in reversed(self._runners):
            with contextlib.suppress(Exception):
                await runner.cleanup()
        self._runners.clear()
        for ep in self.endpoints.values():
            await ep.stop()

    async def _bind(self, app: web.Application, host: str, port: int) -> str:
        # handler_cancellation: a client that goes away cancels its handler, so the
        # engine drops the sequence (vLLM aborts requests on disconnect too).
        runner = web.AppRunner(
            app, access_log=None, handle_signals=False, handler_cancellation=True,
            # aiohttp reads a timeout of 0 as none at all: cut at once is the least above it
            shutdown_timeout=max(self.shutdown_timeout_s, ABORT_S),
        )  # fmt: skip
        await runner.setup()
        self._runners.append(runner)
        site = web.TCPSite(runner, host, port, reuse_address=True)
        try:
            await site.start()
        except OSError as exc:
            raise UsageError(
                f"port {host}:{port}: cannot listen ({exc.strerror}); pick another"
            ) from exc
        bound = runner.addresses[0][1] if runner.addresses else port
        return url_for(host, bound)

    def describe(self) -> dict[str, Any]:
        """Where everything listens (written to ``--ready-file``)."""
        states = [ep.state() for ep in self.endpoints.values()]
        return {"admin_url": self.admin_url, "endpoints": [_ready(s) for s in states]}


def _ready(state: dict[str, Any]) -> dict[str, Any]:
    """What the ready file says of one endpoint: a part of its ``/sim/state``."""
    return {k: state[k] for k in ("name", "role", "engine_id", "url", "profile", "label")}


async def serve(spec: SimSpec, *, shutdown_timeout_s: float = 60.0) -> SimServer:
    """Start a simulator in the running event loop; ``await server.stop()`` ends it."""
    server = SimServer(spec, shutdown_timeout_s=shutdown_timeout_s)
    await server.start()
    return server


def run(spec: SimSpec, ready_file: Path | None = None, *, shutdown_timeout_s: float = 60.0) -> None:
    """Serve until SIGTERM or SIGINT, then close every port: requests still in flight
    may finish for ``shutdown_timeout_s`` (0: they are cut at once)."""
    asyncio.run(_run(spec, ready_file, shutdown_timeout_s))


async def _run(spec: SimSpec, ready_file: Path | None, shutdown_timeout_s: float) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    server = await serve(spec, shutdown_timeout_s=shutdown_timeout_s)
    try:
        info = server.describe()
        for ep in info["endpoints"]:
            log.info("sim endpoint %s (%s) at %s", ep["name"], ep["role"], ep["url"])
        if server.admin_url:
            log.info("sim admin at %s", server.admin_url)
        if ready_file is not None:
            # Readers polling for the ready file never see half of it.
            atomic_write_text(ready_file, json.dumps(info, indent=2) + "\n")
        await stop.wait()
    finally:
        await server.stop()
