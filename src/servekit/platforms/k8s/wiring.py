"""The Plan's processes as a Kubernetes pod runs them: only addresses change.

Each process keeps its command and environment from the Plan; what a ModelArts
node learns from the rank table, a pod learns from what LWS and the kubelet inject,
and the proxy's command is emitted again from its references (the Plan's
:class:`~servekit.render.ProxyWiring`) with the pods' address map:

- ``NODE<k>_IP`` of an instance's DP master: the pod's own IP on the leader,
  ``LWS_LEADER_ADDRESS`` (resolved to an address) on the workers (``pod.sh``);
  ``NODE_IP`` is the pod's IP (downward API ``status.podIP``);
- the proxy's backends: each engine pod's name through its LeaderWorkerSet's
  headless Service (``<lws>-<i>[-<w>].<lws>``), its listen address the pod IP;
- a layerwise metaserver URL: the proxy's Service;
- a loopback address in a one-machine layout (``127.0.0.1``): the pod's IP (a
  pod's loopback is not reachable from the other pods), and device ids counted
  from 0 within the pod's devices (the device plugin gives each pod its own).

Every change is recorded as a :class:`Change` with its reason, so the render
summary and the tests can say exactly what differs from the ModelArts rendering.
"""

from __future__ import annotations

from dataclasses import dataclass

from servekit.catalog import NodeValue
from servekit.platforms.k8s.groups import Group, Pod, pod_of
from servekit.render import (
    Address,
    AddressUrl,
    Arg,
    HostOf,
    NodeRef,
    Plan,
    ProcessPlan,
    Ref,
    Word,
    proxy_words,
    url,
)

LOOPBACK = ("127.0.0.1", "localhost")
DEVICE_VARS = ("ASCEND_RT_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")
POD_IP = "POD_IP"

REASONS = {
    "backend": "the proxy reaches each engine pod by its name through the LeaderWorkerSet's "
    "headless Service; pod IPs change when a pod is recreated",
    "listen": "the proxy listens on its pod's IP (downward API), which its Service targets",
    "metaserver": "decoders call the layerwise proxy back through its Service",
    "loopback": "a pod's loopback is reachable only from inside the pod; the pod's IP "
    "(downward API) is the address other pods reach",
    "devices": "the device plugin gives each pod its own devices, numbered from 0 in the pod",
    "workers": "k8s.proxy_workers: that many proxy processes share the proxy pod's port "
    "(SO_REUSEPORT), one per core",
    "elastic": "k8s.elastic=on: the proxy discovers each role's engine pods through the API "
    "(any number of instances) and drains one that leaves, instead of a fixed list",
    "incarnation": "k8s.elastic=on, bootstrap mode: each incarnation of a prefill pod serves "
    "under an engine id of its own (the pod's uid appended), which discovery names too: vLLM's "
    "MooncakeConnector keeps the address it learned for an engine id for good",
}


@dataclass(frozen=True)
class Change:
    """One value that differs from the ModelArts rendering, and why."""

    process: str
    where: str
    modelarts: str
    k8s: str
    reason: str

    def line(self) -> str:
        return f"{self.process} {self.where}: {self.modelarts} -> {self.k8s}"


def proxy_service(prefix: str) -> str:
    return f"{prefix}-proxy"


# The proxy's config fields whose words name another process, and why they change.
FIELD_REASONS = {
    "host": "listen",
    "metaserver_url": "metaserver",
    **{name: "backend" for name in ("prefill", "decode", "replica", "prefill_bootstrap",
                                    "failure_domains", "kv_events")},
}  # fmt: skip


def pod_hosts(groups: tuple[Group, ...], prefix: str, per_pod_services: bool) -> HostOf:
    """The address map of the pods: an engine pod by its name through its
    LeaderWorkerSet's headless Service (or its own Service), the proxy by its Service."""

    def host_of(address: Address) -> str:
        if address.role == "proxy":
            return proxy_service(prefix)
        pod = pod_of(groups, address.process)
        return pod.name if per_pod_services else pod.dns

    return host_of


