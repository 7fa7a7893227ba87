"""Prometheus text from ``/metrics`` as a small typed snapshot.

vLLM labels every series by model and engine; benchmarks and checks want the
deployment total, so each family is summed over its label sets. Counter names
are stored without the ``_total`` suffix (as the Prometheus parser names the
family) and looked up with or without it; ``*_created`` series are dropped.
Untyped series are read as counters when named ``*_total``, else as gauges.
"""

from __future__ import annotations

import time

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample
from pydantic import Field

from servekit.vocabulary import StrictModel


class HistogramSummary(StrictModel):
    """A histogram summed over label sets: sum, count and cumulative buckets."""

    sum: float = 0.0
    count: float = 0.0
    buckets: tuple[tuple[float, float], ...] = Field(
        default=(), description="(upper bound, cumulative count), +Inf last"
    )


class MetricsSnapshot(StrictModel):
    """One scrape of ``/metrics`` at ``t_ns`` (perf_counter_ns)."""

    t_ns: int
    counters: dict[str, float] = Field(default_factory=dict)
    gauges: dict[str, float] = Field(default_factory=dict)
    histograms: dict[str, HistogramSummary] = Field(default_factory=dict)
    info: dict[str, tuple[dict[str, str], ...]] = Field(
        default_factory=dict, description="label sets of '*_info' gauges (e.g. cache config)"
    )

    def counter(self, name: str) -> float | None:
        """A counter's value, by name with or without ``_total``; None if absent."""
        return self.counters.get(name.removesuffix("_total"))

    def gauge(self, name: str) -> float | None:
        """A gauge's value; None if absent."""
        return self.gauges.get(name)

    def histogram(self, name: str) -> HistogramSummary | None:
        """A histogram by family name (vLLM keeps ``_total`` in some of them)."""
        return self.histograms.get(name) or self.histograms.get(name + "_total")

    def has(self, name: str) -> bool:
        """Whether any metric of that name was exposed."""
        return (
            self.counter(name) is not None
            or name in self.gauges
            or self.histogram(name) is not None
        )


def parse_metrics(text: str, t_ns: int | None = None) -> MetricsSnapshot:
    """Parse Prometheus exposition text; raises ValueError on malformed input."""
    counters: dict[str, float] = {}
    gauges: dict[str, float] = {}
    hist: dict[str, dict[str, float]] = {}
    bounds: dict[str, dict[float, float]] = {}
    info: dict[str, tuple[dict[str, str], ...]] = {}
    for family in text_string_to_metric_families(text):
        if family.name.endswith("_created"):
            continue
        if family.type == "counter":
            counters[family.name] = _sum_samples(family.samples, family.name + "_total")
        elif family.type in ("gauge", "info") and family.name.endswith("_info"):
            info[family.name] = tuple(dict(s.labels) for s in family.samples)
        elif family.type == "gauge":
            gauges[family.name] = _sum_samples(family.samples, family.name)
        elif family.type == "histogram":
            _add_histogram(family.name, family.samples, hist, bounds)
        elif family.type == "unknown" and family.name.endswith("_total"):
            counters[family.name.removesuffix("_total")] = _sum_samples(family.samples, family.name)
        elif family.type == "unknown":
            gauges[family.name] = _sum_samples(family.samples, family.name)
    histograms = {
        name: HistogramSummary(
            sum=parts.get("sum", 0.0),
            count=parts.get("count", 0.0),
            buckets=tuple(sorted(bounds.get(name, {}).items())),
        )
        for name, parts in hist.items()
    }
    return MetricsSnapshot(
        t_ns=time.perf_counter_ns() if t_ns is None else t_ns,
        counters=counters,
        gauges=gauges,
        histograms=histograms,
        info=info,
    )


def _sum_samples(samples: list[Sample], name: str) -> float:
    names = (name, name.removesuffix("_total"))
    return float(sum(s.value for s in samples if s.name in names))


def _add_histogram(
    name: str,
    samples: list[Sample],
    hist: dict[str, dict[str, float]],
    bounds: dict[str, dict[float, float]],
) -> None:
    parts = hist.setdefault(name, {})
    les = bounds.setdefault(name, {})
    for s in samples:
        sname, value = s.name, float(s.value)
        if sname == name + "_sum":
            parts["sum"] = parts.get("sum", 0.0) + value
        elif sname == name + "_count":
            parts["count"] = parts.get("count", 0.0) + value
        elif sname == name + "_bucket":
            le = float(s.labels["le"])
            les[le] = les.get(le, 0.0) + value


def merge_snapshots(snaps: list[MetricsSnapshot]) -> MetricsSnapshot:
    """One snapshot summing several servers' (the engines of one deployment)."""
    counters: dict[str, float] = {}
    gauges: dict[str, float] = {}
    hist: dict[str, tuple[float, float]] = {}
    info: dict[str, tuple[dict[str, str], ...]] = {}
    for snap in snaps:
        for name, value in snap.counters.items():
            counters[name] = counters.get(name, 0.0) + value
        for name, value in snap.gauges.items():
            gauges[name] = gauges.get(name, 0.0) + value
        for name, h in snap.histograms.items():
            total, count = hist.get(name, (0.0, 0.0))
            hist[name] = (total + h.sum, count + h.count)
        for name, labels in snap.info.items():
            info[name] = info.get(name, ()) + labels
    return MetricsSnapshot(
        t_ns=max(s.t_ns for s in snaps),
        counters=counters,
        gauges=gauges,
        histograms={n: HistogramSummary(sum=a, count=b) for n, (a, b) in hist.items()},
        info=info,
    )
