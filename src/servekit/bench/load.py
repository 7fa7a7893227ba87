"""Load generation: closed-loop (concurrency) and open-loop (request rate).

Every request goes through the one shared client, so all of them share one
connection pool. Records come back in submission order, failures included;
the duration is from the first dispatch to the last completion, as in
``vllm bench serve``.

Both generators run with the heap frozen (:func:`frozen_heap`): a full
garbage collection of everything the process had imported took 66 ms of CPU
in the middle of a 100-stream run (benchmarks/bench_capacity.py), a stall
that every stamp taken after it carried.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from collections.abc import Iterator, Sequence
from typing import Any, Literal

import numpy as np

from servekit.client import OpenAIClient, RequestRecord

NS = 1_000_000_000


def stream_body(prompt: str, max_tokens: int, model: str | None) -> dict[str, Any]:
    """A greedy ``ignore_eos`` streamed completion that reports usage."""
    body: dict[str, Any] = {
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if model is not None:
        body["model"] = model
    return body


@contextlib.contextmanager
def frozen_heap() -> Iterator[None]:
    """Collect once, then keep the collector off what existed before the run.

    ``gc.freeze`` moves every live object to a permanent generation, so a
    collection during the run scans only what the run allocated. The
    objects are unfrozen afterwards (and collected as usual from then on).
    """
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


async def run_concurrent(
    client: OpenAIClient, bodies: Sequence[dict[str, Any]], concurrency: int
) -> tuple[list[RequestRecord], float]:
    """Send all bodies with at most ``concurrency`` in flight; (records, seconds)."""
    gate = asyncio.Semaphore(max(concurrency, 1))

    async def one(body: dict[str, Any]) -> RequestRecord:
        async with gate:
            return await client.completion(body)

    with frozen_heap():
        t0 = time.perf_counter()
        records = await asyncio.gather(*(one(b) for b in bodies))
        return list(records), time.perf_counter() - t0


def arrival_offsets(
    n: int, rate: float, arrival: Literal["constant", "poisson"], seed: int
) -> list[float]:
    """Dispatch times in seconds from the start: fixed gaps or exponential ones."""
    if n <= 0:
        return []
    if arrival == "constant":
        gaps = np.full(n, 1.0 / rate)
    else:
        gaps = np.random.default_rng(seed).exponential(1.0 / rate, n)
    gaps[0] = 0.0
    return [float(x) for x in np.cumsum(gaps)]


async def run_at_rate(
    client: OpenAIClient,
    bodies: Sequence[dict[str, Any]],
    rate: float,
    arrival: Literal["constant", "poisson"],
    seed: int = 0,
) -> tuple[list[RequestRecord], float]:
    """Dispatch bodies on an arrival schedule without waiting for answers."""
    offsets = arrival_offsets(len(bodies), rate, arrival, seed)
    records, duration, _ = await replay(client, bodies, [round(x * NS) for x in offsets])
    return records, duration


async def replay(
    client: OpenAIClient, bodies: Sequence[dict[str, Any]], offsets_ns: Sequence[int]
) -> tuple[list[RequestRecord], float, int]:
    """Send each body at its offset from now; (records, seconds, start stamp in ns)."""
    loop = asyncio.get_running_loop()
    with frozen_heap():
        t0_ns = time.perf_counter_ns()
        t0 = loop.time()
        tasks: list[asyncio.Task[RequestRecord]] = []
        for body, offset in zip(bodies, offsets_ns, strict=True):
            delay = t0 + offset / NS - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(client.completion(body)))
        records = await asyncio.gather(*tasks)
        return list(records), (time.perf_counter_ns() - t0_ns) / NS, t0_ns
