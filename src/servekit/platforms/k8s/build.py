"""A Plan as Kubernetes manifests: LeaderWorkerSets, the proxy, one ConfigMap, kustomize.

Files (``servekit render NAME --target k8s --out DIR``):

- ``configmap.yaml``: every process script (the same ``process_script`` the other
  targets write, on :mod:`.wiring`'s processes), ``pod.sh`` (each pod's entry) and
  servekit's bundled files (guard, KV shim, proxy zipapp), mounted at ``/servekit``;
- ``<group>.yaml``: one LeaderWorkerSet per engine group (:mod:`.groups`), or with
  ``kind="disaggregatedset"`` one ``disaggregatedset.yaml`` holding every group as a role;
- ``proxy.yaml``: the proxy's Deployment and Service (or, without a proxy, a
  Service on the entry engine's leader pods);
- ``kustomization.yaml``: the resources, and the image under one name
  (``servekit-engine``) so an overlay sets it, with namespace and replicas.

Pod templates: the accelerator (requests = limits), ``/dev/shm`` as a memory
``emptyDir``, readiness on ``/health`` of the pod's first API port, a startup probe
long enough for a large model's load, ``RecreateGroupOnPodRestart``; host access
only where :func:`requirements` finds the layout needs it.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any, Literal

import jinja2
import yaml

from servekit import __version__
from servekit.catalog import Layout, NodeValue
from servekit.platforms.k8s.groups import Group, Pod, engine_groups
from servekit.platforms.k8s.wiring import Change, pod_processes, proxy_service
from servekit.render import Plan, ProcessPlan, process_script, references

K8sKind = Literal["leaderworkerset", "disaggregatedset"]
IMAGE_NAME = "servekit-engine"
MOUNT = "/servekit"
SCRIPTS = "scripts"
LWS_API = "leaderworkerset.x-k8s.io/v1"
DS_API = "disaggregatedset.x-k8s.io/v1"
GROUP_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/group-index"
STARTUP_PERIOD_S = 10
STARTUP_FAILURES = 360  # one hour for a large model's load and graph capture
ACCELERATORS: dict[str, str | None] = {
    "ascend-a3": "huawei.com/ascend-1980",
    "ascend-a2": "huawei.com/Ascend910",
    "nvidia": "nvidia.com/gpu",
    "cpu": None,
}
"""Device-plugin resource per hardware: Huawei CCE names A3 NPUs ``ascend-1980``,
MindCluster ``Ascend910``; clusters differ, so ``--set k8s.accelerator=NAME`` overrides."""


@dataclass(frozen=True)
class K8sOptions:
    """What a Kubernetes rendering is asked besides the Plan."""

    accelerator: str | None
    kind: K8sKind = "leaderworkerset"
    prefix: str = "sk"


@dataclass(frozen=True)
class Requirement:
    """Host access a layout's pods need, and why."""

    field: str
    groups: tuple[str, ...]
    reason: str

    def line(self) -> str:
        return f"{self.field}: true on {', '.join(self.groups)}: {self.reason}"


@dataclass
class K8sRendering:
    """Everything one rendering decided, for the files and the summary."""

    plan: Plan
    options: K8sOptions
    groups: tuple[Group, ...]
    processes: dict[str, ProcessPlan]
    changes: list[Change]
    requirements: list[Requirement] = field(default_factory=list)


def requirements(layout: Layout, groups: tuple[Group, ...]) -> list[Requirement]:
    """hostNetwork where the layout's collective or KV traffic uses the host's RoCE/RDMA NICs.

    An Ascend instance spanning several pods runs HCCL between NPUs over the hosts'
    RoCE network, and the catalog's Ascend KV connectors (Mooncake / LLMDataDist)
    move KV between NPUs the same way; HCCL's and Gloo's host sockets are bound to the
    node's interface (``HCCL_SOCKET_IFNAME``), which a pod network does not have.
    Nothing in the catalog needs hostIPC or privileges (``/dev/shm`` is an emptyDir,
    devices come from the device plugin), so none is set.
    """
    if not layout.hardware.is_ascend:
        return []
    names = tuple(
        g.name
        for g in groups
        if g.size > 1 or any(p.kv_connector for pod in g.pods for p in pod.processes)
    )
    if not names:
        return []
    return [
        Requirement(
            "hostNetwork",
            names,
            "HCCL (multi-node instances) and the Ascend KV connectors use the hosts' RoCE "
            "NICs and bind HCCL/Gloo sockets to the node's interface (HCCL_SOCKET_IFNAME)",
        )
    ]


