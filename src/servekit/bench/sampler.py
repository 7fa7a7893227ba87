"""Engine state from ``/metrics``: waiting for idle, and sampling during a run.

A point is only valid when the engine served nothing else while it was
measured, so the harness waits for ``running = waiting = 0`` first and samples
``/metrics`` every 0.25 s while the point runs; the samples are its evidence.
The metrics are read from the deployment's engine endpoints (the PD proxy may
have no vLLM metrics) and summed; the running/waiting load is also kept per
role, so DP ranks count as one engine and a PD pair as one engine per role.
Targets without vLLM metrics are treated as idle and the point records that the
check could not be made. Engines out of reach behind a proxy are read through the
proxy's ``/metrics/engines`` (:class:`RelaySource`): one GET per sample, split by
its ``engine_url`` label into the same per-engine snapshots.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Sequence

from servekit.bench.background import in_background
from servekit.client import (
    EndpointError,
    MetricsSnapshot,
    OpenAIClient,
    merge_snapshots,
    parse_metrics,
)
from servekit.deployment import split_relay
from servekit.vocabulary import NUM_REQUESTS_RUNNING, NUM_REQUESTS_WAITING


def load_of(snap: MetricsSnapshot) -> tuple[float, float] | None:
    """(running, waiting) from a snapshot; None when the target does not expose them."""
    running, waiting = snap.gauge(NUM_REQUESTS_RUNNING), snap.gauge(NUM_REQUESTS_WAITING)
    if running is None or waiting is None:
        return None
    return running, waiting


async def try_metrics(client: OpenAIClient) -> MetricsSnapshot | None:
    """A snapshot, or None when the server has no usable /metrics."""
    try:
        return await client.metrics()
    except EndpointError:
        return None


class MetricsSource:
    """The /metrics of a deployment's engines, summed, and per role."""

    def __init__(self, clients: Sequence[OpenAIClient], roles: Sequence[str] = ()) -> None:
        self.clients = tuple(clients)
        self.roles = tuple(roles) or ("engine",) * len(self.clients)
        if len(self.roles) != len(self.clients):
            raise ValueError("one role per metrics client")

    async def by_role(self) -> list[tuple[str, MetricsSnapshot]]:
        """Each answering engine's snapshot with its role."""
        snaps = await asyncio.gather(*(try_metrics(c) for c in self.clients))
        return [(role, s) for role, s in zip(self.roles, snaps, strict=True) if s is not None]

    async def snapshot(self) -> MetricsSnapshot | None:
        """All engines' metrics summed; None when none of them answers."""
        present = [s for _, s in await self.by_role()]
        return merge_snapshots(present) if present else None


class RelaySource(MetricsSource):
    """The engines' metrics read through the proxy's ``/metrics/engines`` page.

    ``client`` is bound to the proxy, ``path`` is the relay's path on it, and
    ``engines`` lists each engine's URL (its ``engine_url`` label) and role.
    """

    def __init__(self, client: OpenAIClient, path: str, engines: Sequence[tuple[str, str]]) -> None:
        super().__init__([client] * len(engines), [role for _, role in engines])
        self.relay = client
        self.path = path
        self.urls = tuple(url for url, _ in engines)

    async def by_role(self) -> list[tuple[str, MetricsSnapshot]]:
        snaps = await self.each()
        return [
            (role, snap)
            for role, snap in zip(self.roles, snaps, strict=True)
            if isinstance(snap, MetricsSnapshot)
        ]

    async def each(self) -> list[MetricsSnapshot | EndpointError]:
        """Every engine's snapshot (or why not) from one read of the relay, in order.

        The page is split and parsed in a worker thread: at 52 engines that is
        about 0.25 s of pure Python, which on the event loop would delay the
        arrival stamps of the very streams being measured.
        """
        rec = await self.relay.request("GET", self.path)
        t_ns = time.perf_counter_ns()
        if not rec.ok or rec.response_body is None:
            return [EndpointError(f"{self.path}: {rec.error}", rec)] * len(self.urls)
        return await asyncio.to_thread(
            relay_snapshots, self.path, rec.response_body, self.urls, t_ns
        )


def relay_snapshots(
    path: str, page: str, urls: Sequence[str], t_ns: int
) -> list[MetricsSnapshot | EndpointError]:
    """Each engine's snapshot from one relay page (pure CPU), or why not."""
    parts = split_relay(page)
    found: list[MetricsSnapshot | EndpointError] = []
    for url in urls:
        try:
            found.append(_parsed(path, url, parts, t_ns))
        except EndpointError as exc:
            found.append(exc)
    return found


def _parsed(path: str, url: str, parts: dict[str, str], t_ns: int) -> MetricsSnapshot:
    text = parts.get(url)
    if text is None:
        raise EndpointError(f"{path}: no samples of {url}")
    try:
        return parse_metrics(text, t_ns)
    except ValueError as exc:
        raise EndpointError(f"{path}: not Prometheus text ({exc})") from exc


