"""``--workers N``: N proxy processes on one port, so the proxy uses every core of its pod.

The parent forks the workers before any event loop exists and then only
watches them: a worker that dies is started again (its own connections were
lost with it; the other workers' streams go on, since nothing of theirs lived in
it), and SIGTERM or SIGINT is passed on to every worker, which stops as a
single proxy does. Each worker binds the port with SO_REUSEPORT, so the kernel
hands each new connection to one of them; it routes, retries and migrates on
its own (:mod:`servekit.proxy.siblings` says what is shared and how).

What is per worker, and what that costs:

- load counts (outstanding tokens and requests per engine): a worker balances
  only the work it placed; the others' is invisible to it, so least-loaded
  balancing sees 1/N of the load (each worker still spreads its own evenly);
- health and outlier state: each worker probes every engine (N probes per
  interval) and ejects on the failures it saw;
- the kv-events index: each worker subscribes to every publisher, so all hold
  the same index; what a worker sent lately (the approximate view) is its own;
- discovery: each worker lists and watches the pods itself (N watches).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hmac
import logging
import os
import secrets
import shutil
import signal
import socket
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

from aiohttp import web
from prometheus_client.core import Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from servekit.proxy import admin
from servekit.proxy.config import ProxyConfig
from servekit.proxy.instances import Instance, State
from servekit.proxy.membership import Member, Publisher
from servekit.proxy.router import Router
from servekit.proxy.siblings import TOKEN_HEADER, WORKER_LABEL, Siblings, WorkerPlan

log = logging.getLogger("servekit.proxy")
RESTART_BACKOFF_S = (0.5, 30.0)  # a worker that keeps dying is restarted ever more slowly
STABLE_S = 30.0  # a worker that lived this long starts its backoff again


def reserve_port(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` with SO_REUSEPORT, never listening: it holds the
    port (port 0: picks one) for the workers, which bind it beside it. SO_REUSEADDR as
    every listener of asyncio has it: a proxy started again on its address (a restarted
    container keeps its pod's network) binds while its old connections are in TIME_WAIT."""
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host.strip("[]"), port))
    return sock


class Supervisor:
    """The parent of the workers: starts them, starts again those that die, stops them."""

    def __init__(self, config: ProxyConfig, serve_one: Callable[[ProxyConfig, WorkerPlan], int]):
        self.held = reserve_port(config.host, config.port)
        port = self.held.getsockname()[1]
        self.config = dataclasses.replace(config, port=port) if config.port == 0 else config
        self.serve_one = serve_one
        self.folder = tempfile.mkdtemp(prefix="servekit-proxy-")  # 0700: this user's only
        token = secrets.token_hex(16)
        self.plans = [WorkerPlan(i, config.workers, self.folder, token)
                      for i in range(config.workers)]  # fmt: skip
        self.pids: dict[int, int] = {}
        self.started: dict[int, float] = {}
        self.failures: dict[int, int] = {}
        self.stopping = False

    def spawn(self, plan: WorkerPlan) -> None:
        pid = os.fork()
        if pid == 0:  # the worker
            code = 1
            try:
                self.held.close()
                for sig in (signal.SIGTERM, signal.SIGINT):
                    signal.signal(sig, signal.SIG_DFL)
                code = self.serve_one(self.config, plan)
            except BaseException:
                log.exception("proxy worker %d failed", plan.index)
            finally:
                os._exit(code)
        self.pids[plan.index], self.started[plan.index] = pid, time.monotonic()

    def stop(self, signum: int = signal.SIGTERM, frame: Any = None) -> None:
        self.stopping = True
        for pid in list(self.pids.values()):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self.stop)
        signal.signal(signal.SIGINT, self.stop)
        cfg = self.config
        log.info("servekit proxy: %d workers on %s port %d", cfg.workers, cfg.host, cfg.port)
        try:
            for plan in self.plans:
                self.spawn(plan)
            while self.pids:
                try:
                    pid, status = os.wait()
                except ChildProcessError:
                    break
                self._ended(pid, status)
        finally:
            self.held.close()
            shutil.rmtree(self.folder, ignore_errors=True)
        return 0

    def _ended(self, pid: int, status: int) -> None:
        index = next((i for i, p in self.pids.items() if p == pid), None)
        if index is None:
            return
        del self.pids[index]
        if self.stopping:
            return
        lived = time.monotonic() - self.started[index]
        fails = self.failures[index] = 0 if lived > STABLE_S else self.failures.get(index, 0) + 1
        delay = min(RESTART_BACKOFF_S[0] * 2 ** (fails - 1), RESTART_BACKOFF_S[1]) if fails else 0.0
        log.warning("proxy worker %d ended (status %d) after %.1fs; starting it again in %.1fs",
                    index, status, lived, delay)  # fmt: skip
        time.sleep(delay)
        if not self.stopping:
            self.spawn(self.plans[index])