def decide(plan: Plan, layout: Layout, options: K8sOptions) -> K8sRendering:
    groups = engine_groups(plan, options.prefix)
    per_pod_services = options.kind == "disaggregatedset"
    processes, changes = pod_processes(plan, groups, options.prefix, per_pod_services)
    return K8sRendering(plan, options, groups, processes, changes, requirements(layout, groups))


def _labels(r: K8sRendering, role: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "servekit",
        "app.kubernetes.io/instance": r.options.prefix,
        "app.kubernetes.io/component": role,
    }


def _entry_row(r: K8sRendering, pod: Pod, group: Group) -> dict[str, Any]:
    procs = [r.processes[p.name] for p in pod.processes]
    refs = {v for p in procs for v in references(p.command) if v.startswith("NODE")}
    leaders = sorted(int(v[4:-3]) for v in refs if v[4:-3].isdigit())
    if len(leaders) > 1 or (leaders and leaders[0] != group.pod(pod.instance, 0).node):
        raise ValueError(f"{pod.name}: refers to nodes {leaders}, not its instance's leader")
    nic = any(isinstance(v, NodeValue) and v.node == "nic" for p in procs for v in p.env.values())
    return {
        "group": group.name,
        "instance": pod.instance,
        "worker": pod.worker,
        "node": pod.node,
        "size": group.size,
        "leader": leaders[0] if leaders else "",
        "nic": 1 if nic else 0,
        "procs": " ".join(p.name for p in procs),
    }


def _pod_script(r: K8sRendering) -> str:
    env = jinja2.Environment(
        loader=jinja2.ChoiceLoader(
            [
                jinja2.PackageLoader("servekit.platforms.k8s", "templates"),
                jinja2.PackageLoader("servekit.render", "templates"),
            ]
        ),
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
        autoescape=False,
    )
    rows = [_entry_row(r, pod, g) for g in r.groups for pod in g.pods]
    proxy = next((p for p in r.plan.processes if p.kind == "proxy"), None)
    if proxy is not None:
        rows.append(
            {
                "group": "proxy",
                "instance": 0,
                "worker": 0,
                "node": proxy.node,
                "size": 1,
                "leader": "",
                "nic": 0,
                "procs": proxy.name,
            }
        )
    return env.get_template("pod.sh.j2").render(
        layout=r.plan.layout, version=__version__, pods=rows
    )


def _configmap(r: K8sRendering, bundled: dict[str, bytes]) -> dict[str, Any]:
    data = {f"{name}.sh": process_script(r.plan, p) for name, p in r.processes.items()}
    data["pod.sh"] = _pod_script(r)
    binary = {}
    for name, content in bundled.items():
        try:
            data[name] = content.decode("utf-8")
        except UnicodeDecodeError:
            binary[name] = base64.b64encode(content).decode("ascii")
    obj: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"{r.options.prefix}-{SCRIPTS}", "labels": _labels(r, SCRIPTS)},
        "data": dict(sorted(data.items())),
    }
    if binary:
        obj["binaryData"] = binary
    return obj


def _probe(port: int, failures: int, period: int) -> dict[str, Any]:
    return {
        "httpGet": {"path": "/health", "port": port},
        "periodSeconds": period,
        "failureThreshold": failures,
    }


def _container(
    r: K8sRendering, group: str, pod: Pod | None, api_port: int | None
) -> dict[str, Any]:
    env: list[dict[str, Any]] = [
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
    ]
    if pod is not None:
        path = f"metadata.labels['{GROUP_INDEX_LABEL}']"
        env.append({"name": "SERVEKIT_GROUP_INDEX", "valueFrom": {"fieldRef": {"fieldPath": path}}})
    container: dict[str, Any] = {
        "name": "engine" if pod is not None else "proxy",
        "image": IMAGE_NAME,
        "command": ["/bin/bash", f"{MOUNT}/pod.sh", group],
        "env": env,
        "volumeMounts": [{"name": SCRIPTS, "mountPath": MOUNT, "readOnly": True}],
    }
    ports = pod.ports if pod is not None else ((api_port,) if api_port else ())
    if ports:
        container["ports"] = [{"containerPort": p, "protocol": "TCP"} for p in ports]
    if pod is not None:
        container["volumeMounts"].append({"name": "dshm", "mountPath": "/dev/shm"})
        if r.options.accelerator and pod.devices:
            count = {r.options.accelerator: str(len(pod.devices))}
            container["resources"] = {"requests": dict(count), "limits": dict(count)}
    if api_port is not None:
        container["readinessProbe"] = _probe(api_port, 3, 5)
        container["startupProbe"] = _probe(
            api_port, STARTUP_FAILURES if pod is not None else 30, STARTUP_PERIOD_S
        )
    return container


