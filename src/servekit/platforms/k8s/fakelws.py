"""What LeaderWorkerSet, the kubelet and an autoscaler do to an elastic rendering, here.

The fake cluster (:mod:`.fake`) runs the rendered pods; for ``k8s.elastic=on`` it
also runs, with :class:`Elastic`:

- **the API server** (:mod:`.fakeapi`) the proxy's discovery lists and watches:
  every pod is added with its labels (the LWS ones, its template's revision hash
  included) and address when it is created, becomes Ready when its template's
  readiness probe passes (a kubelet thread probes every 0.5 s), gets its deletion
  timestamp first when it goes, and is deleted once its process ended;
- **the kubelet** starting a created pod in the background (volumes, init
  containers, container) and terminating one gracefully: the deletion timestamp,
  the template's preStop hook (the rendered ``pod.sh GROUP prestop``, which asks the
  proxy to drain it; recorded ``preStop exit 0`` when every proxy answered so) for at
  most ``terminationGracePeriodSeconds``, then SIGTERM, then the pod is gone;
- **the LeaderWorkerSet and StatefulSet controllers** (:meth:`Elastic._reconcile`,
  the rules in :mod:`.fakerollout`, read from LWS's and Kubernetes' code): on every
  pod change (and every 0.5 s) each LWS's leader StatefulSet gets its ``replicas``
  and ``partition``, and the StatefulSet creates the missing groups (every pod of a
  group: leader and workers, named and labelled as LWS does, ``LWS_*`` set, running
  the rendered ``pod.sh``), deletes those beyond its replicas and replaces old ones
  within its budget. So:

  - ``kubectl scale lws/NAME --replicas N`` (:meth:`Elastic.scale`): the new indexes'
    groups, or the highest indexes removed;
  - ``kubectl apply`` of changed manifests (:meth:`Elastic.apply`, through
    ``K8sDryCluster.apply``): a changed ``leaderWorkerTemplate`` is a new revision,
    rolled as its ``rolloutStrategy`` says. With the elastic rendering's ``maxSurge: 1,
    maxUnavailable: 0`` the surge group is made at index ``replicas`` from the new
    template, then, each time the groups above are ready and new, the highest old
    group is terminated (drained by its hook) and made again from the new template;
    the surge group is removed once the last replacement is ready. A ``replicas`` the
    manifest kept as last applied leaves a scaled count alone, as kubectl's three-way
    merge does;
  - ``kubectl delete pod`` (:meth:`Elastic.delete_pod`): the graceful termination,
    then its StatefulSet makes the pod again under its name (the revision its index
    is given);
- **an autoscaler** (:class:`Autoscaler`): what KEDA's HPA does with the rendered
  ScaledObject or HPA: every polling interval it scrapes every proxy pod's
  ``/metrics`` (as Prometheus does, each series then carrying its pod's name) and
  reads each trigger's query as PromQL would (:class:`Reading`: ``max(...)`` or
  ``ceil(sum(...))`` of the series whose labels match, the ``pod=~`` pattern
  included), or the HPA's external metric as the HPA does (every matching series
  added up), over the target (``AverageValue``); with several triggers the largest
  count wins, as the HPA takes the largest of its metrics. It applies the object's
  ``behavior`` (stabilization windows, the Percent policy up, the Pods policy down,
  per period), bounds it by min and max, and scales the LeaderWorkerSet (its
  ``spec.replicas``, what the scale subresource reads); every change is recorded with
  its time.

Every change is in :attr:`Elastic.events` in the API's order (:func:`serving_groups`
reads from it how many groups could serve at each moment).

Not emulated: kube-proxy and Service virtual IPs, the HPA's tolerance (10%),
KEDA's own activation threshold, a metric that cannot be read (it is left out; the
HPA would then scale up only), the API round trips between the controllers (they act
within the same instant the kubelet reports a pod Ready: no slower, often faster, than
a cluster), the garbage collector's order for a group of several pods (a real
leader's workers, owned through its worker StatefulSet, are deleted once the leader is
gone; here the group's pods leave together), ``RecreateGroupOnPodRestart`` (a deleted
worker pod is made again alone), the kubelet refreshing a running pod's ConfigMap
volumes after an apply (old pods keep the files they started with),
``minReadySeconds``, and scheduling (a surge group always finds room; on a full
cluster it stays Pending and the rollout waits).
"""

