"""What LeaderWorkerSet, the kubelet and an autoscaler do to an elastic rendering, here.

The fake cluster (:mod:`.fake`) runs the rendered pods; for ``k8s.elastic=on`` it
also runs, with :class:`Elastic`:

- **the API server** (:mod:`.fakeapi`) the proxy's discovery lists and watches:
  every pod is added with its labels and address when it starts, becomes Ready when
  its template's readiness probe passes (a kubelet thread probes every 0.5 s), gets
  its deletion timestamp first when it goes, and is deleted once its process ended;
- **LeaderWorkerSet's scaling** (:meth:`Elastic.scale`, ``kubectl scale lws/NAME
  --replicas N``): a higher count creates the groups of the new indexes (every pod
  of a group: leader and workers, named and labelled as LWS does, ``LWS_*`` set),
  each running the rendered ``pod.sh`` with its volumes and init containers; a lower
  count removes the highest indexes, as LWS does, each pod terminated the kubelet's
  way: the deletion timestamp, then the template's preStop hook (the rendered
  ``pod.sh GROUP prestop``, which asks the proxy to drain it), at most
  ``terminationGracePeriodSeconds``, then SIGTERM;
- **a pod deleted** (:meth:`Elastic.delete_pod`, ``kubectl delete pod``): the same
  graceful termination, then LWS makes the pod again under its name;
- **an autoscaler** (:class:`Autoscaler`): what KEDA's HPA does with the rendered
  ScaledObject or HPA: every polling interval it scrapes every proxy pod's
  ``/metrics`` (as Prometheus does, each series then carrying its pod's name) and
  reads each trigger's query as PromQL would (:class:`Reading`: ``max(...)`` or
  ``ceil(sum(...))`` of the series whose labels match, the ``pod=~`` pattern
  included), or the HPA's external metric as the HPA does (every matching series
  added up), over the target (``AverageValue``); with several triggers the largest
  count wins, as the HPA takes the largest of its metrics. It applies the object's
  ``behavior`` (stabilization windows, the Percent policy up, the Pods policy down,
  per period), bounds it by min and max, and scales the LeaderWorkerSet; every
  change is recorded with its time.

Not emulated: kube-proxy and Service virtual IPs, the HPA's tolerance (10%),
KEDA's own activation threshold, a metric that cannot be read (it is left out; the
HPA would then scale up only),
surge pods of a rolling update (``maxSurge``: LWS creates them at indexes beyond
``replicas``, which this scaling runs the same way), and scheduling.
"""

from __future__ import annotations

import math
import re
import threading
import time
import urllib.request
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from servekit.platforms.fake import stop_nodes
from servekit.platforms.k8s.fakeapi import FakeApi

FakePod = Any  # servekit.platforms.k8s.fake.FakePod (that module imports this one)

KUBELET_PERIOD_S = 0.5
METRICS_BYTES = 4 << 20


