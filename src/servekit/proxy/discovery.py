"""Discovery on Kubernetes: each role's engines from its pods, learned while serving.

Per role of the ``--discovery-spec``, one loop lists the pods its selector
matches and then watches them through the API (:mod:`servekit.proxy.kube`);
after a dropped or expired watch it lists again and reconciles, so nothing
missed while it was away stays routed. Every change of a pod recomputes which
endpoints the role should have (:func:`endpoints_of`) and hands the difference
to :class:`~servekit.proxy.membership.Membership`:

- a pod that is Ready, not terminating and has an IP serves the endpoints its
  worker index has in the spec (``http://POD_IP:API_PORT``, its publisher
  ``tcp://POD_IP:PORT``, in bootstrap mode its engine id, by the spec's
  ``engine_id_from``, and the leader's bootstrap server); they join, and take work once the proxy's own probe of each
  answered 200;
- a pod that is terminating (deleted, evicted, scaled down, rolled) or gone:
  its endpoints leave at once (no new requests) and are drained;
- a pod that is no longer Ready: its endpoints are drained but kept (Ready
  again takes them back); so is, where engine ids are per pod incarnation
  (``engine_id_pod_uid``), a pod whose container restarted in place (same pod,
  same uid, a new engine): LeaderWorkerSet's RecreateGroupOnPodRestart makes its
  group again, with new uids.

Why the API and not the LeaderWorkerSet's headless Service in DNS (as Envoy's
STRICT_DNS clusters do): DNS gives addresses only, without the labels that say
which worker index (and so which ports) a pod is, nor its group for a bootstrap
server; LWS publishes not-ready addresses in its headless Service, so DNS cannot
say who is ready; and a terminating pod leaves DNS only when its endpoint goes,
after a re-resolution interval, while the watch tells the proxy the moment the
pod is marked for deletion. The cost is a Role that may get, list and watch pods
in the namespace, which vLLM's router asks for too.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Iterable
from dataclasses import dataclass

from servekit.kvprotocol import DP_SUFFIX
from servekit.proxy.discovery_spec import UID_SEP, DiscoverySpec, Endpoint, RoleSpec
from servekit.proxy.instances import Instance
from servekit.proxy.kube import Expired, KubeApi, KubeError, PodView, in_cluster_api, read_small
from servekit.proxy.membership import Member, Membership, Publisher
from servekit.vocabulary import url_for

log = logging.getLogger("servekit.proxy.discovery")
BACKOFF_S = (0.5, 30.0)  # first retry after a failure, then doubled up to this


@dataclass(frozen=True)
class Wanted:
    """One endpoint a pod of a role should serve, and in which state."""

    member: Member
    ready: bool
    deleting: bool


def endpoints_of(role: RoleSpec, pods: Iterable[PodView]) -> dict[str, Wanted]:
    """URL -> what the role's ``pods`` serve now (by the spec, never by the pod's text)."""
    pods = list(pods)
    leaders = {p.group: p for p in pods if p.worker_index == 0 and not p.deleting}
    out: dict[str, Wanted] = {}
    for pod in pods:
        host = pod.host()
        if host is None:
            continue
        for ep in role.endpoints_of(pod.worker_index):
            bootstrap = _bootstrap(role, ep, pod, leaders.get(pod.group))
            if bootstrap is None and (ep.bootstrap_port or role.bootstrap_port) is not None:
                continue  # its engine's bootstrap server or id is not known yet
            url = url_for(host, ep.api_port)
            publisher = None
            if ep.kv_events_port is not None:
                replay = (
                    url_for(host, ep.kv_replay_port, scheme="tcp") if ep.kv_replay_port else None
                )
                publisher = Publisher(url_for(host, ep.kv_events_port, scheme="tcp"), replay)
            member = Member(role.role, url, publisher, bootstrap, pod.name)
            # an engine restarted in place serves a new side channel under its pod's id (the
            # uid is the pod's): kept out until LWS makes the group again (new pods, new uids)
            stale = role.engine_id_pod_uid and pod.restarted
            out[url] = Wanted(member, pod.ready and not pod.deleting and not stale, pod.deleting)
    return out


def _bootstrap(
    role: RoleSpec, ep: Endpoint, pod: PodView, leader: PodView | None
) -> tuple[str, str] | None:
    """(engine id, bootstrap URL) of the engine ``ep`` of ``pod`` serves (bootstrap mode):
    its own server on its pod, else the role's on the group's leader; None when either
    is not known (yet)."""
    if ep.bootstrap_port is not None:
        server, port = pod, ep.bootstrap_port
    elif role.bootstrap_port is not None and leader is not None:
        server, port = leader, role.bootstrap_port
    else:
        return None
    host = server.host()
    if host is None or leader is None:
        return None
    if role.engine_id_from == "leader_pod":
        engine = f"{role.engine_id_prefix}{leader.name}"
    else:
        index = leader.group_index
        if index is None:
            return None
        rule = role.engine_ids
        own = str(index) if rule is None else rule.engine_id(index)
        if own is None:
            return None
        engine = f"{role.engine_id_prefix}{own}"
    if role.engine_id_pod_uid:
        if server.uid is None:
            return None  # no incarnation to name: not routed rather than a stale id
        engine = f"{engine}{UID_SEP}{server.uid}"
    if ep.dp_rank is not None:  # given for an engine of DP > 1: vLLM's per-rank id
        engine = f"{engine}{DP_SUFFIX}{ep.dp_rank}"
    return engine, url_for(host, port)


class RoleWatch:
    """The pods of one role, kept in step with the API, and the endpoints they make."""

    def __init__(self, role: RoleSpec, members: Membership) -> None:
        self.role = role
        self.members = members
        self.pods: dict[str, PodView] = {}
        self.served: dict[str, Wanted] = {}  # what membership was last told
        self.synced = asyncio.Event()  # the first list was applied

    def replace(self, pods: Iterable[PodView]) -> None:
        """A fresh list: it is the whole truth (pods not in it are gone)."""
        self.pods = {p.name: p for p in pods}
        self.sync()
        self.synced.set()

    def apply(self, kind: str, pod: PodView) -> None:
        if kind == "DELETED":
            self.pods.pop(pod.name, None)
        else:
            self.pods[pod.name] = pod
        self.sync()

    def sync(self) -> None:
        """Tell membership the difference between what is served and what should be."""
        wanted = endpoints_of(self.role, self.pods.values())
        for url, was in list(self.served.items()):
            now = wanted.get(url)
            if now is None or now.member.pod != was.member.pod:  # its pod is gone
                gone = was.member.pod not in self.pods
                self._leave(url, "discovery-gone" if gone else "discovery-deleted")
        for url, want in wanted.items():
            old = self.served.get(url)
            if want.deleting:
                if old is not None:
                    self._leave(url, "discovery-deleted")
                continue
            self.served[url] = want
            if want.ready and (old is None or not old.ready or old.member != want.member):
                self.members.join(want.member, "discovery")
            elif not want.ready and old is not None and old.ready:
                inst = self._ours(url)
                if inst is not None:
                    self.members.drain(inst, "discovery-unready")

    def _ours(self, url: str) -> Instance | None:
        """The instance discovery added at ``url`` (flags' and admin's are left alone)."""
        inst = self.members.find(url, self.role.role)
        return inst if inst is not None and inst.origin == "discovery" else None

    def _leave(self, url: str, reason: str) -> None:
        self.served.pop(url, None)
        inst = self._ours(url)
        if inst is not None:
            self.members.leave(inst, reason)


class Discovery:
    """Every discovered role of one proxy, each followed by its own task."""

    def __init__(self, spec: DiscoverySpec, members: Membership, api: KubeApi, namespace: str):
        self.spec = spec
        self.api = api
        self.namespace = namespace
        self.roles = [RoleWatch(r, members) for r in spec.roles]
        self.tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.tasks = [loop.create_task(self._follow(w)) for w in self.roles]

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await self.api.close()

    async def _follow(self, watch: RoleWatch) -> None:
        """List, then watch, for ever; after a failure back off and list again."""
        selector = watch.role.label_selector()
        delay = BACKOFF_S[0]
        while True:
            try:
                pods, version = await self.api.list_pods(self.namespace, selector)
                watch.replace(pods)
                delay = BACKOFF_S[0]
                while True:  # watches end every few minutes; go on from the last version
                    version = await self._watch(watch, selector, version)
            except Expired:
                log.info("discovery %s: watch expired; listing again", watch.role.role)
                continue
            except KubeError as exc:
                log.warning("discovery %s: %s; listing again in %.1fs", watch.role.role, exc,
                            delay)  # fmt: skip
            await asyncio.sleep(delay * random.uniform(0.8, 1.2))
            delay = min(delay * 2, BACKOFF_S[1])

    async def _watch(self, watch: RoleWatch, selector: str, version: str) -> str:
        """Apply one watch's events; the last resourceVersion seen."""
        async for kind, pod, seen in self.api.watch_pods(self.namespace, selector, version):
            version = seen
            if pod is not None:
                watch.apply(kind, pod)
        return version


def start_discovery(
    spec: DiscoverySpec, members: Membership, api_url: str | None, token_file: str, *,
    ca_file: str, namespace: str | None,
) -> Discovery:  # fmt: skip
    """Discovery of ``spec``'s roles, started (the API and namespace default to the pod's)."""
    base = api_url or in_cluster_api()
    if base is None:
        raise KubeError("no --kube-api, and KUBERNETES_SERVICE_HOST/PORT are not set "
                        "(not in a pod)")  # fmt: skip
    ns = namespace or spec.namespace or read_small(token_file.rsplit("/", 1)[0] + "/namespace",
                                                   253)  # fmt: skip
    if not ns:
        raise KubeError("no namespace: give --kube-namespace or the spec's namespace")
    found = Discovery(spec, members, KubeApi(base, token_file, ca_file), ns)
    found.start()
    return found
