"""What the autoscaler reads, measured by the proxy on its own traffic, and the loop that reads it.

The :class:`Sampler` watches every lease start and end (it is the pools'
:class:`~servekit.proxy.instances.LoadObserver`), so it costs the request path a
few additions and never a lock:

- per role, the prompt tokens placed (arrivals) and finished, and the seconds
  each engine had work in flight (busy time): a prefill engine's throughput is
  tokens finished per busy second;
- per finished decode (or replica) stream, its time per output token (from its
  first relayed event to its end, over its events) and the streams its engine
  ran meanwhile, time-averaged (the integral of the engine's request count over
  the stream's life): the samples the decode model is fitted on;
- the time to first byte of every request (the app reports it).

:class:`Autoscaler` turns them into one :class:`~servekit.proxy.autoscale.Need`
per role every ``--autoscale-interval``, asks sibling workers for theirs (one
proxy pod's processes split its traffic), and exports the need, the capacity
it measured and the desired count. With ``--autoscale`` off none of this runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import TypeGuard

import aiohttp
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from servekit.proxy.autoscale import Limits, Need, Objectives, RoleScaler, RoleSignals
from servekit.proxy.config import ProxyConfig
from servekit.proxy.instances import Instance, Lease, Pool
from servekit.proxy.siblings import Siblings
from servekit.vocabulary import KV_CACHE_USAGE_PERC, NUM_REQUESTS_RUNNING

log = logging.getLogger("servekit.proxy.autoscale")
WINDOW_S = 30.0  # latency samples older than this are not the present
MAX_SAMPLES = 4096  # per role and kind, whatever the traffic
MAX_METRICS_BYTES = 4 << 20  # an engine's /metrics page read for its KV limit


@dataclass
class RoleTally:
    """What one role's work added up to (monotonic counters, read as deltas)."""

    arrived: float = 0.0  # prompt tokens placed
    finished: float = 0.0  # prompt tokens of finished work
    busy: float = 0.0  # engine-seconds with work in flight (ended intervals)
    since: dict[Instance, float] = field(default_factory=dict)  # busy from when
    streams: deque[tuple[float, float, float]] = field(
        default_factory=lambda: deque(maxlen=MAX_SAMPLES)
    )  # (time, streams on its engine, TPOT) of finished streams
    fresh: list[tuple[float, float]] = field(default_factory=list)  # not yet given to a model

    def busy_now(self, now: float) -> float:
        return self.busy + sum(now - t for t in self.since.values())


class Sampler:
    """The pools' load observer: counters and samples per role."""

    def __init__(self) -> None:
        self.roles: dict[str, RoleTally] = {}
        self.area: dict[Instance, tuple[float, float]] = {}  # (request-seconds, at)
        self.marks: dict[Lease, float] = {}  # a lease's engine's request-seconds at its start
        self.ttft: deque[tuple[float, float]] = deque(maxlen=MAX_SAMPLES)

    def watch(self, pool: Pool) -> None:
        pool.observer = self
        for inst in pool.members:
            inst.observer = self

    def _integrate(self, inst: Instance, now: float, count_before: int) -> float:
        total, at = self.area.get(inst, (0.0, now))
        total += count_before * (now - at)
        self.area[inst] = (total, now)
        return total

    def started(self, lease: Lease, now: float) -> None:
        inst = lease.instance
        tally = self.roles.setdefault(inst.role, RoleTally())
        tally.arrived += lease.prompt_tokens
        self.marks[lease] = self._integrate(inst, now, inst.requests - 1)
        if inst.requests == 1:
            tally.since[inst] = now

    def ended(self, lease: Lease, now: float) -> None:
        inst = lease.instance
        tally = self.roles.setdefault(inst.role, RoleTally())
        area = self._integrate(inst, now, inst.requests + 1)
        mark = self.marks.pop(lease, area)
        tally.finished += lease.prompt_tokens
        if inst.requests <= 0:
            tally.busy += now - tally.since.pop(inst, now)
            self.area.pop(inst, None)  # an idle engine's integral starts again
        first, events = lease.first_at, lease.events
        if first is not None and events >= 2 and now > lease.started:
            streams = (area - mark) / (now - lease.started)
            tpot = (now - first) / (events - 1)
            tally.streams.append((now, streams, tpot))
            tally.fresh.append((streams, tpot))
            if len(tally.fresh) > MAX_SAMPLES:
                del tally.fresh[:-MAX_SAMPLES]

    def first_byte(self, seconds: float) -> None:
        self.ttft.append((time.monotonic(), seconds))