def role_loads(snaps: Sequence[tuple[str, MetricsSnapshot]]) -> dict[str, float]:
    """running + waiting summed per role (DP ranks of one role count as one engine)."""
    loads: dict[str, float] = {}
    for role, snap in snaps:
        load = load_of(snap)
        if load is not None:
            loads[role] = loads.get(role, 0.0) + sum(load)
    return loads


async def wait_idle(source: MetricsSource, timeout_s: float, poll_s: float = 0.1) -> bool:
    """Wait until nothing runs or waits; False if the target cannot tell us."""
    deadline = time.monotonic() + timeout_s
    while True:
        snap = await source.snapshot()
        load = load_of(snap) if snap is not None else None
        if load is None:
            return False
        if load == (0.0, 0.0):
            return True
        if time.monotonic() > deadline:
            raise TimeoutError(f"engine not idle after {timeout_s:.0f} s (running, waiting)={load}")
        await asyncio.sleep(poll_s)


class Sampler:
    """Samples the engines' /metrics every ``interval_s`` in the background."""

    def __init__(self, source: MetricsSource, interval_s: float) -> None:
        self._source = source
        self._interval = interval_s
        self.samples: list[MetricsSnapshot] = []
        self.loads: list[dict[str, float]] = []

    async def _sample(self) -> None:
        snaps = await self._source.by_role()
        if snaps:
            self.samples.append(merge_snapshots([s for _, s in snaps]))
            self.loads.append(role_loads(snaps))

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            await self._sample()

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[Sampler]:
        """Sample before, every interval during, and after the block."""
        await self._sample()
        try:
            async with in_background(self._loop()):
                yield self
        finally:
            await self._sample()

    def max_running(self) -> float | None:
        """Most requests seen running (or waiting) on one role's engines in one sample.

        Per role, because a PD request is two requests in turn (the prefill
        leg, then the decode leg): a prefill gauge that reads 1 a moment
        after its leg ended, beside the decode leg's 1, is still one request
        per engine. Another request on the same role's engines is not.
        None without metrics.
        """
        seen = [max(loads.values()) for loads in self.loads if loads]
        return max(seen) if seen else None

    def counter_delta(self, name: str) -> float | None:
        """Last minus first sample of a counter; None if absent."""
        return self._delta(lambda snap: snap.counter(name))

    def histogram_sum_delta(self, name: str) -> float | None:
        """Last minus first sample of a histogram's sum; None if absent."""
        return self._delta(lambda snap: histogram_sum(snap, name))

    def _delta(self, read: Callable[[MetricsSnapshot], float | None]) -> float | None:
        present = [v for v in map(read, self.samples) if v is not None]
        return present[-1] - present[0] if len(present) >= 2 else None

    async def settle(self, counter: str, at_least: float, timeout_s: float = 2.0) -> None:
        """Sample until ``counter`` has grown by ``at_least`` since the first sample.

        vLLM records a finished request's metrics just after it streams the
        last frame, so a sample taken the moment the client sees ``[DONE]`` can
        miss that request. Gives up after ``timeout_s`` (or at once when the
        target does not expose the counter).
        """
        first = self.samples[0] if self.samples else None
        last = await settled(self._source, first, counter, at_least, timeout_s=timeout_s)
        if last is not None:
            self.samples.append(last)


def histogram_sum(snap: MetricsSnapshot, name: str) -> float | None:
    """A histogram's running sum in one snapshot; None if absent."""
    hist = snap.histogram(name)
    return hist.sum if hist is not None else None


def counter_change(
    first: MetricsSnapshot | None, last: MetricsSnapshot | None, name: str
) -> float | None:
    """How much a counter grew from ``first`` to ``last``; None when either lacks it."""
    a = first.counter(name) if first is not None else None
    b = last.counter(name) if last is not None else None
    return b - a if a is not None and b is not None else None


def histogram_sum_change(
    first: MetricsSnapshot | None, last: MetricsSnapshot | None, name: str
) -> float | None:
    """How much a histogram's sum grew from ``first`` to ``last``; None when either lacks it."""
    a = histogram_sum(first, name) if first is not None else None
    b = histogram_sum(last, name) if last is not None else None
    return b - a if a is not None and b is not None else None


async def settled(
    source: MetricsSource,
    first: MetricsSnapshot | None,
    counter: str,
    at_least: float,
    *,
    timeout_s: float = 2.0,
    poll_s: float = 0.05,
) -> MetricsSnapshot | None:
    """A snapshot taken once ``counter`` grew by ``at_least`` since ``first``.

    The last snapshot taken when the deadline passes first; None when the
    target has no metrics. A target without the counter is not waited for.
    """
    if first is None or first.counter(counter) is None:
        return await source.snapshot()
    deadline = time.monotonic() + timeout_s
    while True:
        snap = await source.snapshot()
        grew = counter_change(first, snap, counter)
        if snap is None or (grew or 0.0) >= at_least or time.monotonic() > deadline:
            return snap
        await asyncio.sleep(poll_s)
