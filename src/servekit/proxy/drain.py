"""Drain: an engine that leaves gets no new work, and nothing in flight on it is lost.

Whoever asks it to leave (the admin API, discovery seeing its pod go or turn
unready, the pod's own preStop call) starts one :class:`Drain`; asking again
joins the same one. From that moment the instance is ``DRAINING``: no policy
chooses it. Then:

1. its running work finishes on it, for at most ``--drain-grace`` seconds;
2. at the grace's end each stream that can migrate (``--migration-limit``, a
   streamed completion or chat) is cut here and carried on by another
   prefill/decode pair (:mod:`servekit.proxy.migration`): the client sees one
   unbroken answer. Only when another engine of the role takes work: cutting
   the streams of the last one would end them with an error, so they finish
   where they are;
3. what cannot migrate (an unstreamed answer, a replica-mode stream, a prefill
   exchange) is waited for; so is a prefill's KV that a decoder has not pulled
   yet (:class:`~servekit.proxy.instances.Hold`, at most the KV lease);
4. then the drain is done (:attr:`Drain.done`): a removal leaves the pool and
   its KV-event subscription ends; a plain drain stays, drained, until undrained.

The drain is done the moment the instance is idle (checked when each lease or
hold ends), not at the next tick: a preStop hook waiting on it returns at once.
How long the pod may take overall is its termination grace period, which the
rendering sets above ``--drain-grace`` plus the longest unstreamed answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from servekit.proxy.instances import Instance, Lease, State

if TYPE_CHECKING:
    from servekit.proxy.metrics import ProxyMetrics

log = logging.getLogger("servekit.proxy")
RECHECK_S = 1.0  # past the grace: how often a drain looks for an engine to migrate to


class Drain:
    """One instance leaving: why, until when its streams may run here, and when it is done."""

    def __init__(
        self, inst: Instance, reason: str, remove: bool, grace_s: float,
        finished: Callable[[Drain], None],
    ) -> None:  # fmt: skip
        self.inst = inst
        self.reason = reason
        self.remove = remove
        self.started = time.monotonic()
        self.deadline = self.started + grace_s
        self.cutting = False  # past the grace, with somewhere to migrate to
        self.migrated = 0  # streams cut here to carry on elsewhere
        self.done = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._finished = finished

    def wake(self) -> None:
        """Work on the instance ended: done now if it is idle, else the task looks again."""
        if self.inst.idle():
            self.finish()
        else:
            self._wake.set()

    def cut(self, lease: Lease) -> None:
        """End ``lease``'s stream here; its relay carries it on elsewhere."""
        cut, lease.cut = lease.cut, None
        if cut is not None and not lease.released:
            self.migrated += 1
            cut()

    def finish(self) -> None:
        if self.done.is_set():
            return
        self.done.set()
        if self.task is not None and self.task is not asyncio.current_task():
            self.task.cancel()
        self._finished(self)

    def status(self) -> dict[str, object]:
        """What a preStop call and the admin listing are told about it."""
        return {
            "name": self.inst.name,
            "url": self.inst.url,
            "role": self.inst.role,
            "reason": self.reason,
            "drained": self.done.is_set(),
            "in_flight": self.inst.requests,
            "pending_pulls": self.inst.pending_pulls(),
            "migrated": self.migrated,
            "seconds": round(time.monotonic() - self.started, 3),
        }

    async def wait_idle(self, until: float | None) -> None:
        """Until the instance is idle, or ``until`` (monotonic; None: no bound) passes."""
        while not self.inst.idle():
            now = time.monotonic()
            bounds = [h.deadline for h in self.inst.holds if h.deadline > now]
            if until is not None:
                bounds.append(until)
            timeout = (min(bounds) - now) if bounds else None
            if timeout is not None and timeout <= 0:
                if until is not None and now >= until:
                    return
                continue  # a hold just expired: look again
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout)
            self._wake.clear()


class Drainer:
    """Starts, joins and ends the drains of one proxy's instances."""

    def __init__(
        self, grace_s: float, metrics: ProxyMetrics,
        elsewhere: Callable[[Instance], bool], left: Callable[[Instance], None],
    ) -> None:  # fmt: skip
        self.grace_s = grace_s
        self.metrics = metrics
        self._elsewhere = elsewhere  # another engine of its role takes work
        self._left = left  # a removed instance leaves the pool (and its event feed)
        self.drains: dict[Instance, Drain] = {}  # the instances leaving or drained

    def start(self, inst: Instance, reason: str, remove: bool) -> Drain:
        """Drain ``inst`` (it takes no new work from now on); joins a drain under way."""
        inst.state = State.DRAINING
        drain = self.drains.get(inst)
        if drain is not None:
            if remove and not drain.remove:
                drain.remove = True
                if drain.done.is_set():  # drained already: it goes now
                    self.drains.pop(inst, None)
                    self._left(inst)
            return drain
        drain = inst.drain = self.drains[inst] = Drain(
            inst, reason, remove, self.grace_s, self._finished
        )
        self.metrics.drains.labels(inst.role, reason).inc()
        log.info("%s leaving (%s): no new work; streams may run %.0fs here",
                 inst.name, reason, self.grace_s)  # fmt: skip
        if inst.idle():
            drain.finish()
        else:
            drain.task = asyncio.get_running_loop().create_task(self._run(drain))
        return drain

    def cancel(self, inst: Instance) -> None:
        """Undrain: the instance is taken back (probes re-admit it)."""
        drain, inst.drain = self.drains.pop(inst, None), None
        if drain is not None and drain.task is not None:
            drain.task.cancel()
        inst.state = State.UNKNOWN
        inst.fails = inst.oks = 0

    async def _run(self, drain: Drain) -> None:
        await drain.wait_idle(drain.deadline)
        inst = drain.inst
        said = False
        while not inst.idle():
            drain.cutting = self._elsewhere(inst)
            if drain.cutting:
                for lease in list(inst.leases):
                    drain.cut(lease)
            elif not said:
                said = True
                log.warning("%s: grace passed, and no other %s takes work: its %d requests "
                            "finish here", inst.name, inst.role, inst.requests)  # fmt: skip
            await drain.wait_idle(time.monotonic() + RECHECK_S)
        drain.finish()

    def _finished(self, drain: Drain) -> None:
        inst = drain.inst
        self.metrics.drain_seconds.labels(inst.role).observe(time.monotonic() - drain.started)
        if drain.migrated:
            self.metrics.drain_migrated.labels(inst.role).inc(drain.migrated)
        log.info("%s drained (%s) after %.1fs, %d streams migrated",
                 inst.name, drain.reason, time.monotonic() - drain.started,
                 drain.migrated)  # fmt: skip
        if drain.remove:
            self.drains.pop(inst, None)
            self._left(inst)