@dataclass
class Elastic:
    """The API server, the kubelet's readiness and LWS's scaling over a running fake cluster."""

    api: FakeApi
    run: Any
    """The fake cluster while it runs (``fake._Running``: its pods, their processes)."""
    make_pod: Callable[[str, int, int], FakePod]
    """(LeaderWorkerSet, group index, worker index) -> the pod LWS would create."""
    sizes: dict[str, int]
    """LeaderWorkerSet -> pods per group."""
    probe_passes: Callable[[FakePod, dict[str, Any], dict[str, str]], bool]
    """Whether a pod's probe passes, as the kubelet runs it (``fake._probe_passes``)."""
    events: list[tuple[float, str, str]] = field(default_factory=list)
    """(time, pod, what): added, ready, terminating, drained (the hook's end), deleted."""
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.RLock = field(default_factory=threading.RLock)
    _leaving: list[threading.Thread] = field(default_factory=list)
    _kubelet: threading.Thread | None = None

    def start(self) -> None:
        for pod in self.run.pods_of["sk"]:
            self._register(pod)
        self._kubelet = threading.Thread(target=self._probe_loop, daemon=True)
        self._kubelet.start()

    def stop(self) -> None:
        self._stop.set()
        for t in list(self._leaving):
            t.join(timeout=60)
        if self._kubelet is not None:
            self._kubelet.join(timeout=10)
        self.api.stop()

    def _note(self, pod: str, what: str) -> None:
        self.events.append((time.monotonic(), pod, what))

    def _register(self, pod: FakePod) -> None:
        self.api.add(pod.name, pod.labels, pod.address)
        self._note(pod.name, "added")

    def _probe_loop(self) -> None:
        while not self._stop.wait(KUBELET_PERIOD_S):
            with self._lock:
                pods = [p for p in self.run.pods_of["sk"] if p.name in self.run.nodes]
            for pod in pods:
                if self.api.is_ready(pod.name) or pod.name not in self.api.pods:
                    continue
                probe = pod.template["spec"]["containers"][0].get("readinessProbe")
                env = self.run.fake.env_of.get(pod.name, {})
                if probe is None or self.probe_passes(pod, probe, env):
                    self.api.ready(pod.name)
                    self._note(pod.name, "ready")

    def replicas(self, lws: str) -> int:
        with self._lock:
            indexes = {p.group_index for p in self.run.pods_of["sk"] if p.workload == lws}
        return len(indexes)

    def ready_groups(self, lws: str) -> int:
        """Groups of ``lws`` whose every pod is Ready (and not leaving)."""
        with self._lock:
            pods = [p for p in self.run.pods_of["sk"] if p.workload == lws]
        by_group: dict[int, list[bool]] = {}
        for p in pods:
            by_group.setdefault(p.group_index, []).append(self.api.is_ready(p.name))
        return sum(1 for ready in by_group.values() if all(ready))

    def scale(self, lws: str, replicas: int) -> None:
        """``kubectl scale lws/LWS --replicas N``: groups made or removed (highest first)."""
        with self._lock:
            current = sorted({p.group_index for p in self.run.pods_of["sk"] if p.workload == lws})
            have = len(current)
            if replicas > have:
                made = [self.make_pod(lws, g, w) for g in range(have, replicas)
                        for w in range(self.sizes[lws])]  # fmt: skip
                self.run.pods_of["sk"].extend(made)
                self._start(made)
            elif replicas < have:
                gone = [p for p in self.run.pods_of["sk"]
                        if p.workload == lws and p.group_index >= replicas]  # fmt: skip
                self.run.pods_of["sk"] = [p for p in self.run.pods_of["sk"] if p not in gone]
                for pod in gone:
                    self._terminate(pod, again=False)

    def delete_pod(self, name: str) -> None:
        """``kubectl delete pod NAME``: terminated gracefully, then made again by LWS."""
        with self._lock:
            pod = next(p for p in self.run.pods_of["sk"] if p.name == name)
        self._terminate(pod, again=True)

    def _start(self, pods: list[FakePod]) -> None:
        started = self.run.fake.start(pods)
        self.run.nodes.update(started)
        for pod in pods:
            self._register(pod)

    def _terminate(self, pod: FakePod, again: bool) -> None:
        node = self.run.nodes.get(pod.name)
        self.api.terminate(pod.name)
        self._note(pod.name, "terminating")

        def finish() -> None:
            self._pre_stop(pod)
            self._note(pod.name, "drained")
            if node is not None:
                stop_nodes([node])
            self.api.delete(pod.name)
            self._note(pod.name, "deleted")
            with self._lock:
                if self.run.nodes.get(pod.name) is node:
                    del self.run.nodes[pod.name]
                if again:
                    fresh = self.make_pod(pod.workload, pod.group_index,
                                          int(pod.labels.get(WORKER_LABEL, "0")))  # fmt: skip
                    fresh.address = pod.address
                    index = next(i for i, p in enumerate(self.run.pods_of["sk"]) if p is pod)
                    self.run.pods_of["sk"][index] = fresh
                    self._start([fresh])

        t = threading.Thread(target=finish, daemon=True)
        self._leaving.append(t)
        t.start()

    def _pre_stop(self, pod: FakePod) -> None:
        """The template's preStop hook in the pod's environment, for at most its grace."""
        import subprocess

        spec = pod.template["spec"]
        container = spec["containers"][0]
        hook = container.get("lifecycle", {}).get("preStop", {}).get("exec")
        env = self.run.fake.env_of.get(pod.name)
        if hook is None or env is None:
            return
        volumes = self.run.fake.volumes_of.get(pod.name, {})
        command = self.run.fake._command({"command": hook["command"]},
                                         self.run.fake._mounts(container, volumes))  # fmt: skip
        grace = float(spec.get("terminationGracePeriodSeconds", 30))
        log = self.run.fake.root / "logs" / f"{pod.name}.prestop.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("ab") as out:
            try:
                subprocess.run(command, env=env, stdout=out, stderr=out, timeout=grace, check=False)
            except subprocess.TimeoutExpired:
                out.write(b"preStop ran past terminationGracePeriodSeconds\n")

    def wait_gone(self, timeout_s: float = 300.0) -> None:
        """Until every pod that was leaving has ended."""
        deadline = time.monotonic() + timeout_s
        for t in list(self._leaving):
            t.join(timeout=max(0.1, deadline - time.monotonic()))


