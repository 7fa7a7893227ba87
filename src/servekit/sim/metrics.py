"""/metrics with vLLM's metric names, one CollectorRegistry per endpoint.

The engine updates plain numbers in :class:`EngineStats` (single-threaded, no
locks, cheap on the hot path) and :class:`StatsCollector` turns them into
prometheus_client metric families at scrape time. Histograms take a count per
observation because one engine step gives the same inter-token latency to every
sequence in the batch. Latencies are the model's virtual seconds (equal to wall
seconds at ``time_scale`` 1).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from servekit.vocabulary import (
    CACHE_CONFIG_INFO,
    E2E_REQUEST_LATENCY_SECONDS,
    EXTERNAL_PREFIX_CACHE_HITS,
    EXTERNAL_PREFIX_CACHE_QUERIES,
    GENERATION_TOKENS,
    INTER_TOKEN_LATENCY_SECONDS,
    KV_CACHE_USAGE_PERC,
    NUM_GPU_BLOCKS,
    NUM_PREEMPTIONS,
    NUM_REQUESTS_RUNNING,
    NUM_REQUESTS_WAITING,
    PREFIX_CACHE_HITS,
    PREFIX_CACHE_QUERIES,
    PROMPT_TOKENS,
    REQUEST_DECODE_TIME_SECONDS,
    REQUEST_PREFILL_TIME_SECONDS,
    REQUEST_QUEUE_TIME_SECONDS,
    REQUEST_SUCCESS,
    SPEC_DECODE_NUM_ACCEPTED_TOKENS,
    SPEC_DECODE_NUM_DRAFT_TOKENS,
    SPEC_DECODE_NUM_DRAFTS,
    TIME_PER_OUTPUT_TOKEN_SECONDS,
    TIME_TO_FIRST_TOKEN_SECONDS,
)

SIM_INFO = "servekit_sim_info"
SIM_VERSION = "servekit-sim"
"""What the simulator answers as its version (``GET /version``, ``servekit_sim_info``)."""

TTFT_BUCKETS: tuple[float, ...] = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
)
TTFT_BUCKETS += (2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS: tuple[float, ...] = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
)
ITL_BUCKETS += (2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
E2E_BUCKETS: tuple[float, ...] = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
)
E2E_BUCKETS += (60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)


@dataclass(slots=True)
class Hist:
    """Bucket counts and sum of one histogram."""

    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0

    def __post_init__(self) -> None:
        self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, value: float, n: int = 1) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += n
        self.total += value * n

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self) -> list[tuple[str, float]]:
        out: list[tuple[str, float]] = []
        running = 0
        for bound, c in zip((*self.bounds, float("inf")), self.counts, strict=True):
            running += c
            out.append(("+Inf" if bound == float("inf") else repr(bound), float(running)))
        return out


@dataclass(slots=True)
class EngineStats:
    """Counters and histograms of one engine, updated by the scheduler."""

    prompt_tokens: int = 0
    generation_tokens: int = 0
    prefix_queries: int = 0
    prefix_hits: int = 0
    external_queries: int = 0
    external_hits: int = 0
    drafts: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0
    preemptions: int = 0
    finished: dict[str, int] = field(default_factory=dict)
    ttft: Hist = field(default_factory=lambda: Hist(TTFT_BUCKETS))
    itl: Hist = field(default_factory=lambda: Hist(ITL_BUCKETS))
    e2e: Hist = field(default_factory=lambda: Hist(E2E_BUCKETS))
    queue: Hist = field(default_factory=lambda: Hist(E2E_BUCKETS))
    prefill: Hist = field(default_factory=lambda: Hist(E2E_BUCKETS))
    decode: Hist = field(default_factory=lambda: Hist(E2E_BUCKETS))


@dataclass(frozen=True, slots=True)
class Gauges:
    """Live values read at scrape time."""

    running: Callable[[], int]
    waiting: Callable[[], int]
    kv_usage: Callable[[], float]


class StatsCollector(Collector):
    """Exposes one engine's stats under vLLM's names and labels."""

    def __init__(
        self, stats: EngineStats, gauges: Gauges, labels: dict[str, str], cache: dict[str, str]
    ) -> None:
        self.stats = stats
        self._gauges = gauges
        self._labels = labels
        self._cache = cache

    def collect(self) -> Iterator[Metric]:
        s, g = self.stats, self._gauges
        yield self._gauge(NUM_REQUESTS_RUNNING, "Running sequences.", g.running())
        yield self._gauge(NUM_REQUESTS_WAITING, "Waiting sequences.", g.waiting())
        yield self._gauge(KV_CACHE_USAGE_PERC, "KV cache usage (1 = 100%).", g.kv_usage())
        yield from self._counters(s)
        yield self._hist(TIME_TO_FIRST_TOKEN_SECONDS, "Time to first token.", s.ttft)
        yield self._hist(INTER_TOKEN_LATENCY_SECONDS, "Inter-token latency.", s.itl)
        yield self._hist(TIME_PER_OUTPUT_TOKEN_SECONDS, "Deprecated ITL alias.", s.itl)
        yield self._hist(E2E_REQUEST_LATENCY_SECONDS, "End-to-end latency.", s.e2e)
        yield self._hist(REQUEST_QUEUE_TIME_SECONDS, "Time waiting.", s.queue)
        yield self._hist(REQUEST_PREFILL_TIME_SECONDS, "Admission to first token.", s.prefill)
        yield self._hist(REQUEST_DECODE_TIME_SECONDS, "First to last token.", s.decode)
        info = GaugeMetricFamily(
            CACHE_CONFIG_INFO,
            "KV cache configuration.",
            labels=[*self._labels, *self._cache],
        )
        info.add_metric([*self._labels.values(), *self._cache.values()], 1.0)
        yield info
        yield self._gauge(NUM_GPU_BLOCKS, "KV blocks.", float(self._cache["num_gpu_blocks"]))
        yield self._identity()

    def _identity(self) -> Metric:
        """``servekit_sim_info``: the simulator says what it is, also through a proxy's relay.

        Its metric names are vLLM's on purpose, so without this family a page
        relayed by the proxy could not tell a simulated engine from a real one.
        """
        m = GaugeMetricFamily(SIM_INFO, "This engine is servekit's simulator.", labels=["version"])
        m.add_metric([SIM_VERSION], 1.0)
        return m

    def _counters(self, s: EngineStats) -> Iterator[Metric]:
        pairs = (
            (PROMPT_TOKENS, "Prefill tokens processed.", s.prompt_tokens),
            (GENERATION_TOKENS, "Generation tokens processed.", s.generation_tokens),
            (PREFIX_CACHE_QUERIES, "Prefix cache queries (tokens).", s.prefix_queries),
            (PREFIX_CACHE_HITS, "Prefix cache hits (tokens).", s.prefix_hits),
            (EXTERNAL_PREFIX_CACHE_QUERIES, "KV connector queries.", s.external_queries),
            (EXTERNAL_PREFIX_CACHE_HITS, "KV connector hits.", s.external_hits),
            (SPEC_DECODE_NUM_DRAFTS, "Speculative drafts.", s.drafts),
            (SPEC_DECODE_NUM_DRAFT_TOKENS, "Draft tokens.", s.draft_tokens),
            (SPEC_DECODE_NUM_ACCEPTED_TOKENS, "Accepted tokens.", s.accepted_tokens),
            (NUM_PREEMPTIONS, "Preemptions.", s.preemptions),
        )
        for name, doc, value in pairs:
            c = CounterMetricFamily(name, doc, labels=list(self._labels))
            c.add_metric(list(self._labels.values()), float(value))
            yield c
        done = CounterMetricFamily(
            REQUEST_SUCCESS,
            "Finished requests.",
            labels=[*self._labels, "finished_reason"],
        )
        for reason, n in sorted(s.finished.items()):
            done.add_metric([*self._labels.values(), reason], float(n))
        yield done

    def _gauge(self, name: str, doc: str, value: float) -> Metric:
        m = GaugeMetricFamily(name, doc, labels=list(self._labels))
        m.add_metric(list(self._labels.values()), float(value))
        return m

    def _hist(self, name: str, doc: str, h: Hist) -> Metric:
        m = HistogramMetricFamily(name, doc, labels=list(self._labels))
        m.add_metric(list(self._labels.values()), h.cumulative(), h.total)
        return m


def make_registry(collector: StatsCollector) -> CollectorRegistry:
    """A registry of its own per endpoint: no global state shared between endpoints."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry


def render(registry: CollectorRegistry) -> bytes:
    """The text exposition format."""
    return generate_latest(registry)
