"""Active health probes and passive outlier detection: who may take new work.

Active: every instance's ``/health`` is probed each interval (concurrently, so a
slow instance delays nobody); ``eject_after`` consecutive failures eject it,
``readmit_after`` consecutive successes bring it back. A never-probed instance
is admitted on its first good probe.

Passive (outlier detection, as Envoy does it): ``outlier_after`` consecutive
failed requests on an instance (5xx, 200 with an empty body, connection
errors) eject it for ``outlier_eject_s`` times the number of its ejections in a
row (at most 30x); only then may good probes re-admit it. An outlier is never
the last healthy instance of its pool to go: ejecting it would turn errors
into "no healthy instance" for every request. Draining instances are left
alone: the admin put them there.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable

import aiohttp

from servekit.proxy.config import ProxyConfig
from servekit.proxy.instances import Instance, State

log = logging.getLogger("servekit.proxy")
MAX_EJECTION_FACTOR = 30


class HealthChecker:
    """Probes instances and applies the ejection / re-admission rules."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        instances: Callable[[], Iterable[Instance]],
        config: ProxyConfig,
        headers: dict[str, str],
    ) -> None:
        self._session = session
        self._instances = instances
        self._cfg = config  # the health_* and outlier_* fields, eject_after, readmit_after
        self._timeout = aiohttp.ClientTimeout(total=config.health_timeout_s)
        self._headers = headers
        self.on_outlier: Callable[[Instance], None] = lambda inst: None

    async def run(self) -> None:
        """Probe forever; cancelled when the proxy stops."""
        while True:
            await self.probe_all()
            await asyncio.sleep(self._cfg.health_interval_s)

    async def probe_all(self) -> None:
        members = [i for i in self._instances() if i.state is not State.DRAINING]
        await asyncio.gather(*(self.probe(i) for i in members))

    async def probe(self, inst: Instance) -> None:
        """One GET /health; 200 counts as success, anything else as failure."""
        try:
            async with self._session.get(
                f"{inst.url}/health", timeout=self._timeout, headers=self._headers
            ) as resp:
                await resp.read()
                ok = resp.status == 200
        except (aiohttp.ClientError, TimeoutError):
            ok = False
        self.record(inst, ok)

    def record(self, inst: Instance, ok: bool) -> None:
        """Apply one probe result to the instance's state."""
        if inst.state is State.DRAINING:
            return
        if ok:
            inst.fails, inst.oks = 0, inst.oks + 1
            if inst.state is State.UNKNOWN or (
                inst.state is State.EJECTED
                and inst.oks >= self._cfg.readmit_after
                and time.monotonic() >= inst.ejected_until
            ):
                self._set(inst, State.HEALTHY, "probe ok")
            return
        inst.oks, inst.fails = 0, inst.fails + 1
        if inst.state is State.HEALTHY and inst.fails >= self._cfg.eject_after:
            self._set(inst, State.EJECTED, f"{inst.fails} failed probes")

    def request_ok(self, inst: Instance) -> None:
        """A request got an answer from ``inst`` (2xx with a body, or a 4xx)."""
        inst.request_fails = 0
        inst.ejections = 0

    def request_failed(self, inst: Instance, reason: str, peers: Iterable[Instance]) -> None:
        """A request failed on ``inst``; eject it after ``outlier_after`` in a row."""
        inst.request_fails += 1
        if inst.request_fails < self._cfg.outlier_after or inst.state is not State.HEALTHY:
            return
        if not any(p is not inst and p.routable for p in peers):
            return  # never eject the last healthy instance of a pool
        inst.ejections += 1
        factor = min(inst.ejections, MAX_EJECTION_FACTOR)
        inst.ejected_until = time.monotonic() + self._cfg.outlier_eject_s * factor
        inst.oks, inst.request_fails = 0, 0
        self._set(
            inst, State.EJECTED, f"outlier: {self._cfg.outlier_after} failed requests, {reason}"
        )
        self.on_outlier(inst)

    @staticmethod
    def _set(inst: Instance, state: State, reason: str) -> None:
        if inst.state is not state:
            level = logging.INFO if state is State.HEALTHY else logging.WARNING
            log.log(level, "%s %s -> %s (%s)", inst.name, inst.state.value, state.value, reason)
            inst.state = state
