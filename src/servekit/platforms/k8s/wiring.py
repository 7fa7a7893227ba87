"""The Plan's processes as a Kubernetes pod runs them: only addresses change.

Each process keeps its command and environment from the Plan; what a ModelArts
node learns from the rank table, a pod learns from what LWS and the kubelet inject:

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

import re
from dataclasses import dataclass

from servekit.catalog import NodeValue
from servekit.guard import metaserver_url
from servekit.platforms.k8s.groups import Group, Pod, pod_of
from servekit.render import Arg, NodeUrl, Plan, ProcessPlan, Ref, Word

LOOPBACK = ("127.0.0.1", "localhost")
DEVICE_VARS = ("ASCEND_RT_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")
POD_IP = "POD_IP"
_NODE_REF = re.compile(r"^NODE(\d+)_IP$")

REASONS = {
    "backend": "the proxy reaches each engine pod by its name through the LeaderWorkerSet's "
    "headless Service; pod IPs change when a pod is recreated",
    "listen": "the proxy listens on its pod's IP (downward API), which its Service targets",
    "metaserver": "decoders call the layerwise proxy back through its Service",
    "loopback": "a pod's loopback is reachable only from inside the pod; the pod's IP "
    "(downward API) is the address other pods reach",
    "devices": "the device plugin gives each pod its own devices, numbered from 0 in the pod",
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


def _backend(groups: tuple[Group, ...], plan: Plan, node: int, port: int, kv: bool) -> Pod:
    """The engine pod serving (node, port): its API, or its bootstrap (kv) port."""
    for p in plan.processes:
        if p.kind == "engine" and p.node == node and (p.kv_port if kv else p.api_port) == port:
            return pod_of(groups, p.name)
    raise ValueError(f"no engine serves node {node} port {port}")


_PORT = re.compile(r"^:(\d+)")


def _backend_word(
    arg: Arg, plan: Plan, groups: tuple[Group, ...], per_pod_services: bool
) -> Arg | None:
    """A proxy word naming one engine by ``NODE<k>_IP`` and a port, on the pod's name instead.

    ``http://NODE:PORT`` (an API), ``ID=http://NODE:PORT`` (a bootstrap server: the kv
    port) or ``http://NODE:PORT=tcp://NODE:EVENTS`` (the same pod's KV-event
    publisher): the pod is the one the first reference and the port after it name.
    The word keeps its condition (a KV-events word exists only with KV_EVENTS=1).
    """
    if not isinstance(arg, Word) or len(arg.parts) < 3:
        return None
    prefix, ref, after = arg.parts[:3]
    if not (isinstance(prefix, str) and isinstance(ref, Ref) and isinstance(after, str)):
        return None
    node, port = _NODE_REF.match(ref.var), _PORT.match(after)
    if node is None or port is None:
        return None
    if any(isinstance(p, Ref) and p.var != ref.var for p in arg.parts):
        return None
    pod = _backend(groups, plan, int(node.group(1)), int(port.group(1)), "=" in prefix)
    name = pod.name if per_pod_services else pod.dns
    text = "".join(name if isinstance(p, Ref) else p for p in arg.parts)
    return text if arg.when is None else Word(parts=(text,), when=arg.when)


def _word_text(arg: Arg) -> str:
    """A word as a script says it, unquoted (a conditional one as ``${VAR:+...}``)."""
    if isinstance(arg, str):
        return arg
    text = "".join(p if isinstance(p, str) else "${" + p.var + "}" for p in arg.parts)
    return text if arg.when is None else "${" + arg.when.var + ":+" + text + "}"


def _proxy_command(
    p: ProcessPlan,
    plan: Plan,
    groups: tuple[Group, ...],
    url: str,
    changes: list[Change],
    *,
    per_pod_services: bool,
) -> tuple[Arg, ...]:
    out: list[Arg] = []
    previous: Arg | None = None
    for arg in p.command:
        new = arg
        if previous == "--host":
            new = Word(parts=(Ref(var=POD_IP, value=p.host),))
            why = "listen"
        elif previous == "--metaserver-url":
            new, why = url, "metaserver"
        elif (named := _backend_word(arg, plan, groups, per_pod_services)) is not None:
            new, why = named, "backend"
        if new != arg:
            changes.append(Change(p.name, "argv", _word_text(arg), _word_text(new), why))
        out.append(new)
        previous = arg
    return tuple(out)


def _devices(pod: Pod, text: str) -> str:
    index = {d: i for i, d in enumerate(pod.devices)}
    try:
        return ",".join(str(index[int(d)]) for d in text.split(","))
    except (KeyError, ValueError):
        return text


def _engine(p: ProcessPlan, pod: Pod, url: str, changes: list[Change]) -> ProcessPlan:
    env = dict(p.env)
    for key, value in p.env.items():
        new = value
        why = ""
        if isinstance(value, NodeUrl):
            new, why = url, "metaserver"
        elif isinstance(value, str) and value in LOOPBACK:
            new, why = NodeValue(node="ip"), "loopback"
        elif isinstance(value, str) and key in DEVICE_VARS:
            new, why = _devices(pod, value), "devices"
        if new != value:
            env[key] = new
            shown = "${NODE_IP}" if isinstance(new, NodeValue) else str(new)
            old = value.with_host(value.reference) if isinstance(value, NodeUrl) else str(value)
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
    proxy = next((p for p in plan.processes if p.kind == "proxy"), None)
    port = proxy.api_port if proxy is not None and proxy.api_port is not None else 0
    url = metaserver_url(proxy_service(prefix), port)
    out: dict[str, ProcessPlan] = {}
    for p in plan.processes:
        if p.kind == "proxy":
            command = _proxy_command(
                p, plan, groups, url, changes, per_pod_services=per_pod_services
            )
            out[p.name] = p.model_copy(update={"command": command})
        else:
            out[p.name] = _engine(p, pod_of(groups, p.name), url, changes)
    return out, changes