def p90(values: list[float]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]


@dataclass
class Previous:
    """A role's counters at the last tick (rates are their deltas)."""

    at: float
    arrived: float
    finished: float
    busy: float


Peers = Callable[[], Awaitable[list[dict[str, Need]]]]


class Autoscaler:
    """Every ``--autoscale-interval``: needs per role, summed over workers, desired counts."""

    def __init__(
        self, config: ProxyConfig, pools: dict[str, Pool], session: aiohttp.ClientSession,
        headers: dict[str, str],
    ) -> None:  # fmt: skip
        self.config = config
        self.pools = pools
        self.session = session
        self.headers = headers
        self.sampler = Sampler()
        for pool in pools.values():
            self.sampler.watch(pool)
        limits = Limits(
            config.min_replicas, config.max_replicas, config.scale_up_window_s,
            config.scale_down_window_s, config.scale_up_period_s, config.scale_up_step,
            config.scale_down_period_s,
        )  # fmt: skip
        obj = Objectives(config.slo_ttft_s, config.slo_tpot_s, config.autoscale_target)
        decode_seed, prefill_seed = config.decode_capacity or None, config.prefill_capacity or None
        self.scalers = {
            role: RoleScaler(
                role, limits, obj, max(1, len(pool.members)),
                decode_seed=decode_seed, prefill_seed=prefill_seed,
            )
            for role, pool in pools.items()
        }  # fmt: skip
        self.previous: dict[str, Previous] = {}
        self.since = time.monotonic()  # the first window starts here: its work counts
        self.needs: dict[str, Need] = {}  # this worker's, last tick
        self.totals: dict[str, float] = {}  # every worker's, summed
        self.desired: dict[str, int] = {r: s.stable.desired for r, s in self.scalers.items()}
        self.peers: Peers | None = None  # the sibling workers' needs (servekit.proxy.workers)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.config.autoscale_interval_s)
            try:
                await self.tick(time.monotonic())
            except Exception:  # a bad tick must not end the loop; it is logged
                log.exception("autoscale tick failed")

    async def tick(self, now: float) -> None:
        kv_limits = await self._kv_limits()
        for role, scaler in self.scalers.items():
            self.needs[role] = scaler.need(self._signals(role, scaler, now, kv_limits.get(role)))
        others = await self.peers() if self.peers is not None else []
        for role, scaler in self.scalers.items():
            mine = self.needs[role]
            theirs = [o[role] for o in others if role in o]
            total = mine.engines + sum(n.engines for n in theirs)
            late = any(n.pressure > 1 for n in (mine, *theirs))
            hold = all(n.why == "hold" for n in (mine, *theirs))
            self.totals[role] = total
            engines = self.pools[role].healthy_count()
            desired = scaler.decide(now, total, engines, late=late, hold=hold)
            if desired != self.desired.get(role):
                log.info("autoscale %s: %d -> %d engines (need %.2f, %s)", role,
                         self.desired.get(role, 0), desired, total, mine.why)  # fmt: skip
            self.desired[role] = desired

    def _signals(self, role: str, scaler: RoleScaler, now: float, kv: float | None) -> RoleSignals:
        pool = self.pools[role]
        tally = self.sampler.roles.setdefault(role, RoleTally())
        busy = tally.busy_now(now)
        prev = self.previous.get(role, Previous(self.since, 0.0, 0.0, 0.0))  # from the start
        self.previous[role] = Previous(now, tally.arrived, tally.finished, busy)
        span = max(now - prev.at, 1e-9)
        if role == "prefill":
            scaler.prefill.add(tally.finished - prev.finished, busy - prev.busy)
        else:
            for streams, tpot in tally.fresh:
                scaler.decode.add(streams, tpot, scaler.slo)
        tally.fresh.clear()
        recent = now - WINDOW_S
        if role == "decode":
            latency = p90([t for at, _, t in tally.streams if at >= recent])
        else:
            latency = p90([s for at, s in self.sampler.ttft if at >= recent])
        members = pool.members
        return RoleSignals(
            engines=pool.healthy_count(),
            in_flight=float(sum(i.requests for i in members)),
            arrivals_s=(tally.arrived - prev.arrived) / span if now > prev.at else 0.0,
            backlog=float(sum(i.tokens for i in members)) if role == "prefill" else 0.0,
            latency_p90=latency,
            kv_limit=kv,
        )  # fmt: skip

    async def _kv_limits(self) -> dict[str, float]:
        """Per decode (or replica) role: the streams one engine's KV holds, from the
        engines' own ``vllm:num_requests_running`` / ``vllm:kv_cache_usage_perc``
        (the median engine's; none when the KV is too empty to say)."""
        out: dict[str, float] = {}
        for role, pool in self.pools.items():
            if role == "prefill":  # a prefill holds no streams
                continue
            found = await asyncio.gather(*(self._kv_limit(i) for i in pool.routable()))
            limits = sorted(v for v in found if v is not None)
            if limits:
                out[role] = limits[len(limits) // 2]
        return out

    async def _kv_limit(self, inst: Instance) -> float | None:
        timeout = aiohttp.ClientTimeout(total=self.config.engine_metrics_timeout_s)
        try:
            async with self.session.get(inst.url + "/metrics", timeout=timeout,
                                        headers=self.headers) as resp:  # fmt: skip
                if resp.status != 200:
                    return None
                raw = await resp.content.read(MAX_METRICS_BYTES + 1)
        except (aiohttp.ClientError, TimeoutError):
            return None
        if len(raw) > MAX_METRICS_BYTES:
            return None
        return kv_limit(raw.decode("utf-8", "replace"))

    def collector(self) -> Collector:
        return _AutoscaleCollector(self)


def kv_limit(page: str) -> float | None:
    """Streams the engine's KV holds: running / KV use, once the KV is a tenth used."""
    running = usage = 0.0
    with contextlib.suppress(ValueError):
        for family in text_string_to_metric_families(page):
            for sample in family.samples:
                if sample.name == NUM_REQUESTS_RUNNING:
                    running += sample.value
                elif sample.name == KV_CACHE_USAGE_PERC:
                    usage = max(usage, sample.value)
    return running / usage if usage >= 0.1 and running > 0 else None


class _AutoscaleCollector(Collector):
    def __init__(self, scaler: Autoscaler) -> None:
        self.scaler = scaler

    def collect(self) -> Iterator[Metric]:
        s = self.scaler
        desired = GaugeMetricFamily(
            "servekit_desired_replicas", "Engines the role needs (rate-limited, at least "
            "--min-replicas): what KEDA or an HPA scales the role's LeaderWorkerSet to",
            labels=["role"],
        )  # fmt: skip
        need = GaugeMetricFamily(
            "servekit_autoscale_need", "Engines this proxy process's traffic needs, before "
            "rounding and the windows (additive over proxy replicas)", labels=["role", "why"],
        )  # fmt: skip
        total = GaugeMetricFamily(
            "servekit_autoscale_need_total", "Engines the traffic of every worker of this proxy "
            "needs, before rounding and the windows", labels=["role"],
        )  # fmt: skip
        cap = GaugeMetricFamily(
            "servekit_autoscale_capacity", "What one engine of the role serves within its "
            "objective, as measured (decode, replica: streams; prefill: prompt tokens a second)",
            labels=["role"],
        )  # fmt: skip
        for role, d in sorted(s.desired.items()):
            desired.add_metric([role], d)
            n = s.needs.get(role)
            if n is not None:
                need.add_metric([role, n.why], n.engines)
                if n.capacity is not None:
                    cap.add_metric([role], n.capacity)
            if role in s.totals:
                total.add_metric([role], s.totals[role])
        yield from (desired, need, total, cap)


def need_of(doc: object) -> Need | None:
    """A sibling worker's :class:`Need`, as it sent it (None when it is not one)."""
    if not isinstance(doc, dict):
        return None
    engines, capacity, pressure, why = (
        doc.get(k) for k in ("engines", "capacity", "pressure", "why")
    )
    if not (_number(engines) and _number(pressure)) or why not in ("load", "slo", "hold"):
        return None
    if capacity is not None and not _number(capacity):
        return None
    return Need(engines, capacity, pressure, why)


def _number(value: object) -> TypeGuard[float]:
    return (
        isinstance(value, int | float) and not isinstance(value, bool)
        and math.isfinite(value) and value >= 0
    )  # fmt: skip


async def peer_needs(siblings: Siblings) -> list[dict[str, Need]]:
    """Every sibling worker's needs, by role (what does not parse is left out)."""
    out = []
    for doc in await siblings.needs():
        needs = {role: need_of(v) for role, v in doc.items()}
        out.append({role: n for role, n in needs.items() if n is not None})
    return out