def _pod_spec(r: K8sRendering, group: Group | None, pod: Pod | None) -> dict[str, Any]:
    api = pod.api_ports[0] if pod is not None and pod.api_ports else None
    if pod is None:
        proxy = next(p for p in r.plan.processes if p.kind == "proxy")
        api = proxy.api_port
    name = group.name if group is not None else "proxy"
    volumes: list[dict[str, Any]] = [
        {
            "name": SCRIPTS,
            "configMap": {"name": f"{r.options.prefix}-{SCRIPTS}", "defaultMode": 0o755},
        }
    ]
    spec: dict[str, Any] = {"containers": [_container(r, name, pod, api)], "volumes": volumes}
    if pod is not None:
        volumes.append({"name": "dshm", "emptyDir": {"medium": "Memory"}})
        for req in r.requirements:
            if group is not None and group.name in req.groups:
                spec[req.field] = True
                if req.field == "hostNetwork":
                    spec["dnsPolicy"] = "ClusterFirstWithHostNet"
    return spec


GROUP_LABEL = "servekit.io/group"


def _template(r: K8sRendering, group: Group, pod: Pod) -> dict[str, Any]:
    labels = {**_labels(r, group.role), GROUP_LABEL: group.name}
    return {"metadata": {"labels": labels}, "spec": _pod_spec(r, group, pod)}


def pod_services(r: K8sRendering) -> list[dict[str, Any]]:
    """A headless Service per engine pod, for a DisaggregatedSet.

    Its controller names the child LeaderWorkerSets ``<set>-<slice>-<revision>-<role>``
    (kubernetes-sigs/lws ``GenerateName``), so the pods' LWS names are not known when
    rendering; a Service selecting one pod by its group and LWS indexes is. During a
    rollout both revisions' pods match, and the name answers with both.
    """
    out = []
    for g in r.groups:
        for pod in g.pods:
            selector = {
                GROUP_LABEL: g.name,
                "leaderworkerset.sigs.k8s.io/group-index": str(pod.instance),
                "leaderworkerset.sigs.k8s.io/worker-index": str(pod.worker),
            }
            out.append(
                {
                    "apiVersion": "v1",
                    "kind": "Service",
                    "metadata": {"name": pod.name, "labels": _labels(r, g.role)},
                    "spec": {
                        "clusterIP": "None",
                        "publishNotReadyAddresses": True,
                        "selector": selector,
                        "ports": [
                            {
                                "name": f"p{port}",
                                "port": port,
                                "targetPort": port,
                                "protocol": "TCP",
                            }
                            for port in pod.ports
                        ],
                    },
                }
            )
    return out


def lws_spec(r: K8sRendering, group: Group) -> dict[str, Any]:
    """The LeaderWorkerSet spec of one group (also a DisaggregatedSet role's spec)."""
    worker = group.worker()
    template: dict[str, Any] = {
        "size": group.size,
        "restartPolicy": "RecreateGroupOnPodRestart",
        "workerTemplate": _template(r, group, worker if worker is not None else group.leader()),
    }
    if worker is not None:
        template = {"leaderTemplate": _template(r, group, group.leader()), **template}
    return {
        "replicas": group.replicas,
        "startupPolicy": "LeaderCreated",
        "leaderWorkerTemplate": template,
    }


def leaderworkerset(r: K8sRendering, group: Group) -> dict[str, Any]:
    return {
        "apiVersion": LWS_API,
        "kind": "LeaderWorkerSet",
        "metadata": {"name": group.name, "labels": _labels(r, group.role)},
        "spec": lws_spec(r, group),
    }


def disaggregatedset(r: K8sRendering) -> dict[str, Any]:
    """Every group as a role of one DisaggregatedSet (LWS v0.9: rolled out in ratio).

    The proxy reaches its pods through :func:`pod_services` (the child LWS names
    carry a revision hash); ``LWS_LEADER_ADDRESS`` is injected by LWS as ever.
    """
    return {
        "apiVersion": DS_API,
        "kind": "DisaggregatedSet",
        "metadata": {"name": r.options.prefix, "labels": _labels(r, "engines")},
        "spec": {
            "roles": [
                {"name": g.name.removeprefix(r.options.prefix + "-"), "spec": lws_spec(r, g)}
                for g in r.groups
            ]
        },
    }


