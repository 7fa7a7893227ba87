"""Prometheus metrics of one proxy, in its own registry.

Counters and histograms are updated on the request path; per-instance gauges
(in-flight requests and tokens, health) are read from the pools at scrape time
by a collector, so routing pays nothing for them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sized
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from servekit.proxy.instances import Instance, State

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                   2.5, 5.0, 10.0, 30.0, 60.0, 300.0)  # fmt: skip


class _PoolCollector(Collector):
    """Reads instance state when /metrics is scraped."""

    def __init__(self, instances: Callable[[], Iterable[Instance]]) -> None:
        self._instances = instances

    def collect(self) -> Iterator[Metric]:
        labels = ["role", "instance"]
        reqs = GaugeMetricFamily(
            "servekit_proxy_inflight_requests", "Requests in flight per instance", labels=labels
        )
        toks = GaugeMetricFamily(
            "servekit_proxy_inflight_tokens",
            "Outstanding work in tokens per instance (prompt estimate + streamed)",
            labels=labels,
        )
        up = GaugeMetricFamily(
            "servekit_proxy_instance_healthy", "1 when the instance takes new work", labels=labels
        )
        leaving = GaugeMetricFamily(
            "servekit_proxy_instance_draining", "1 while the instance leaves (no new work; its "
            "streams finish or migrate)", labels=labels,
        )  # fmt: skip
        pulls = GaugeMetricFamily(
            "servekit_proxy_pending_pulls", "Prefilled KV on the instance that a decoder has not "
            "pulled yet (a leaving prefill waits for them)", labels=labels,
        )  # fmt: skip
        for inst in self._instances():
            key = [inst.role, inst.name]
            reqs.add_metric(key, inst.requests)
            toks.add_metric(key, inst.tokens)
            up.add_metric(key, 1.0 if inst.state is State.HEALTHY else 0.0)
            leaving.add_metric(key, 1.0 if inst.state is State.DRAINING else 0.0)
            pulls.add_metric(key, inst.pending_pulls())
        yield from (reqs, toks, up, leaving, pulls)


class ConnectionSource(Protocol):
    """What the connection collector reads (:class:`servekit.proxy.conns.Connections`)."""

    @property
    def cap(self) -> int: ...
    @property
    def open(self) -> Sized: ...
    @property
    def closed(self) -> Mapping[str, int]: ...


class _ConnectionCollector(Collector):
    """Open client connections and the ones the proxy closed, read at scrape time."""

    def __init__(self, source: ConnectionSource) -> None:
        self._source = source

    def collect(self) -> Iterator[Metric]:
        src = self._source
        yield GaugeMetricFamily(
            "servekit_proxy_client_connections", "Open client connections", value=len(src.open)
        )
        yield GaugeMetricFamily(
            "servekit_proxy_client_connections_cap", "Most open client connections", value=src.cap
        )
        shed = CounterMetricFamily(
            "servekit_proxy_client_connections_closed", "Client connections the proxy closed: "
            "header_timeout, send_timeout (the client took none of its answer), "
            "evicted (at the cap), refused (at the cap, all busy)",
            labels=["reason"],
        )  # fmt: skip
        for reason in ("header_timeout", "send_timeout", "evicted", "refused"):
            shed.add_metric([reason], src.closed.get(reason, 0))
        yield shed


class ProxyMetrics:
    """The proxy's metrics; one object per proxy, never the global registry."""

    def __init__(self, instances: Callable[[], Iterable[Instance]]) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "servekit_proxy_requests", "Client requests by route and status", ["route", "status"],
            registry=r,
        )  # fmt: skip
        self.errors = Counter(
            "servekit_proxy_errors", "Failures by stage and kind", ["stage", "kind"], registry=r
        )
        self.retries = Counter(
            "servekit_proxy_retries", "Attempts retried on another instance (PD decode: after a "
            "new prefill)", ["stage"], registry=r,
        )  # fmt: skip
        self.disconnects = Counter(
            "servekit_proxy_client_disconnects", "Clients gone before their answer ended, by "
            "where the request stood", ["stage"], registry=r,
        )  # fmt: skip
        self.migrations = Counter(
            "servekit_proxy_migrations", "Streams whose decoder failed mid-answer, by outcome "
            "(ok: a new decoder carried it on; failed: none could start; refused: it could not "
            "be carried on unchanged, an error event ended it; diverged: the new decoder's "
            "answer parted from what was sent, an error event ended it; finished: the decoder "
            "had finished the answer, the proxy ended the stream)", ["outcome"], registry=r,
        )  # fmt: skip
        self.failures = Counter(
            "servekit_proxy_backend_failures", "Failed requests and probes by what the probes "
            "that followed found down (request: the instance answers; instance: it alone; "
            "engine: every rank of its engine; node: every backend of its node)", ["scope"],
            registry=r,
        )  # fmt: skip
        self.lease_expired = Counter(
            "servekit_proxy_kv_lease_expired", "Decode requests not sent because the prefill's "
            "KV lease (--kv-lease, less a margin) had passed; a new prefill ran", registry=r,
        )  # fmt: skip
        self.ejections = Counter(
            "servekit_proxy_outlier_ejections", "Instances ejected for failing requests in a row",
            ["role"], registry=r,
        )  # fmt: skip
        self.drains = Counter(
            "servekit_proxy_drains", "Instances asked to leave, by role and why (admin-drain, "
            "admin-remove, leave: the engine's own call, discovery-deleted, discovery-gone, "
            "discovery-unready)", ["role", "reason"], registry=r,
        )  # fmt: skip
        self.drain_seconds = Histogram(
            "servekit_proxy_drain_seconds", "From an instance's drain start to its last request "
            "and held KV done", ["role"], buckets=LATENCY_BUCKETS, registry=r,
        )  # fmt: skip
        self.drain_migrated = Counter(
            "servekit_proxy_drain_migrated_streams", "Streams still running on a leaving "
            "instance at --drain-grace's end, cut there and carried on by another engine",
            ["role"], registry=r,
        )  # fmt: skip
        self.pool_waits = Counter(
            "servekit_proxy_pool_waits", "Requests that found no engine of a stage routable and "
            "waited for one (--pool-wait), by stage and outcome (found: one joined or came back; "
            "timeout: none did in time, 503 no_healthy_instance; tried: only engines that failed "
            "the request stayed routable, alive, so it ended sooner)", ["stage", "outcome"],
            registry=r,
        )  # fmt: skip
        self.pool_wait_seconds = Histogram(
            "servekit_proxy_pool_wait_seconds", "How long a request waited for a stage's empty "
            "pool (--pool-wait)", ["stage"], buckets=LATENCY_BUCKETS, registry=r,
        )  # fmt: skip
        self.latency = Histogram(
            "servekit_proxy_request_seconds", "Client request duration through the proxy",
            ["route"], buckets=LATENCY_BUCKETS, registry=r,
        )  # fmt: skip
        self.ttft = Histogram(
            "servekit_proxy_first_byte_seconds", "Request arrival to first byte sent to the client",
            ["route"], buckets=LATENCY_BUCKETS, registry=r,
        )  # fmt: skip
        self.stage = Histogram(
            "servekit_proxy_stage_seconds", "Backend stage duration (prefill: whole; decode: "
            "to first byte)", ["stage"], buckets=LATENCY_BUCKETS, registry=r,
        )  # fmt: skip
        r.register(_PoolCollector(instances))

    def watch_connections(self, source: ConnectionSource) -> None:
        """Report ``source``'s connection counts (once per proxy)."""
        self.registry.register(_ConnectionCollector(source))

    def watch_budget(self, used: Callable[[], float], refused: Callable[[], float]) -> None:
        """Report the memory budget's use and refusals (once per proxy)."""
        Gauge(
            "servekit_proxy_memory_budget_used_bytes", "Bytes of bodies held (--memory-budget)",
            registry=self.registry,
        ).set_function(used)  # fmt: skip
        Gauge(
            "servekit_proxy_memory_budget_refused", "Requests refused at the --memory-budget",
            registry=self.registry,
        ).set_function(refused)  # fmt: skip

    def render(self) -> bytes:
        return generate_latest(self.registry)