WORKER_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"


Pages = dict[str, list[Sample]]
"""Proxy pod name -> the samples of its ``/metrics`` page (what Prometheus scraped)."""
_QUERY = re.compile(
    r"^(?P<ceil>ceil\()?(?P<agg>max|sum)\((?P<metric>[A-Za-z_:][A-Za-z0-9_:]*)"
    r"\{(?P<selector>[^{}]*)\}\)(?(ceil)\))$"
)
_MATCHER = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)(=~|=)"([^"\\]*)"\s*(?:,|$)')
_SELECTOR = re.compile(r'(?:\s*[A-Za-z_][A-Za-z0-9_]*=~?"[^"\\]*"\s*(?:,|$))*')


@dataclass(frozen=True)
class Reading:
    """One metric an autoscaler reads: the series of ``metric`` whose labels match, from
    the pods whose name matches ``pods``, their largest or their sum, rounded up or
    not, over the target value (``AverageValue``)."""

    metric: str
    labels: tuple[tuple[str, str], ...]
    pods: str
    aggregate: Literal["max", "sum"]
    ceil: bool
    per: float

    def value(self, pages: Pages) -> float | None:
        """The count it asks for (None: no series, as an empty PromQL answer)."""
        values = [
            s.value
            for pod, samples in pages.items()
            if re.fullmatch(self.pods, pod)
            for s in samples
            if s.name == self.metric and all(s.labels.get(k) == v for k, v in self.labels)
        ]
        if not values:
            return None
        total = max(values) if self.aggregate == "max" else math.fsum(values)
        return (math.ceil(total) if self.ceil else total) / self.per


def query_reading(query: str, threshold: str) -> Reading:
    """A KEDA prometheus trigger's query as :class:`Reading` (the forms rendered:
    ``max(M{...})`` and ``ceil(sum(M{...}))``; another is refused, not guessed)."""
    found = _QUERY.match(query)
    if found is None or not _SELECTOR.fullmatch(found["selector"]):
        raise ValueError(f"the fake autoscaler reads max(M{{...}}) or ceil(sum(M{{...}})): {query}")
    labels, pods = [], ".*"
    for key, op, value in _MATCHER.findall(found["selector"]):
        if key == "pod" and op == "=~":
            pods = value
        elif op == "=":
            labels.append((key, value))
        else:
            raise ValueError(f"the fake autoscaler matches pod=~ and label=, not {key}{op}")
    agg: Literal["max", "sum"] = "max" if found["agg"] == "max" else "sum"
    return Reading(found["metric"], tuple(labels), pods, agg, bool(found["ceil"]),
                   float(threshold))  # fmt: skip


@dataclass(frozen=True)
class ScaleTarget:
    """One rendered ScaledObject or HPA: what it scales, its role, bounds and behavior,
    and the metrics it reads (the HPA takes the largest count of them)."""

    lws: str
    role: str
    min_replicas: int
    max_replicas: int
    period_s: float
    behavior: dict[str, Any]
    readings: tuple[Reading, ...] = ()

    def metric(self, pages: Pages) -> float | None:
        """The largest count its readings ask for (None: none has a series)."""
        values = [v for r in self.readings if (v := r.value(pages)) is not None]
        return max(values) if values else None


def scale_targets(objects: list[dict[str, Any]]) -> list[ScaleTarget]:
    """The rendered autoscalers as the HPA controller reads them."""
    out = []
    for o in objects:
        spec = o.get("spec", {})
        if o["kind"] == "ScaledObject":
            readings = tuple(query_reading(tr["metadata"]["query"], tr["metadata"]["threshold"])
                             for tr in spec["triggers"])  # fmt: skip
            role = dict(readings[0].labels)["role"]
            out.append(ScaleTarget(
                spec["scaleTargetRef"]["name"], role, spec["minReplicaCount"],
                spec["maxReplicaCount"], float(spec.get("pollingInterval", 30)),
                spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"],
                readings))  # fmt: skip
        elif o["kind"] == "HorizontalPodAutoscaler":
            externals = [m["external"] for m in spec["metrics"]]
            # External, AverageValue: every series the adapter gives added up, over the target
            readings = tuple(
                Reading(e["metric"]["name"],
                        tuple(sorted(e["metric"]["selector"]["matchLabels"].items())),
                        ".*", "sum", False, float(e["target"]["averageValue"]))
                for e in externals
            )  # fmt: skip
            role = dict(readings[0].labels)["role"]
            out.append(ScaleTarget(
                spec["scaleTargetRef"]["name"], role,
                spec["minReplicas"], spec["maxReplicas"], 15.0, spec["behavior"],
                readings))  # fmt: skip
    return out


