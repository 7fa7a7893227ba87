"""How late the harness's own event loop runs: its added latency, measured.

Every timestamp the client takes waits for the event loop to get round to the
socket; when the loop is busy, stamps are late by the loop's lag. A probe task
asks to wake every ``interval_s`` and records how late it woke. Its
distribution during a run bounds what the harness added to TTFT and ITL, so a
result can show the harness was not the bottleneck. The default period is
50 ms: a 2 ms probe woke the process often enough to slow a CPU-bound vLLM
sharing the same two cores (ITL +20% in benchmarks/bench_vs_vllm.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

from servekit.bench.background import in_background
from servekit.bench.stats import spread


class LoopLagProbe:
    """Records the wake-up lateness of a periodic task, in milliseconds."""

    def __init__(self, interval_s: float = 0.05) -> None:
        self.interval_s = interval_s
        self.lags_ms: list[float] = []

    async def _loop(self) -> None:
        while True:
            due = time.perf_counter() + self.interval_s
            await asyncio.sleep(self.interval_s)
            self.lags_ms.append(max(0.0, (time.perf_counter() - due) * 1000))

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[LoopLagProbe]:
        """Probe while the block runs."""
        try:
            async with in_background(self._loop()):
                yield self
        finally:
            if not self.lags_ms:
                # A run shorter than one period still gets one sample: how long
                # a ready callback waited for the loop.
                t0 = time.perf_counter()
                await asyncio.sleep(0)
                self.lags_ms.append((time.perf_counter() - t0) * 1000)

    def summary(self) -> dict[str, float | None]:
        """p50, p99 and max lag in ms (None when nothing was sampled)."""
        return spread("loop_lag", self.lags_ms)
