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
  ScaledObject or HPA: every polling interval it reads the proxy's
  ``servekit_desired_replicas{role}`` from ``/metrics`` (the query's ``max``),
  applies the object's ``behavior`` (stabilization windows, the Percent policy up,
  the Pods policy down, per period), bounds it by min and max, and scales the
  LeaderWorkerSet; every change is recorded with its time.

Not emulated: kube-proxy and Service virtual IPs, the HPA's tolerance (10%) and its
metric averaging across pods (one proxy pod here), KEDA's own activation threshold,
surge pods of a rolling update (``maxSurge``: LWS creates them at indexes beyond
``replicas``, which this scaling runs the same way), and scheduling.
"""

from __future__ import annotations

import math
import threading
import time
import urllib.request
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

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


@dataclass(frozen=True)
class ScaleTarget:
    """One rendered ScaledObject or HPA: what it scales, its role, bounds and behavior."""

    lws: str
    role: str
    min_replicas: int
    max_replicas: int
    period_s: float
    behavior: dict[str, Any]


def scale_targets(objects: list[dict[str, Any]]) -> list[ScaleTarget]:
    """The rendered autoscalers as the HPA controller reads them."""
    out = []
    for o in objects:
        spec = o.get("spec", {})
        if o["kind"] == "ScaledObject":
            query = spec["triggers"][0]["metadata"]["query"]
            role = query.split('role="', 1)[1].split('"', 1)[0]
            out.append(ScaleTarget(
                spec["scaleTargetRef"]["name"], role, spec["minReplicaCount"],
                spec["maxReplicaCount"], float(spec.get("pollingInterval", 30)),
                spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]))  # fmt: skip
        elif o["kind"] == "HorizontalPodAutoscaler":
            metric = spec["metrics"][0]["external"]["metric"]
            out.append(ScaleTarget(
                spec["scaleTargetRef"]["name"], metric["selector"]["matchLabels"]["role"],
                spec["minReplicas"], spec["maxReplicas"], 15.0, spec["behavior"]))  # fmt: skip
    return out


def desired_from_metrics(text: str) -> dict[str, float]:
    """``max(servekit_desired_replicas)`` per role from a ``/metrics`` page."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        if family.name != "servekit_desired_replicas":
            continue
        for sample in family.samples:
            role = sample.labels.get("role", "")
            out[role] = max(out.get(role, 0.0), sample.value)
    return out


@dataclass
class Autoscaler:
    """The HPA controller over each rendered target, reading the proxy's metrics."""

    elastic: Elastic
    targets: list[ScaleTarget]
    metrics_url: str
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

    def _read(self) -> dict[str, float] | None:
        try:
            with urllib.request.urlopen(self.metrics_url, timeout=5) as r:
                return desired_from_metrics(r.read(METRICS_BYTES).decode("utf-8", "replace"))
        except (OSError, ValueError):
            return None

    def _loop(self) -> None:
        period = min(t.period_s for t in self.targets)
        while not self._stop.wait(period):
            desired = self._read()
            if desired is None:
                continue
            for t in self.targets:
                if t.role in desired:
                    self.step(t, desired[t.role], time.monotonic())

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