def _word_text(arg: Arg) -> str:
    """A word as a script says it, unquoted (a conditional one as ``${VAR:+...}``)."""
    if isinstance(arg, str):
        return arg
    text = "".join(p if isinstance(p, str) else "${" + p.var + "}" for p in arg.parts)
    return text if arg.when is None else "${" + arg.when.var + ":+" + text + "}"


def _by_field(words: list[tuple[str | None, Arg]]) -> dict[str | None, list[Arg]]:
    grouped: dict[str | None, list[Arg]] = {}
    for field, word in words:
        grouped.setdefault(field, []).append(word)
    return grouped


def _proxy_command(
    p: ProcessPlan, plan: Plan, host_of: HostOf, changes: list[Change]
) -> tuple[Arg, ...]:
    """The proxy's command emitted again from its references for the pods, and what
    changed from the Plan's, config field by config field (word by word where a field
    has as many words on both sides; a value joined to its flag, ``--host=-x``, may not)."""
    assert p.proxy is not None
    listen = Word(parts=(Ref(var=POD_IP, value=p.host),))
    callback = p.address() if p.proxy.metaserver is not None else None
    words = proxy_words(p.proxy, host_of, listen=listen, metaserver=callback)
    planned = proxy_words(p.proxy, lambda a: NodeRef.of(a.node, plan.host_of(a)))
    if tuple(word for _, word in planned) != p.command:
        raise ValueError(f"{p.name}: its command is not its wiring's")
    before = _by_field(planned)
    for field, new in _by_field(words).items():
        old = before[field]
        if new == old:
            continue
        pairs = (
            zip(old, new, strict=True)
            if len(old) == len(new)
            else [(" ".join(map(_word_text, old)), " ".join(map(_word_text, new)))]
        )
        for a, b in pairs:
            if a != b:
                why = FIELD_REASONS[field or ""]
                changes.append(Change(p.name, "argv", _word_text(a), _word_text(b), why))
    return tuple(word for _, word in words)


def _devices(pod: Pod, text: str) -> str:
    index = {d: i for i, d in enumerate(pod.devices)}
    try:
        return ",".join(str(index[int(d)]) for d in text.split(","))
    except (KeyError, ValueError):
        return text


def _engine(p: ProcessPlan, pod: Pod, host_of: HostOf, changes: list[Change]) -> ProcessPlan:
    env = dict(p.env)
    for key, value in p.env.items():
        new = value
        why = ""
        if isinstance(value, AddressUrl):
            new, why = url(value.address, host_of, value.path), "metaserver"
        elif isinstance(value, str) and value in LOOPBACK:
            new, why = NodeValue(node="ip"), "loopback"
        elif isinstance(value, str) and key in DEVICE_VARS:
            new, why = _devices(pod, value), "devices"
        if new != value:
            env[key] = new
            shown = "${NODE_IP}" if isinstance(new, NodeValue) else str(new)
            old = value.template() if isinstance(value, AddressUrl) else str(value)
            changes.append(Change(p.name, f"env {key}", old, shown, why))
    bind = p.bind_host
    if bind in LOOPBACK:
        changes.append(Change(p.name, "BIND_HOST", bind or "", "0.0.0.0", "loopback"))
        bind = "0.0.0.0"
    return p.model_copy(update={"env": env, "bind_host": bind})


def pod_processes(
    plan: Plan, groups: tuple[Group, ...], prefix: str, per_pod_services: bool = False
) -> tuple[dict[str, ProcessPlan], list[Change]]:
    """Every process of the Plan as its pod runs it, and what changed from ModelArts.

    ``per_pod_services``: the proxy names each engine pod by its own headless Service
    (a DisaggregatedSet's pods), not through its LeaderWorkerSet's.
    """
    changes: list[Change] = []
    host_of = pod_hosts(groups, prefix, per_pod_services)
    out: dict[str, ProcessPlan] = {}
    for p in plan.processes:
        if p.kind == "proxy":
            command = _proxy_command(p, plan, host_of, changes)
            out[p.name] = p.model_copy(update={"command": command})
        else:
            out[p.name] = _engine(p, pod_of(groups, p.name), host_of, changes)
    return out, changes
