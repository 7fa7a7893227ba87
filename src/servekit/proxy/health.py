"""Active and passive health: who may take new work.

Active: every instance's ``/health`` is probed each interval (concurrently, so a
slow instance delays nobody); ``eject_after`` consecutive failures eject it,
``readmit_after`` consecutive successes bring it back. A never-probed instance
is admitted on its first good probe. Passive: a connection error on a real
request ejects the instance at once; the probes re-admit it when it recovers.
Draining instances are left alone: the admin put them there.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable

import aiohttp

from servekit.proxy.instances import Instance, State

log = logging.getLogger("servekit.proxy")


class HealthChecker:
    """Probes instances and applies the ejection / re-admission rules."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        instances: Callable[[], Iterable[Instance]],
        *,
        interval_s: float,
        timeout_s: float,
        eject_after: int,
        readmit_after: int,
        headers: dict[str, str],
    ) -> None:
        self._session = session
        self._instances = instances
        self._interval = interval_s
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._eject_after = eject_after
        self._readmit_after = readmit_after
        self._headers = headers

    async def run(self) -> None:
        """Probe forever; cancelled when the proxy stops."""
        while True:
            await self.probe_all()
            await asyncio.sleep(self._interval)

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
                inst.state is State.EJECTED and inst.oks >= self._readmit_after
            ):
                self._set(inst, State.HEALTHY, "probe ok")
            return
        inst.oks, inst.fails = 0, inst.fails + 1
        if inst.state is State.HEALTHY and inst.fails >= self._eject_after:
            self._set(inst, State.EJECTED, f"{inst.fails} failed probes")

    def eject(self, inst: Instance, reason: str) -> None:
        """Passive ejection after a connection error on a request."""
        if inst.state in (State.HEALTHY, State.UNKNOWN):
            inst.oks = 0
            self._set(inst, State.EJECTED, reason)

    @staticmethod
    def _set(inst: Instance, state: State, reason: str) -> None:
        if inst.state is not state:
            level = logging.INFO if state is State.HEALTHY else logging.WARNING
            log.log(level, "%s %s -> %s (%s)", inst.name, inst.state.value, state.value, reason)
            inst.state = state