from __future__ import annotations

import copy
import math
import re
import threading
import time
import urllib.request
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from servekit.platforms.fake import stop_nodes
from servekit.platforms.k8s.fakeapi import FakeApi
from servekit.platforms.k8s.fakerollout import (
    REVISION_LABEL,
    GroupState,
    LeaderSet,
    PodState,
    Strategy,
    revision,
    rolling_update,
    statefulset_step,
)

FakePod = Any  # servekit.platforms.k8s.fake.FakePod (that module imports this one)

KUBELET_PERIOD_S = 0.5
CONTROLLER_PERIOD_S = 0.5
"""The controllers' resync when no pod changed (a readiness or a deletion wakes them at once)."""
METRICS_BYTES = 4 << 20


@dataclass
class _Lws:
    """One LeaderWorkerSet: its live spec, the leaders' StatefulSet LWS writes, its revisions."""

    spec: dict[str, Any]
    """The live object's spec (what ``kubectl apply`` and ``kubectl scale`` left)."""
    applied: dict[str, Any]
    """The last applied manifest's spec (kubectl's ``last-applied-configuration``)."""
    sts: LeaderSet
    current: str
    """The StatefulSet's current revision (every group's, once a rollout is done)."""
    update: str
    """The revision of the latest template."""
    templates: dict[str, dict[str, Any]]
    """revision -> the spec whose template makes its pods"""
    replaced: list[str] = field(default_factory=list)
    """Pods of an older revision the rolling update deleted, in order."""

    @property
    def replicas(self) -> int:
        return int(self.spec.get("replicas", 1))

    @property
    def size(self) -> int:
        return int(self.spec["leaderWorkerTemplate"].get("size", 1))


