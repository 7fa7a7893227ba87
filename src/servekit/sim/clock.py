"""Virtual time scaled to the wall clock.

Virtual seconds are the model's own accounting (a decode step of the A3 profile
lasts 24.84 ms of virtual time); ``time_scale`` says how many wall seconds one
virtual second takes, so 0.01 runs a calibrated profile 100 times faster.
"""

from __future__ import annotations

import asyncio
import time


class Clock:
    """Monotonic virtual time shared by every endpoint of one simulator."""

    def __init__(self, time_scale: float = 1.0) -> None:
        self.time_scale = time_scale
        self._t0 = time.monotonic()

    def now(self) -> float:
        """Virtual seconds since the simulator started."""
        return (time.monotonic() - self._t0) / self.time_scale

    async def sleep(self, seconds: float) -> None:
        """Sleep ``seconds`` of virtual time."""
        if seconds > 0:
            await asyncio.sleep(seconds * self.time_scale)

    async def sleep_until(self, at: float) -> None:
        """Sleep until virtual time ``at`` (no-op when already past)."""
        delay = (at - self.now()) * self.time_scale
        if delay > 0:
            await asyncio.sleep(delay)