def _proxy_objects(r: K8sRendering) -> list[dict[str, Any]]:
    proxy = next((p for p in r.plan.processes if p.kind == "proxy"), None)
    labels = _labels(r, "proxy")
    if proxy is None:
        entry = r.plan.process(r.plan.entry)
        group = next(g for g in r.groups if any(p.name == entry.name for p in g.leader().processes))
        selector = {
            "leaderworkerset.sigs.k8s.io/name": group.name,
            "leaderworkerset.sigs.k8s.io/worker-index": "0",
        }
        port = entry.api_port
    else:
        selector = labels
        port = proxy.api_port
    assert port is not None
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": proxy_service(r.options.prefix), "labels": labels},
        "spec": {
            "selector": selector,
            "ports": [{"name": "http", "port": port, "targetPort": port, "protocol": "TCP"}],
        },
    }
    if proxy is None:
        return [service]
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": proxy_service(r.options.prefix), "labels": labels},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": _pod_spec(r, None, None)},
        },
    }
    return [deployment, service]


class _Dumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
    """Plain YAML (libyaml's emitter where present): no anchors, scripts as literal blocks."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _text(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Dumper.add_representer(str, _text)


def _dump(*objects: dict[str, Any]) -> str:
    return "---\n".join(
        yaml.dump(o, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=100)
        for o in objects
    )


def manifests(r: K8sRendering, bundled: dict[str, bytes]) -> dict[str, list[dict[str, Any]]]:
    """File name -> the objects it holds."""
    files: dict[str, list[dict[str, Any]]] = {"configmap.yaml": [_configmap(r, bundled)]}
    if r.options.kind == "disaggregatedset":
        files["disaggregatedset.yaml"] = [disaggregatedset(r)]
        files["pod-services.yaml"] = pod_services(r)
    else:
        for g in r.groups:
            files[f"{g.name.removeprefix(r.options.prefix + '-')}.yaml"] = [leaderworkerset(r, g)]
    files["proxy.yaml"] = _proxy_objects(r)
    return files


def kustomization(r: K8sRendering, resources: list[str]) -> dict[str, Any]:
    image = r.plan.image.split(" ")[0] if r.plan.image and " " not in r.plan.image.strip() else ""
    new_name, _, tag = image.rpartition(":") if ":" in image.rsplit("/", 1)[-1] else (image, "", "")
    entry: dict[str, str] = {"name": IMAGE_NAME}
    if new_name:
        entry["newName"] = new_name
        if tag:
            entry["newTag"] = tag
    return {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": resources,
        "images": [entry],
    }


def summary(r: K8sRendering) -> str:
    """What the rendering holds and what differs from ModelArts, for plan.md and the console."""
    lines = [f"Kubernetes ({r.options.kind}, accelerator {r.options.accelerator or 'none'}):"]
    for g in r.groups:
        devices = len(g.leader().devices)
        lines.append(
            f"- {g.name}: {g.role}, replicas {g.replicas} x size {g.size} "
            f"({', '.join(g.engines)}), {devices} devices per pod"
        )
    if not r.requirements:
        lines.append("- host access: none (no hostNetwork, hostIPC or privileges needed)")
    lines += [f"- requirement {req.line()}" for req in r.requirements]
    from servekit.platforms.k8s.wiring import REASONS

    by_reason: dict[str, list[Change]] = {}
    for c in r.changes:
        by_reason.setdefault(c.reason, []).append(c)
    lines.append(f"Differences from the ModelArts rendering ({len(r.changes)} values):")
    for reason, items in by_reason.items():
        lines.append(f"- {len(items)} x {reason}: {REASONS[reason]}; e.g. {items[0].line()}")
    lines.append(
        "- address-derived: NODE<k>_IP of a DP master is the leader pod's IP "
        "(LWS_LEADER_ADDRESS on workers), NODE_IP the pod IP, NODE_NIC its interface"
    )
    return "\n".join(lines) + "\n"


def render_k8s(
    plan: Plan, layout: Layout, options: K8sOptions, bundled: dict[str, bytes]
) -> dict[str, str | bytes]:
    """Every file of a Kubernetes rendering, by relative path."""
    r = decide(plan, layout, options)
    out: dict[str, str | bytes] = {}
    objects = manifests(r, bundled)
    for name, objs in objects.items():
        out[name] = _dump(*objs)
    out["kustomization.yaml"] = _dump(kustomization(r, list(objects)))
    out["k8s.md"] = summary(r)
    return out