def supervise(config: ProxyConfig, serve_one: Callable[[ProxyConfig, WorkerPlan], int]) -> int:
    """Fork ``config.workers`` workers, restart those that die, stop them on SIGTERM/SIGINT."""
    return Supervisor(config, serve_one).run()


# -- inside a worker ------------------------------------------------------------


def _allowed(request: web.Request, token: str) -> bool:
    given = request.headers.get(TOKEN_HEADER, "")
    return hmac.compare_digest(given.encode("utf-8", "surrogateescape"), token.encode())


def sibling_app(router: Router, plan: WorkerPlan) -> web.Application:
    """What the other workers ask of this one, on its private socket."""
    app = web.Application(client_max_size=router.config.max_body_bytes)

    @web.middleware
    async def guard(request: web.Request, handler: Any) -> web.StreamResponse:
        if not _allowed(request, plan.token):
            return web.Response(status=403)
        response: web.StreamResponse = await handler(request)
        return response

    app.middlewares.append(guard)

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(body=router.metrics.render(), content_type="text/plain")

    async def change(request: web.Request) -> web.Response:
        try:
            doc = await request.json()
        except ValueError:
            return web.json_response({"error": "not JSON"}, status=400)
        status, out = await admin.perform(router, request.match_info["action"], doc)
        return web.json_response(out, status=status)

    async def needs(request: web.Request) -> web.Response:
        scaler = router.autoscaler
        doc = {} if scaler is None else {r: n.__dict__ for r, n in scaler.needs.items()}
        return web.json_response(doc)

    async def members(request: web.Request) -> web.Response:
        return web.json_response(snapshot(router))

    app.router.add_get("/sibling/metrics", metrics)
    app.router.add_post("/sibling/admin/{action}", change)
    app.router.add_get("/sibling/needs", needs)
    app.router.add_get("/sibling/members", members)
    return app


def snapshot(router: Router) -> list[dict[str, Any]]:
    """What a worker starting again needs of the membership the admin API changed."""
    out = []
    sources = router.kv.sources if router.kv is not None else {}
    for inst in router.instances():
        doc: dict[str, Any] = {"role": inst.role, "url": inst.url, "origin": inst.origin,
                               "draining": inst.state is State.DRAINING}  # fmt: skip
        if inst.bootstrap is not None:
            doc["bootstrap"] = list(inst.bootstrap)
        source = sources.get(inst.url)
        if source is not None:
            doc["kv_events"] = [source.endpoint, source.replay]
        out.append(doc)
    return out


def catch_up(router: Router, entries: list[dict[str, Any]]) -> int:
    """Replay a sibling's admin-made membership here; how many changes that took."""
    changes = 0
    wanted = {(e.get("role"), e.get("url")) for e in entries if isinstance(e, dict)}
    for static in list(router.instances()):
        if static.origin == "static" and (static.role, static.url) not in wanted:
            router.members.leave(static, "admin-remove")  # removed before this worker started
            changes += 1
    for entry in entries:
        if not isinstance(entry, dict) or entry.get("origin") == "discovery":
            continue
        role, url = entry.get("role"), entry.get("url")
        if role not in router.pools or not isinstance(url, str):
            continue
        inst: Instance | None = router.members.find(url, role)
        if inst is None and entry.get("origin") == "admin":
            kv = entry.get("kv_events")
            publisher = Publisher(str(kv[0]), kv[1]) if isinstance(kv, list) and kv else None
            boot = entry.get("bootstrap")
            bootstrap = (str(boot[0]), str(boot[1])) if isinstance(boot, list) else None
            inst = router.members.join(Member(role, url, publisher, bootstrap), "admin")
            changes += 1
        if inst is not None and entry.get("draining") and inst.state is not State.DRAINING:
            router.members.drain(inst, "admin-drain")
            changes += 1
    return changes


class _Merged(Collector):
    """Every worker's page, each sample labelled with its worker."""

    def __init__(self, pages: dict[int, str]) -> None:
        self.pages = pages

    def collect(self) -> Iterator[Metric]:
        families: dict[str, Metric] = {}
        for index, text in sorted(self.pages.items()):
            try:
                parsed = list(text_string_to_metric_families(text))
            except ValueError:
                continue
            for fam in parsed:
                merged = families.get(fam.name)
                if merged is None:
                    merged = families[fam.name] = Metric(fam.name, fam.documentation, fam.type)
                label = {WORKER_LABEL: str(index)}
                merged.samples += [
                    Sample(s.name, {**s.labels, **label}, s.value, s.timestamp, s.exemplar)
                    for s in fam.samples
                ]
        yield from families.values()


async def every_workers_metrics(router: Router, siblings: Siblings) -> bytes:
    """The /metrics page of the whole proxy: this worker's and every sibling's series."""
    pages = await siblings.pages()
    pages[siblings.plan.index] = router.metrics.render().decode()
    return generate_latest(_Merged(pages))