@dataclass
class Elastic:
    """The API server, the kubelet, and the LWS and StatefulSet controllers over a
    running fake cluster."""

    api: FakeApi
    run: Any
    """The fake cluster while it runs (``fake._Running``: its pods, their processes)."""
    make_pod: Callable[[str, dict[str, Any], int, int], FakePod]
    """(LeaderWorkerSet, its spec, group index, worker index) -> the pod LWS would create."""
    specs: dict[str, dict[str, Any]]
    """LeaderWorkerSet -> its spec as first applied."""
    probe_passes: Callable[[FakePod, dict[str, Any], dict[str, str]], bool]
    """Whether a pod's probe passes, as the kubelet runs it (``fake._probe_passes``)."""
    release: Callable[[str], None] = lambda address: None
    """Give a deleted pod's address back (the network reuses it, oldest first)."""
    events: list[tuple[float, str, str]] = field(default_factory=list)
    """(time, pod, what): added, ready, terminating, the preStop hook's outcome (``preStop
    exit 0``: every proxy answered it drained the pod; ``preStop exit N``, ``preStop past
    its grace``, ``no preStop``), drained (the hook's end, however it ended), sigterm,
    deleted; failed (its start)."""
    sets: dict[str, _Lws] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _wake: threading.Event = field(default_factory=threading.Event)
    _lock: threading.RLock = field(default_factory=threading.RLock)
    _record: threading.Lock = field(default_factory=threading.Lock)
    _leaving: dict[str, FakePod] = field(default_factory=dict)
    _starting: dict[str, threading.Thread] = field(default_factory=dict)
    _threads: list[threading.Thread] = field(default_factory=list)
    _kubelet: threading.Thread | None = None
    _controller: threading.Thread | None = None

    def __post_init__(self) -> None:
        for name, spec in self.specs.items():
            rev = revision(spec)
            replicas = int(spec.get("replicas", 1))
            self.sets[name] = _Lws(
                copy.deepcopy(spec), copy.deepcopy(spec), LeaderSet(replicas, 0, replicas),
                rev, rev, {rev: copy.deepcopy(spec)},
            )  # fmt: skip

    def start(self) -> None:
        for pod in self.run.pods_of["sk"]:
            self._add(pod)
        self._kubelet = threading.Thread(target=self._probe_loop, daemon=True)
        self._kubelet.start()
        self._controller = threading.Thread(target=self._control_loop, daemon=True)
        self._controller.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        for t in (self._controller, self._kubelet):
            if t is not None:
                t.join(timeout=30)
        for t in list(self._threads):
            t.join(timeout=60)
        self.api.stop()

    # -- the record ---------------------------------------------------------

    def _note(self, pod: str, what: str) -> None:
        with self._record:
            self.events.append((time.monotonic(), pod, what))

    def _record_change(self, pod: str, what: str, change: Callable[[], None]) -> None:
        """An API change and its event together, so the record's order is the API's."""
        with self._record:
            change()
            self.events.append((time.monotonic(), pod, what))

    def _add(self, pod: FakePod) -> None:
        self._record_change(pod.name, "added", partial(self.api.add, pod.name, pod.labels,
                                                       pod.address, pod.uid))  # fmt: skip

    # -- the kubelet ----------------------------------------------------------

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
                    with self._lock:
                        if pod.name in self._leaving:
                            continue
                        self._record_change(pod.name, "ready", partial(self.api.ready, pod.name))
                    self._wake.set()

    def _start(self, pods: list[FakePod]) -> None:
        """The kubelet starts a group's new pods (volumes, init containers, container) in
        the background; the pods exist in the API at once, not Ready."""
        for pod in pods:
            self._add(pod)

        def run() -> None:
            try:
                started = self.run.fake.start(pods)
            except Exception as exc:  # a pod that cannot start stays not Ready, as in a cluster
                for pod in pods:
                    self._note(pod.name, f"failed: {str(exc)[-300:]}")
                return
            with self._lock:
                self.run.nodes.update(started)

        t = threading.Thread(target=run, daemon=True)
        for pod in pods:
            self._starting[pod.name] = t
        self._threads.append(t)
        t.start()

    def _terminate(self, pod: FakePod) -> None:
        """The kubelet's graceful termination: the deletion timestamp, the preStop hook for
        at most ``terminationGracePeriodSeconds``, SIGTERM, then the pod is gone."""
        with self._lock:
            self.run.pods_of["sk"] = [p for p in self.run.pods_of["sk"] if p is not pod]
            self._leaving[pod.name] = pod
            self._record_change(pod.name, "terminating", lambda: self.api.terminate(pod.name))
            starting = self._starting.pop(pod.name, None)

        def finish() -> None:
            if starting is not None:
                starting.join()
            self._note(pod.name, self._pre_stop(pod))
            self._note(pod.name, "drained")  # the hook's end, however it ended
            with self._lock:
                node = self.run.nodes.get(pod.name)
            self._note(pod.name, "sigterm")
            if node is not None:
                stop_nodes([node])
            with self._lock:
                self._record_change(pod.name, "deleted", lambda: self.api.delete(pod.name))
                if self.run.nodes.get(pod.name) is node:
                    self.run.nodes.pop(pod.name, None)
                self._leaving.pop(pod.name, None)
                self.release(pod.address)
            self._wake.set()

        t = threading.Thread(target=finish, daemon=True)
        self._threads.append(t)
        t.start()

    def _pre_stop(self, pod: FakePod) -> str:
        """The template's preStop hook in the pod's environment, for at most its grace:
        ``preStop exit 0`` when every proxy answered that it drained the pod."""
        import subprocess

        spec = pod.template["spec"]
        container = spec["containers"][0]
        hook = container.get("lifecycle", {}).get("preStop", {}).get("exec")
        env = self.run.fake.env_of.get(pod.name)
        if hook is None or env is None:
            return "no preStop"
        volumes = self.run.fake.volumes_of.get(pod.name, {})
        command = self.run.fake._command({"command": hook["command"]},
                                         self.run.fake._mounts(container, volumes))  # fmt: skip
        grace = float(spec.get("terminationGracePeriodSeconds", 30))
        log = self.run.fake.root / "logs" / f"{pod.name}.prestop.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("ab") as out:
            try:
                done = subprocess.run(command, env=env, stdout=out, stderr=out, timeout=grace,
                                      check=False)  # fmt: skip
            except subprocess.TimeoutExpired:
                out.write(b"preStop ran past terminationGracePeriodSeconds\n")
                return "preStop past its grace"
        return f"preStop exit {done.returncode}"

    # -- what an operator does ------------------------------------------------

    def replicas(self, lws: str) -> int:
        """The LeaderWorkerSet's ``spec.replicas`` (what its scale subresource reads)."""
        with self._lock:
            return self.sets[lws].replicas

    def ready_groups(self, lws: str) -> int:
        """Groups of ``lws`` whose every pod is there, Ready and not leaving."""
        with self._lock:
            pods = [p for p in self.run.pods_of["sk"] if p.workload == lws]
            size = self.sets[lws].size
        by_group: dict[int, list[bool]] = {}
        for p in pods:
            by_group.setdefault(p.group_index, []).append(self.api.is_ready(p.name))
        return sum(1 for ready in by_group.values() if len(ready) == size and all(ready))

    def scale(self, lws: str, replicas: int) -> None:
        """``kubectl scale lws/LWS --replicas N``: the controllers make or remove groups
        (the highest indexes first)."""
        with self._lock:
            self.sets[lws].spec["replicas"] = replicas
            self._reconcile(lws)
        self._wake.set()

    def delete_pod(self, name: str) -> None:
        """``kubectl delete pod NAME``: terminated gracefully, then made again under its
        name by its StatefulSet (the leaders' or its group's workers'). A leader takes
        its workers with it (they belong to the worker StatefulSet it owns)."""
        with self._lock:
            pod = next(p for p in self.run.pods_of["sk"] if p.name == name)
            group = self._group(pod.workload, pod.group_index) if _worker(pod) == 0 else [pod]
            for each in group:
                if each.name not in self._leaving:
                    self._terminate(each)

    def apply(self, specs: dict[str, dict[str, Any]]) -> None:
        """``kubectl apply`` of LeaderWorkerSets: each field the manifest changed since the
        last apply is set on the live object (so a ``replicas`` the manifest kept leaves a
        scaled count alone); a changed template starts a rolling update."""
        with self._lock:
            for name, new in specs.items():
                lws = self.sets[name]
                for key in set(new) | set(lws.applied):
                    if new.get(key) == lws.applied.get(key):
                        continue
                    if key in new:
                        lws.spec[key] = copy.deepcopy(new[key])
                    else:
                        lws.spec.pop(key, None)
                lws.applied = copy.deepcopy(new)
                self._reconcile(name)
        self._wake.set()

    def at_rest(self, lws: str) -> bool:
        """The rollout is done: every group below ``replicas`` of the latest revision and
        Ready, no surge left, no pod leaving."""
        with self._lock:
            st = self.sets[lws]
            if st.sts.partition != max(0, Strategy.of(st.spec).partition):
                return False
            if st.sts.replicas != st.replicas or st.current != st.update:
                return False
            if any(p.workload == lws for p in self._leaving.values()):
                return False
            states = self._states(lws)
        return all(s.ready and s.updated for s in states)

    def wait_rolled(self, names: list[str], timeout_s: float = 300.0) -> None:
        """Until each LeaderWorkerSet's rollout is done."""
        deadline = time.monotonic() + timeout_s
        while not all(self.at_rest(n) for n in names):
            if time.monotonic() > deadline:
                with self._lock:
                    where = {n: (self.sets[n].sts, self._states(n)) for n in names}
                raise RuntimeError(f"the rollout did not finish in {timeout_s:.0f} s: {where}")
            time.sleep(0.2)

    def wait_gone(self, timeout_s: float = 300.0) -> None:
        """Until every pod that was leaving has ended."""
        deadline = time.monotonic() + timeout_s
        for t in list(self._threads):
            t.join(timeout=max(0.1, deadline - time.monotonic()))

    # -- the LWS and StatefulSet controllers ----------------------------------

    def _control_loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(CONTROLLER_PERIOD_S)
            self._wake.clear()
            if self._stop.is_set():
                return
            with self._lock:
                for name in self.sets:
                    self._reconcile(name)

    def _group(self, lws: str, index: int) -> list[FakePod]:
        """Every pod of one group that still exists (leaving ones too), leader first."""
        pods = [p for p in (*self.run.pods_of["sk"], *self._leaving.values())
                if p.workload == lws and p.group_index == index]  # fmt: skip
        return sorted(pods, key=_worker)

    def _states(self, lws: str) -> list[GroupState]:
        st = self.sets[lws]
        out = []
        for i in range(st.sts.replicas):
            pods = self._group(lws, i)
            whole = len(pods) == st.size and _worker(pods[0]) == 0 if pods else False
            out.append(GroupState(
                whole and all(self.api.is_ready(p.name) for p in pods),
                whole and all(p.labels.get(REVISION_LABEL) == st.update for p in pods),
            ))  # fmt: skip
        return out

    def _reconcile(self, name: str) -> None:
        """One pass of the LWS controller, then of its StatefulSets' (under the lock)."""
        st = self.sets[name]
        rev = revision(st.spec)
        changed = rev != st.update
        if changed:
            st.update = rev
            st.templates[rev] = copy.deepcopy(st.spec)
        strategy = Strategy.of(st.spec)
        partition, replicas = rolling_update(
            st.replicas, strategy, st.sts, self._states(name), changed
        )
        st.sts = LeaderSet(replicas, partition, st.replicas)
        leaders = {
            i: PodState(pods[0].labels.get(REVISION_LABEL, ""), self.api.is_ready(pods[0].name),
                        pods[0].name in self._leaving)
            for i in range(max([replicas, *self._indexes(name)]) + 1)
            if (pods := self._group(name, i)) and _worker(pods[0]) == 0
        }  # fmt: skip
        create, delete = statefulset_step(
            leaders, replicas=replicas, partition=partition, current=st.current,
            update=st.update, max_unavailable=strategy.statefulset_max_unavailable(st.replicas),
        )  # fmt: skip
        for index in delete:
            for pod in self._group(name, index):
                if pod.name in self._leaving:
                    continue
                if pod.labels.get(REVISION_LABEL) != st.update and index < replicas:
                    st.replaced.append(pod.name)
                self._terminate(pod)
        for index, rev_of in sorted(create.items()):  # workers still leaving come later
            have = {_worker(p) for p in self._group(name, index)}
            missing = [w for w in range(st.size) if w not in have]
            self._make_group(name, st.templates[rev_of], index, missing)
        for index in range(replicas):  # each group's workers' StatefulSet
            pods = self._group(name, index)
            if not pods or _worker(pods[0]) != 0 or pods[0].name in self._leaving:
                continue
            have = {_worker(p) for p in pods}
            missing = [w for w in range(st.size) if w not in have]
            if missing:
                leader_rev = pods[0].labels.get(REVISION_LABEL, st.update)
                self._make_group(name, st.templates.get(leader_rev, st.spec), index, missing)
        below = [self._group(name, i) for i in range(replicas)]
        if all(g and all(p.labels.get(REVISION_LABEL) == st.update for p in g) for g in below):
            st.current = st.update  # the StatefulSet's rolling update is complete

    def _indexes(self, lws: str) -> set[int]:
        return {p.group_index for p in (*self.run.pods_of["sk"], *self._leaving.values())
                if p.workload == lws}  # fmt: skip

    def _make_group(
        self, lws: str, spec: dict[str, Any], index: int, workers: Iterable[int]
    ) -> None:
        made = [self.make_pod(lws, spec, index, w) for w in workers]
        self.run.pods_of["sk"].extend(made)
        self._start(made)


def _worker(pod: FakePod) -> int:
    return int(pod.labels.get(WORKER_LABEL, "0"))


def serving_groups(
    events: list[tuple[float, str, str]], lws: str, size: int
) -> list[tuple[float, int]]:
    """From the record: after each event, how many groups of ``lws`` had every pod Ready
    and none leaving (what the proxy may route to)."""
    ready: dict[str, bool] = {}
    out = []
    for at, pod, what in events:
        if not pod.startswith(lws + "-"):
            continue
        parts = pod[len(lws) + 1 :].split("-")
        if not all(part.isdigit() for part in parts) or len(parts) > 2:
            continue
        if what == "added":
            ready[pod] = False
        elif what == "ready":
            ready[pod] = True
        elif what in ("terminating", "deleted"):
            ready.pop(pod, None)
        else:
            continue
        groups: dict[str, list[bool]] = {}
        for name, ok in ready.items():
            groups.setdefault(name[len(lws) + 1 :].split("-")[0], []).append(ok)
        out.append((at, sum(1 for oks in groups.values() if len(oks) == size and all(oks))))
    return out


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
