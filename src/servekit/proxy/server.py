"""Start and stop a proxy: one process, one event loop, one backend session.

:func:`start_proxy` is what tests, benchmarks and the simulator integration use
(it binds, starts the probes and returns the bound URL); :func:`main` is the
``python -m servekit.proxy`` entry, which serves until SIGTERM or SIGINT.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from dataclasses import dataclass
from functools import partial

import aiohttp
from aiohttp import web
from prometheus_client import Gauge

from servekit.errors import UsageError
from servekit.proxy import fds
from servekit.proxy.app import BAD_REQUESTS, CONNS, build_app
from servekit.proxy.config import ProxyConfig, parse_args
from servekit.proxy.conns import Connections, ConnectionSite
from servekit.proxy.demand import peer_needs
from servekit.proxy.discovery import Discovery, start_discovery
from servekit.proxy.discovery_spec import load_spec
from servekit.proxy.kube import KubeError
from servekit.proxy.ratelog import RateLimited, ServerLog, loop_exception_handler
from servekit.proxy.router import Router
from servekit.proxy.siblings import Siblings, WorkerPlan
from servekit.proxy.workers import catch_up, sibling_app, supervise
from servekit.vocabulary import url_for

log = logging.getLogger("servekit.proxy")
# After an answer that leaves a body unread (413, 408, a 404 with a body), aiohttp reads
# and drops what still comes for this long before it closes, so the answer is not lost
# to a reset; aiohttp's default (10 s) held every refused connection that long.
LINGER_S = 2.0


@dataclass
class RunningProxy:
    """A started proxy: where it listens and how to stop it."""

    router: Router
    runner: web.AppRunner
    probes: asyncio.Task[None]
    port: int
    discovery: Discovery | None = None
    scaling: asyncio.Task[None] | None = None

    @property
    def connections(self) -> Connections:
        """The open client connections and what was shed (read by tests and benchmarks)."""
        return self.runner.app[CONNS]

    @property
    def url(self) -> str:
        host = self.router.config.host
        return url_for("127.0.0.1" if host == "0.0.0.0" else host, self.port)

    async def stop(self) -> None:
        for limiter in (self.runner.app[BAD_REQUESTS], self.connections.shed_log):
            limiter.flush()  # what was suppressed is still reported
        for task in (self.probes, self.scaling):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if self.discovery is not None:
            await self.discovery.stop()
        await self.runner.cleanup()
        await self.router.session.close()


async def start_proxy(config: ProxyConfig, reuse_port: bool = False) -> RunningProxy:
    """Bind the proxy (``port=0`` picks a free one) and start the health probes
    (``reuse_port``: beside the other workers of a ``--workers`` proxy)."""
    connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=60, enable_cleanup_closed=True)
    session = aiohttp.ClientSession(connector=connector)
    router = Router(config, session)
    app = build_app(router)
    table = app[CONNS]
    engines = len(list(router.instances())) + _discoverable(config)
    table.cap, backlog, warning = fds.connection_cap(config.max_connections, engines)
    if warning:
        log.warning("%s", warning)
    runner = web.AppRunner(
        app, handler_cancellation=True, access_log=None, logger=server_log(config, app[BAD_REQUESTS]),
        keepalive_timeout=config.keepalive_timeout_s, lingering_time=LINGER_S,
    )  # fmt: skip
    await runner.setup()
    site = ConnectionSite(
        runner, table, config.host, config.port, backlog=backlog, reuse_port=reuse_port
    )
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        await session.close()
        raise UsageError(
            f"--port {config.port}: cannot listen on {config.host} ({exc.strerror})"
        ) from None
    sockets = runner.addresses
    port = int(sockets[0][1]) if sockets else config.port
    probes = asyncio.get_running_loop().create_task(router.health.run())
    running = RunningProxy(router, runner, probes, port)
    if router.autoscaler is not None:
        running.scaling = asyncio.get_running_loop().create_task(router.autoscaler.run())
    try:
        running.discovery = _discover(router)
    except UsageError:
        await running.stop()
        raise
    return running


def _discoverable(config: ProxyConfig) -> int:
    """The engines discovery may bring (each keeps fds for probes): every endpoint of every
    worker index, --max-replicas times per role."""
    spec = config.discovered
    if config.discovery == "off" or spec is None:
        return 0
    per_instance = sum(len(w.endpoints) for role in spec.roles for w in role.workers)
    return per_instance * config.max_replicas


def _discover(router: Router) -> Discovery | None:
    """Start discovery when asked (its spec read now if the config was built in-process)."""
    cfg = router.config
    if cfg.discovery == "off":
        return None
    assert cfg.discovery_spec is not None or cfg.discovered is not None
    spec = cfg.discovered or load_spec(str(cfg.discovery_spec))
    try:
        return start_discovery(
            spec, router.members, cfg.kube_api, cfg.kube_token_file, ca_file=cfg.kube_ca_file,
            namespace=cfg.kube_namespace,
        )  # fmt: skip
    except KubeError as exc:
        raise UsageError(f"--discovery kubernetes: {exc}") from None


def server_log(config: ProxyConfig, bad: RateLimited) -> ServerLog:
    """aiohttp's request-handler logger: unparsable requests share ``bad`` with the app's."""
    errors = RateLimited(log, "request handler errors", config.log_burst, config.log_interval_s)
    return ServerLog(log, bad, errors)


async def serve(config: ProxyConfig, plan: WorkerPlan | None = None) -> None:
    """Serve until SIGTERM or SIGINT (``plan``: as one worker of a ``--workers`` proxy)."""
    loop = asyncio.get_running_loop()
    loop_errors = RateLimited(log, "event loop errors", config.log_burst, config.log_interval_s)
    loop.set_exception_handler(loop_exception_handler(loop_errors))
    running = await start_proxy(config, reuse_port=plan is not None)
    sibling_runner = None if plan is None else await join_siblings(running, plan)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    who = "" if plan is None else f" worker {plan.index + 1}/{plan.count}"
    log.info(
        "servekit proxy (%s)%s listening on %s (bound to %s port %d)",
        config.mode, who, running.url, config.host, running.port,
    )  # fmt: skip
    await stop.wait()
    await running.stop()
    if sibling_runner is not None:
        await sibling_runner.cleanup()
        if running.router.siblings is not None:
            await running.router.siblings.close()


async def join_siblings(running: RunningProxy, plan: WorkerPlan) -> web.AppRunner:
    """Serve the sibling channel of this worker, catch up on the admin changes made before
    it started, and let its autoscaler count the others' needs."""
    router = running.router
    siblings = router.siblings = Siblings(plan)
    Gauge("servekit_proxy_worker_pid", "The process id of this worker (--workers)",
          registry=router.metrics.registry).set(os.getpid())  # fmt: skip
    runner = web.AppRunner(sibling_app(router, plan), access_log=None)
    await runner.setup()
    path = plan.socket(plan.index)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)  # the socket of this worker's previous life
    await web.UnixSite(runner, path).start()
    entries = await siblings.members()
    if entries is not None and (done := catch_up(router, entries)):
        log.info("worker %d: %d admin changes made before it started, applied", plan.index, done)
    if router.autoscaler is not None:
        router.autoscaler.peers = partial(peer_needs, siblings)
    return runner


def _loop_factory() -> type[asyncio.AbstractEventLoop] | None:
    """uvloop when it is installed (vLLM brings it), else asyncio's loop."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.Loop


def run(config: ProxyConfig) -> None:
    """Configure logging and serve ``config`` until SIGTERM or SIGINT (``--workers``: in
    that many processes)."""
    logging.basicConfig(
        level=config.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    if config.workers > 1:
        try:
            supervise(config, serve_worker)
        except OSError as exc:
            raise UsageError(
                f"--port {config.port}: cannot listen on {config.host} ({exc.strerror})"
            ) from None
        return
    with asyncio.Runner(loop_factory=_loop_factory()) as runner:
        runner.run(serve(config))


def serve_worker(config: ProxyConfig, plan: WorkerPlan) -> int:
    """One worker process of a ``--workers`` proxy, until SIGTERM."""
    with asyncio.Runner(loop_factory=_loop_factory()) as runner:
        runner.run(serve(config, plan))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry of ``python -m servekit.proxy``; usage errors exit 2 in one line."""
    try:
        run(parse_args(sys.argv[1:] if argv is None else argv))
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    return 0
