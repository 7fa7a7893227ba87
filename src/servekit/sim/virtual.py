"""Pure virtual time: the simulator's engines run as a discrete-event simulation.

The served simulator paces its virtual clock against the wall clock (``clock.py``):
a minute of traffic takes a minute, or a minute divided by ``--speed``, and a
loaded host delays what clients see. To predict many layouts under many
workloads (``servekit advise``), the same engines (``engine.py``: continuous
batching, chunked prefill, speculative steps, the KV cache and its prefix cache)
run here on an event loop whose clock jumps to the next timer instead of
waiting. Nothing sleeps, so an hour of traffic costs only the CPU its steps
take, and every time is exactly the model's, whatever the host is doing.

Only timers advance the clock: a task that waits for a socket would wait
forever, so the loop refuses to block (:class:`VirtualStall`) when no timer is
left and nothing is ready, instead of hanging.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from servekit.sim.clock import Clock
from servekit.sim.engine import Engine
from servekit.sim.kvcache import KvCache
from servekit.sim.metrics import EngineStats
from servekit.sim.profile import Profile

T = TypeVar("T")


class VirtualStall(RuntimeError):
    """Every task waits on another and no timer is due: the simulation cannot go on."""


class _JumpSelector(selectors.DefaultSelector):
    """Polls without waiting; a wait of T seconds moves the loop's clock by T instead."""

    def __init__(self, advance: Callable[[float], None]) -> None:
        super().__init__()
        self._advance = advance

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = super().select(0)
        if ready or timeout == 0:
            return ready
        if timeout is None:
            raise VirtualStall("no timer is due and every task is waiting: nothing can happen")
        self._advance(timeout)
        return []


class VirtualLoop(asyncio.SelectorEventLoop):
    """An event loop whose ``time()`` is virtual and jumps to the next due timer."""

    def __init__(self) -> None:
        self._virtual_now = 0.0
        super().__init__(_JumpSelector(self._jump))

    def _jump(self, seconds: float) -> None:
        self._virtual_now += max(0.0, seconds)

    def time(self) -> float:
        return self._virtual_now


class VirtualClock(Clock):
    """The simulator's clock read from a :class:`VirtualLoop` (one virtual second per second)."""

    def __init__(self) -> None:
        super().__init__(1.0)

    def now(self) -> float:
        return asyncio.get_running_loop().time()


def run_virtual(main: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run ``main()`` to completion on a fresh :class:`VirtualLoop` and close it."""
    loop = VirtualLoop()
    try:
        return loop.run_until_complete(main())
    finally:
        loop.close()


def virtual_engine(profile: Profile, clock: Clock) -> Engine:
    """One simulated engine (scheduler, KV cache, stats) of ``profile``; call ``start()`` in the loop."""
    kv = KvCache(profile.num_blocks, profile.block_size, profile.enable_prefix_caching)
    return Engine(profile, clock, kv, EngineStats())