def metric_samples(text: str) -> list[Sample]:
    """Every sample of a ``/metrics`` page (a page that does not parse: none)."""
    try:
        return [s for family in text_string_to_metric_families(text) for s in family.samples]
    except ValueError:
        return []


@dataclass
class Autoscaler:
    """The HPA controller over each rendered target, reading the proxy's metrics."""

    elastic: Elastic
    targets: list[ScaleTarget]
    pages: dict[str, str]
    """Each proxy pod's name and its ``/metrics`` URL: what Prometheus scrapes."""
    history: list[tuple[float, str, int, float]] = field(default_factory=list)
    """(time, LeaderWorkerSet, replicas set, the metric read)."""
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _recommendations: dict[str, deque[tuple[float, int]]] = field(default_factory=dict)
    _changes: dict[str, deque[tuple[float, int]]] = field(default_factory=dict)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def scrape(self) -> Pages:
        """Every proxy pod's samples (a pod that does not answer is left out, as a
        failed scrape leaves Prometheus without its fresh series)."""
        out: Pages = {}
        for pod, url in self.pages.items():
            try:
                with urllib.request.urlopen(url, timeout=5) as r:
                    out[pod] = metric_samples(r.read(METRICS_BYTES).decode("utf-8", "replace"))
            except (OSError, ValueError):
                continue
        return out

    def _loop(self) -> None:
        period = min(t.period_s for t in self.targets)
        while not self._stop.wait(period):
            pages = self.scrape()
            for t in self.targets:
                metric = t.metric(pages)
                if metric is not None:
                    self.step(t, metric, time.monotonic())

    def step(self, t: ScaleTarget, metric: float, now: float) -> int:
        """One reconciliation: the HPA's recommendation (AverageValue 1 per replica:
        ceil(metric)), stabilized and rate-limited by ``behavior``; scales when it moves."""
        current = self.elastic.replicas(t.lws)
        wanted = max(t.min_replicas, min(t.max_replicas, math.ceil(metric - 1e-9)))
        recs = self._recommendations.setdefault(t.lws, deque())
        recs.append((now, wanted))
        up, down = t.behavior["scaleUp"], t.behavior["scaleDown"]
        horizon = max(up["stabilizationWindowSeconds"], down["stabilizationWindowSeconds"])
        while recs and recs[0][0] < now - horizon:
            recs.popleft()
        if wanted > current:  # up: the lowest recommendation of the up window
            target = min(r for at, r in recs if at >= now - up["stabilizationWindowSeconds"])
            target = max(current, min(target, self._up_limit(t, current, now)))
        elif wanted < current:  # down: the highest of the down window
            target = max(r for at, r in recs if at >= now - down["stabilizationWindowSeconds"])
            target = min(current, max(target, self._down_limit(t, current, now)))
        else:
            target = current
        if target != current:
            self._changes.setdefault(t.lws, deque()).append((now, target - current))
            self.elastic.scale(t.lws, target)
            self.history.append((now, t.lws, target, metric))
        return target

    def _moved(self, t: ScaleTarget, now: float, period: float, sign: int) -> int:
        return sum(abs(d) for at, d in self._changes.get(t.lws, ())
                   if at >= now - period and d * sign > 0)  # fmt: skip

    def _up_limit(self, t: ScaleTarget, current: int, now: float) -> int:
        policy = t.behavior["scaleUp"]["policies"][0]
        moved = self._moved(t, now, policy["periodSeconds"], +1)
        start = current - moved
        value = int(policy["value"])
        allowed = math.ceil(start * value / 100) if policy["type"] == "Percent" else value
        return start + max(allowed, 1 if policy["type"] == "Percent" else 0)

    def _down_limit(self, t: ScaleTarget, current: int, now: float) -> int:
        policy = t.behavior["scaleDown"]["policies"][0]
        moved = self._moved(t, now, policy["periodSeconds"], -1)
        return current + moved - int(policy["value"])
