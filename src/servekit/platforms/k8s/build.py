"""A Plan as Kubernetes manifests: LeaderWorkerSets, the proxy, ConfigMaps, kustomize.

Files (``servekit render NAME --target k8s --out DIR``):

- ``configmaps.yaml``: every process script (the same ``process_script`` the other
  targets write, on :mod:`.wiring`'s processes), each pod's entry ``pod.sh`` and
  servekit's bundled files, as ConfigMaps each under ``kubectl apply``'s annotation cap
  (:mod:`.configmaps`): one set per engine group (its ``pod.sh`` and scripts), one for
  the bundle every engine mounts (guard, KV shim, the model downloader), one for the
  proxy (its script and zipapp); a pod mounts its sets as one projected volume;
- ``<group>.yaml``: one LeaderWorkerSet per engine group (:mod:`.groups`), or with
  ``kind=disaggregatedset`` one ``disaggregatedset.yaml`` holding every group as a role;
- ``proxy.yaml``: the proxy's Deployment and Service (or, without a proxy, a
  Service on the entry engine's leader pods); ``podmonitor.yaml`` on request;
- ``kustomization.yaml``: the resources, and the image under one name
  (``servekit-engine``) so an overlay sets it.

Pod templates are :mod:`.podspec`'s; what the cluster must allow (the Pod Security
Standards level, and each reason it is above baseline) is :func:`requirements`'. Each
engine pod's ``preflight`` initContainer runs ``pod.sh GROUP preflight``: the pod
checked and compared with every engine pod (:mod:`servekit.preflight`; its units are
:func:`preflight_units`, its files in the engines' bundle).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import jinja2
import yaml

from servekit import __version__
from servekit.catalog import Layout, NodeValue
from servekit.errors import UsageError
from servekit.platforms.k8s.configmaps import (
    ANNOTATION_CAP,
    BUDGET,
    Split,
    content_hash,
    last_applied_bytes,
    pack,
)
from servekit.platforms.k8s.fetchmodel import FILE as FETCH_FILE, source_bytes as fetch_source
from servekit.platforms.k8s.groups import Group, Pod, engine_groups
from servekit.platforms.k8s.podspec import (
    GROUP_INDEX_LABEL,
    GROUP_LABEL,
    IMAGE_NAME,
    MOUNT,
    engine_resources,
    engine_template,
    model_mount,
    proxy_template,
)
from servekit.platforms.k8s.rendering import K8sRendering, Level, Requirement
from servekit.platforms.k8s.settings import (
    ACCELERATORS,
    ASCEND_HOST_FILES,
    BINARY,
    NODE_SHARES,
    K8sKind,
    K8sSettings,
    quantity_value,
)
from servekit.platforms.k8s.wiring import Change, pod_processes, proxy_service
from servekit.preflight import ENTRY_FILE, SPEC_FILE, Unit, preflight_files
from servekit.proxy import option_words
from servekit.render import Plan, ProcessPlan, process_script, referenced_nodes

__all__ = [
    "ACCELERATORS",
    "GROUP_INDEX_LABEL",
    "GROUP_LABEL",
    "IMAGE_NAME",
    "MOUNT",
    "K8sKind",
    "K8sOptions",
    "K8sRendering",
    "Level",
    "Requirement",
]

K8sOptions = K8sSettings
LWS_API = "leaderworkerset.x-k8s.io/v1"
DS_API = "disaggregatedset.x-k8s.io/v1"
PODMONITOR_API = "monitoring.coreos.com/v1"
EXCLUSIVE_TOPOLOGY = "leaderworkerset.sigs.k8s.io/exclusive-topology"
REVISION = "revision"
VOLCANO_QUEUE = "scheduling.volcano.sh/queue-name"


def _crosses_pods(group: Group) -> bool:
    """HCCL between pods (an instance spans several) or a KV connector moving KV between pods."""
    return group.size > 1 or any(p.kv_connector for pod in group.pods for p in pod.processes)


def requirements(r: K8sRendering) -> list[Requirement]:
    """What the rendering asks of the hosts, each with its reason and the option that avoids it.

    Engines run as root (vLLM images do) and so never meet ``restricted``; everything
    here is ``baseline`` but these: the host network, hostPath volumes and capabilities
    outside baseline's list.
    """
    engines = tuple(g.name for g in r.groups)
    out: list[Requirement] = []
    if r.host_network_groups:
        out.append(
            Requirement(
                "hostNetwork",
                r.host_network_groups,
                "k8s.network=host: HCCL and the KV connectors use the hosts' interfaces",
                "privileged",
                "k8s.network=pod (HCCL_IF_IP is the pod IP, the socket NIC the pod's)",
            )
        )
    if r.options.model.kind == "host":
        path = r.options.model.path or model_mount(r.plan.model_path)
        out.append(
            Requirement(
                f"hostPath {path}",
                engines,
                "the model on every node (k8s.model=host, as vllm-ascend's own LWS)",
                "privileged",
                "k8s.model=pvc:CLAIM[/SUB] or k8s.model=hf:REPO",
            )
        )
    if r.options.host_files:
        out.append(
            Requirement(
                "hostPath " + ", ".join(p for _, p, _ in ASCEND_HOST_FILES),
                engines,
                "the NPUs' RoCE addresses (hccn.conf, read by HCCL) and the driver's tools, "
                "as vllm-ascend's manifests mount them",
                "privileged",
                "k8s.host_files=off where the image or the device plugin provides them",
            )
        )
    if r.rdma_groups and r.options.rdma is not None:
        out.append(
            Requirement(
                f"capability IPC_LOCK, resource {r.options.rdma[0]}",
                r.rdma_groups,
                "RDMA pins the KV buffers it registers (llm-d's PD and wide-EP pods add IPC_LOCK)",
                "privileged",
                "k8s.rdma=none (KV over TCP)",
            )
        )
    return out


def decide(plan: Plan, layout: Layout, options: K8sSettings) -> K8sRendering:
    groups = engine_groups(plan, options.prefix)
    per_pod_services = options.kind == "disaggregatedset"
    processes, changes = pod_processes(plan, groups, options.prefix, per_pod_services)
    r = K8sRendering(plan, layout, options, groups, processes, changes)
    if options.elastic:
        from servekit.platforms.k8s import elastic
        from servekit.platforms.k8s.wiring import pod_hosts

        elastic.refuse_unfit(r)
        elastic.incarnation_processes(r, changes)
        proxy = r.proxy
        assert proxy is not None
        host_of = pod_hosts(groups, options.prefix, per_pod_services)
        # the backend lists are gone, and with them their changes
        changes[:] = [c for c in changes if (c.process, c.reason) != (proxy.name, "backend")]
        command = elastic.proxy_command(r, proxy, host_of, changes)
        processes[proxy.name] = processes[proxy.name].model_copy(update={"command": command})
    _proxy_processes(r)
    if options.network == "host":
        r.host_network_groups = tuple(g.name for g in groups if _crosses_pods(g))
    if options.rdma is not None:
        r.rdma_groups = tuple(
            g.name for g in groups if any(p.kv_connector for pod in g.pods for p in pod.processes)
        )
    r.requirements = requirements(r)
    return r


def _proxy_processes(r: K8sRendering) -> None:
    """``k8s.proxy_replicas`` and ``k8s.proxy_workers``: several proxy processes, or a
    refusal in one line where a layout cannot have them; ``--workers`` recorded."""
    o = r.options
    several = [(k, v) for k, v in (("proxy_replicas", o.proxy_replicas),
                                   ("proxy_workers", o.proxy_workers)) if v > 1]  # fmt: skip
    proxy = r.proxy
    if several and (proxy is None or proxy.proxy is None):
        key, value = several[0]
        raise UsageError(
            f"--set k8s.{key}={value}: this layout has no proxy (its entry engine serves); drop it"
        )
    if several and proxy is not None and proxy.proxy is not None and proxy.proxy.metaserver:
        key, value = several[0]
        raise UsageError(
            f"--set k8s.{key}={value}: a layerwise proxy waits for each decoder's call back "
            "(/v1/metaserver through its Service), which would reach any of several proxy "
            "processes, not the one waiting; keep 1"
        )
    if proxy is None or o.proxy_workers == 1:
        return
    words = tuple(option_words("workers", o.proxy_workers))
    command = (*r.processes[proxy.name].command, *words)
    r.processes[proxy.name] = r.processes[proxy.name].model_copy(update={"command": command})
    shown = " ".join(w for w in words if isinstance(w, str))
    r.changes.append(Change(proxy.name, "argv", "one process", shown, "workers"))


def _entry_row(r: K8sRendering, pod: Pod, group: Group) -> dict[str, Any]:
    procs = [r.processes[p.name] for p in pod.processes]
    leaders = sorted({n for p in procs for n in referenced_nodes(p.command)})
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
        "unit": pod.name,
    }


def _proxy_row(proxy: ProcessPlan) -> dict[str, Any]:
    return {
        "group": "proxy",
        "instance": 0,
        "worker": 0,
        "node": proxy.node,
        "size": 1,
        "leader": "",
        "nic": 0,
        "procs": proxy.name,
        "unit": "",
    }


def preflight_units(r: K8sRendering) -> list[Unit]:
    """The preflight's units: one per engine pod, reached by its name (its headless
    Service's), holding the devices the device plugin gives it (by count)."""
    per_pod = r.options.kind == "disaggregatedset"
    return [
        Unit(
            name=pod.name,
            label=f"pod {pod.name}",
            node=pod.node,
            processes=pod.processes,
            devices=tuple(range(len(pod.devices))),
            device_ids="visible",
            address=pod.name if per_pod else pod.dns,
        )
        for g in r.groups
        for pod in g.pods
    ]


_ENV = jinja2.Environment(
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


def pod_script(r: K8sRendering, rows: list[dict[str, Any]], joins: list[Split]) -> str:
    """``pod.sh`` of one group (or the proxy): its rows of the pod table, and the files it joins."""
    from servekit.platforms.k8s import elastic

    prestop = None
    if r.options.elastic and r.proxy is not None and r.proxy.api_port is not None:
        prestop = {
            "proxies": elastic.peers_service(r.options.prefix),
            "port": r.proxy.api_port,
            "wait": elastic.hook_wait(r.options),
            "key_env": elastic.ADMIN_KEY_ENV,
            "zipapp": elastic.PROXY_ZIPAPP,
            "var": elastic.ENGINE_ID_VAR,
            "uid_var": elastic.POD_UID_VAR,
        }
    return _ENV.get_template("pod.sh.j2").render(
        prestop=prestop,
        layout=r.plan.layout,
        version=__version__,
        pods=rows,
        joins=joins,
        preflight=r.options.preflight,
        preflight_entry=ENTRY_FILE,
        preflight_spec=SPEC_FILE,
    )


@dataclass
class Mounted:
    """The ConfigMaps one kind of pod mounts, the files cut into parts among them, their hash."""

    objects: list[dict[str, Any]]
    splits: list[Split]
    digest: str = ""
    shared: list[dict[str, Any]] = field(default_factory=list)

    @property
    def names(self) -> list[str]:
        return [str(o["metadata"]["name"]) for o in (*self.objects, *self.shared)]


def _packed(r: K8sRendering, base: str, files: dict[str, bytes], role: str, budget: int) -> Mounted:
    objects, splits = pack(base, files, r.labels(role), budget)
    return Mounted(objects, splits)


def configmaps(
    r: K8sRendering, bundled: dict[str, bytes], budget: int = BUDGET
) -> tuple[dict[str, Mounted], Mounted | None, Mounted | None]:
    """Per group its scripts' ConfigMaps, the engines' bundle and the proxy's ones.

    ``pod.sh`` names the parts it must join, so a group's set is packed once without it
    to learn them, then again with it.
    """
    engine_bundle = {
        n: c for n, c in bundled.items() if not n.endswith(".pyz") or r.options.elastic
    }  # elastic: the preStop hook runs servekit.proxy.prestop from the proxy's zipapp
    engine_bundle[FETCH_FILE] = fetch_source()
    if r.options.preflight:
        for name, content in preflight_files(r.plan, preflight_units(r)).items():
            engine_bundle[name] = content.encode() if isinstance(content, str) else content
    bundle = _packed(r, f"{r.options.prefix}-bundle", engine_bundle, "scripts", budget)
    groups: dict[str, Mounted] = {}
    for g in r.groups:
        scripts = {
            f"{p.name}.sh": process_script(r.plan, r.processes[p.name]).encode()
            for pod in g.pods
            for p in pod.processes
        }
        rows = [_entry_row(r, pod, g) for pod in g.pods]
        if r.options.elastic:
            from servekit.platforms.k8s import elastic

            for t in elastic.template_scripts(r, g):
                scripts[f"{t.name}.sh"] = process_script(r.plan, t).encode()
            rows += elastic.pod_rows(r, g, rows)
        base = f"{g.name}-scripts"
        first = _packed(r, base, {**scripts, "pod.sh": b""}, g.role, budget)
        joins = first.splits + bundle.splits
        files = {**scripts, "pod.sh": pod_script(r, rows, joins).encode()}
        mounted = _packed(r, base, files, g.role, budget)
        mounted.shared = bundle.objects
        mounted.splits = joins
        mounted.digest = content_hash([*mounted.objects, *bundle.objects])
        groups[g.name] = mounted
    proxy = None
    if r.proxy is not None:
        files = {
            f"{r.proxy.name}.sh": process_script(r.plan, r.processes[r.proxy.name]).encode(),
            **{n: c for n, c in bundled.items() if n.endswith(".pyz")},
            "pod.sh": b"",
        }
        if r.options.elastic:
            from servekit.platforms.k8s import elastic

            spec = elastic.discovery_spec(r).to_doc()
            files[elastic.SPEC_FILE] = (json.dumps(spec, indent=1) + "\n").encode()
        base = f"{r.options.prefix}-proxy-scripts"
        first = _packed(r, base, files, "proxy", budget)
        files["pod.sh"] = pod_script(r, [_proxy_row(r.proxy)], first.splits).encode()
        proxy = _packed(r, base, files, "proxy", budget)
        proxy.digest = content_hash(proxy.objects)
    return groups, (bundle if r.groups else None), proxy


def _templates(r: K8sRendering, group: Group, mounted: Mounted) -> dict[str, Any]:
    """``leaderTemplate`` (when workers differ) and ``workerTemplate`` of a group."""
    leaders = [p for p in group.pods if p.worker == 0]
    workers = [p for p in group.pods if p.worker > 0]

    def make(pods: list[Pod]) -> dict[str, Any]:
        template = engine_template(
            r,
            group,
            pods,
            configmaps=mounted.names,
            joins=bool(mounted.splits),
            digest=mounted.digest,
        )
        if r.options.elastic:
            from servekit.platforms.k8s import elastic

            elastic.engine_pod(r, group, template)
        return template

    if not workers:
        return {"workerTemplate": make(leaders)}
    return {"leaderTemplate": make(leaders), "workerTemplate": make(workers)}


def lws_spec(r: K8sRendering, group: Group, mounted: Mounted) -> dict[str, Any]:
    """The LeaderWorkerSet spec of one group (also a DisaggregatedSet role's spec)."""
    templates = _templates(r, group, mounted)
    template: dict[str, Any] = {
        **(
            {"leaderTemplate": templates["leaderTemplate"]} if "leaderTemplate" in templates else {}
        ),
        "size": group.size,
        "restartPolicy": "RecreateGroupOnPodRestart",
        "workerTemplate": templates["workerTemplate"],
    }
    spec: dict[str, Any] = {
        "replicas": group.replicas,
        "startupPolicy": "LeaderCreated",
        "leaderWorkerTemplate": template,
    }
    if r.options.elastic:
        # a rollout adds a group (at an index beyond replicas, which any index runs)
        # before an old one leaves, drained by its preStop hook: no capacity lost
        spec["rolloutStrategy"] = {
            "type": "RollingUpdate",
            "rollingUpdateConfiguration": {"maxSurge": 1, "maxUnavailable": 0},
        }
    return spec


def leaderworkerset(r: K8sRendering, group: Group, mounted: Mounted) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": group.name, "labels": r.labels(group.role)}
    annotations = {}
    if r.options.exclusive_topology:
        annotations[EXCLUSIVE_TOPOLOGY] = r.options.exclusive_topology
    if r.options.volcano_queue:
        annotations[VOLCANO_QUEUE] = r.options.volcano_queue
    if annotations:
        meta["annotations"] = annotations
    return {
        "apiVersion": LWS_API,
        "kind": "LeaderWorkerSet",
        "metadata": meta,
        "spec": lws_spec(r, group, mounted),
    }


def pod_services(r: K8sRendering) -> list[dict[str, Any]]:
    """A headless Service per engine pod, for a DisaggregatedSet.

    Its controller names the child LeaderWorkerSets ``<set>-<revision>-<role>`` (LWS
    v0.9) or ``<set>-<slice>-<revision>-<role>`` (v0.10), so the pods' LWS names are not
    known when rendering; a Service selecting one pod by its group and LWS indexes is.
    During a rollout both revisions' pods match, and the name answers with both.
    """
    out = []
    for g in r.groups:
        for pod in g.pods:
            selector = {
                GROUP_LABEL: g.name,
                GROUP_INDEX_LABEL: str(pod.instance),
                "leaderworkerset.sigs.k8s.io/worker-index": str(pod.worker),
            }
            ports = [
                {
                    "name": p["name"],
                    "port": p["containerPort"],
                    "targetPort": p["containerPort"],
                    "protocol": "TCP",
                }
                for p in _pod_ports(pod)
            ]
            out.append(
                {
                    "apiVersion": "v1",
                    "kind": "Service",
                    "metadata": {"name": pod.name, "labels": r.labels(g.role)},
                    "spec": {
                        "clusterIP": "None",
                        "publishNotReadyAddresses": True,
                        "selector": selector,
                        "ports": ports,
                    },
                }
            )
    return out


def _pod_ports(pod: Pod) -> list[dict[str, Any]]:
    from servekit.platforms.k8s.podspec import named_ports

    return named_ports([pod])


def disaggregatedset(r: K8sRendering, mounted: dict[str, Mounted]) -> dict[str, Any]:
    """Every group as a role of one DisaggregatedSet (rolled out in ratio by its controller).

    The proxy reaches its pods through :func:`pod_services` (the child LWS names
    carry a revision hash); ``LWS_LEADER_ADDRESS`` is injected by LWS as ever.
    """
    roles = []
    for g in r.groups:
        role: dict[str, Any] = {
            "name": g.name.removeprefix(r.options.prefix + "-"),
            "spec": lws_spec(r, g, mounted[g.name]),
        }
        if r.options.autoscale != "off":
            # LWS v0.10: the controller makes a DisaggregatedSetRoleScaler <set>-<role>
            # whose /scale an HPA drives; the role's own replicas must then be unset
            role["scaling"] = {"mode": "External"}
            del role["spec"]["replicas"]
        roles.append(role)
    return {
        "apiVersion": DS_API,
        "kind": "DisaggregatedSet",
        "metadata": {"name": r.options.prefix, "labels": r.labels("engines")},
        "spec": {"roles": roles},
    }


def _proxy_objects(r: K8sRendering, mounted: Mounted | None) -> list[dict[str, Any]]:
    proxy = r.proxy
    labels = r.labels("proxy")
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
    if proxy is None or mounted is None:
        return [service]
    template = proxy_template(r, port, mounted.names, bool(mounted.splits), mounted.digest)
    extra: list[dict[str, Any]] = []
    if r.options.elastic:
        from servekit.platforms.k8s import elastic

        elastic.proxy_pod(r, template)
        extra = elastic.objects(r, port)
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": proxy_service(r.options.prefix), "labels": labels},
        "spec": {
            "replicas": r.options.proxy_replicas,
            "selector": {"matchLabels": labels},
            "template": template,
        },
    }
    return [deployment, service, *extra]


def podmonitor(r: K8sRendering) -> dict[str, Any]:
    """One PodMonitor scraping ``/metrics`` on every API port of the engines and the proxy."""
    from servekit.platforms.k8s.podspec import named_ports

    ports = sorted(
        {
            p["name"]
            for g in r.groups
            for p in named_ports(list(g.pods))
            if str(p["name"]).startswith("api-")
        }
    )
    if r.proxy is not None:
        ports.append("http")
    return {
        "apiVersion": PODMONITOR_API,
        "kind": "PodMonitor",
        "metadata": {"name": r.options.prefix, "labels": r.labels("monitoring")},
        "spec": {
            "selector": {
                "matchLabels": {
                    "app.kubernetes.io/name": "servekit",
                    "app.kubernetes.io/instance": r.options.prefix,
                }
            },
            "podMetricsEndpoints": [{"port": name, "path": "/metrics"} for name in ports],
        },
    }


def _quantity_text(value: Fraction, memory: bool) -> str:
    if memory:
        for suffix in ("Ti", "Gi", "Mi", "Ki"):
            if value % BINARY[suffix] == 0:
                return f"{value // BINARY[suffix]}{suffix}"
        return str(int(value))
    if value.denominator == 1:
        return str(value.numerator)
    return f"{int(value * 1000)}m"


def pod_requests(template: dict[str, Any]) -> dict[str, Fraction]:
    """A pod template's effective requests: the containers' sum, or an init container's larger one."""
    total: dict[str, Fraction] = {}
    for c in template["spec"]["containers"]:
        for k, v in c.get("resources", {}).get("requests", {}).items():
            total[k] = total.get(k, Fraction(0)) + quantity_value(str(v))
    for c in template["spec"].get("initContainers", []):
        for k, v in c.get("resources", {}).get("requests", {}).items():
            total[k] = max(total.get(k, Fraction(0)), quantity_value(str(v)))
    return total


def volcano_podgroups(r: K8sRendering, lws: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The PodGroups LWS's Volcano provider makes for each group (``<lws>-<index>-<revision>``,
    ``minMember`` = size, ``minResources`` = a leader's and its workers' requests), with
    :data:`REVISION` standing for the template hash the controller chooses. Shown in the summary, checked
    against Volcano's schema in the tests."""
    out = []
    for obj in lws:
        tmpl = obj["spec"]["leaderWorkerTemplate"]
        size = tmpl["size"]
        leader = pod_requests(tmpl.get("leaderTemplate", tmpl["workerTemplate"]))
        worker = pod_requests(tmpl["workerTemplate"])
        total = {
            k: leader.get(k, Fraction(0)) + worker.get(k, Fraction(0)) * (size - 1)
            for k in {*leader, *worker}
        }
        resources = {
            k: _quantity_text(v, k in ("memory", "ephemeral-storage"))
            for k, v in sorted(total.items())
        }
        for i in range(obj["spec"]["replicas"]):
            spec: dict[str, Any] = {"minMember": size, "minResources": resources}
            if r.options.volcano_queue:
                spec["queue"] = r.options.volcano_queue
            out.append(
                {
                    "apiVersion": "scheduling.volcano.sh/v1beta1",
                    "kind": "PodGroup",
                    "metadata": {"name": f"{obj['metadata']['name']}-{i}-{REVISION}"},
                    "spec": spec,
                }
            )
    return out


@dataclass
class Manifests:
    """The rendering's objects by file, and what the summary reports about them."""

    files: dict[str, list[dict[str, Any]]]
    podgroups: list[dict[str, Any]] = field(default_factory=list)

    def objects(self) -> list[dict[str, Any]]:
        return [o for objs in self.files.values() for o in objs]


def manifests(r: K8sRendering, bundled: dict[str, bytes], budget: int = BUDGET) -> Manifests:
    """File name -> the objects it holds."""
    groups, bundle, proxy = configmaps(r, bundled, budget)
    cms = [o for m in groups.values() for o in m.objects]
    if bundle is not None:
        cms += bundle.objects
    if proxy is not None:
        cms += proxy.objects
    files: dict[str, list[dict[str, Any]]] = {"configmaps.yaml": cms}
    lws: list[dict[str, Any]] = []
    if r.options.kind == "disaggregatedset":
        files["disaggregatedset.yaml"] = [disaggregatedset(r, groups)]
        files["pod-services.yaml"] = pod_services(r)
    else:
        for g in r.groups:
            obj = leaderworkerset(r, g, groups[g.name])
            lws.append(obj)
            files[f"{g.name.removeprefix(r.options.prefix + '-')}.yaml"] = [obj]
    files["proxy.yaml"] = _proxy_objects(r, proxy)
    if r.options.podmonitor or r.options.autoscale != "off":
        files["podmonitor.yaml"] = [podmonitor(r)]
    if r.options.autoscale != "off":
        from servekit.platforms.k8s import elastic

        files["autoscaling.yaml"] = elastic.autoscalers(r)
    return Manifests(files, volcano_podgroups(r, lws) if r.options.gang == "volcano" else [])


def image_of(r: K8sRendering) -> str:
    """The engine image: ``k8s.image``, else the layout's when it names one ("" if not)."""
    if r.options.image:
        return r.options.image
    image = r.plan.image.strip()
    return image if image and " " not in image else ""


def kustomization(r: K8sRendering, resources: list[str]) -> dict[str, Any]:
    image = image_of(r)
    image, _, digest = image.partition("@")
    new_name, _, tag = image.rpartition(":") if ":" in image.rsplit("/", 1)[-1] else (image, "", "")
    entry: dict[str, str] = {"name": IMAGE_NAME}
    if new_name:
        entry["newName"] = new_name
        if digest:
            entry["digest"] = digest
        elif tag:
            entry["newTag"] = tag
    return {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": resources,
        "images": [entry],
    }


class _Dumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
    """Plain YAML (libyaml's emitter where present): no anchors, scripts as literal blocks."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _text(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Dumper.add_representer(str, _text)


def dump(*objects: dict[str, Any]) -> str:
    return "---\n".join(
        yaml.dump(o, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=100)
        for o in objects
    )


def _chosen(r: K8sRendering, name: str, default: str) -> str:
    return f"k8s.{name}" if name in r.options.given else f"default ({default})"


def _group_lines(r: K8sRendering) -> list[str]:
    lines = []
    image = image_of(r)
    lines.append(
        f"- image ({_chosen(r, 'image', 'the layout')}): {image}"
        if image
        else f"- image: the layout names none; give --set k8s.image=IMAGE (pods run {IMAGE_NAME})"
    )
    for g in r.groups:
        devices = len(g.leader().devices)
        res = engine_resources(r, g.leader())
        lines.append(
            f"- {g.name}: {g.role}, replicas {g.replicas} x size {g.size} "
            f"({', '.join(g.engines)}), {devices} devices per pod; per pod cpu {res['cpu']}, "
            f"memory {res['memory']}, ephemeral-storage {res['ephemeral-storage']}, "
            f"/dev/shm {res['shm']} (requests = limits: Guaranteed)"
        )
    if r.proxy is not None:
        o = r.options
        lines.append(
            f"- proxy: {o.proxy_replicas} pod{'s' if o.proxy_replicas > 1 else ''} "
            f"(Deployment replicas) of {o.proxy_workers} process"
            f"{'es (--workers)' if o.proxy_workers > 1 else ''}; per pod cpu {o.proxy_cpu}, "
            f"memory {o.proxy_memory} (requests = limits: Guaranteed)"
        )
    share = NODE_SHARES[r.layout.hardware.accelerator]
    lines.append(
        f"- resources: {_chosen(r, 'cpu', 'the node share')}: a whole node asks cpu {share.cpu}, "
        f"memory {share.memory_gi}Gi, ephemeral-storage {share.ephemeral_gi}Gi, shm "
        f"{share.shm_gi}Gi ({share.source}), scaled to a pod's devices"
    )
    return lines


def _host_lines(r: K8sRendering) -> list[str]:
    o = r.options
    mount = model_mount(r.plan.model_path)
    lines = [f"- model ({_chosen(r, 'model', 'host')}): {o.model.describe(mount)}"]
    if o.network == "pod":
        lines.append(
            "- network (k8s.network=pod): every pod on the pod network; NODE_IP (and "
            "HCCL_IF_IP where the scripts set it) is the pod IP (downward API), NODE_NIC "
            "(and the *_SOCKET_IFNAME) the interface holding it"
        )
    else:
        groups = ", ".join(r.host_network_groups) or "no group (none crosses pods)"
        lines.append(f"- network (k8s.network=host): hostNetwork on {groups}")
    if o.host_files:
        files = ", ".join(p for _, p, _ in ASCEND_HOST_FILES)
        lines.append(f"- host files (k8s.host_files=on): {files} mounted read-only")
    if r.rdma_groups and o.rdma is not None:
        lines.append(
            f"- RDMA ({_chosen(r, 'rdma', 'on for GPU KV')}): {o.rdma[0]}: {o.rdma[1]} and "
            f"IPC_LOCK on {', '.join(r.rdma_groups)}"
        )
    return lines


def _placement_lines(r: K8sRendering, made: Manifests | None) -> list[str]:
    o = r.options
    placement = []
    if o.gang == "volcano":
        placement.append(
            "schedulerName volcano (LWS must run with gangSchedulingManagement volcano)"
        )
    if o.exclusive_topology:
        placement.append(f"one group per {o.exclusive_topology}")
    if o.node_selector:
        placement.append("nodeSelector " + ",".join(f"{k}={v}" for k, v in o.node_selector))
    if o.tolerations:
        placement.append(f"{len(o.tolerations)} tolerations")
    lines = [f"- placement: {'; '.join(placement) or 'the default scheduler, no constraint'}"]
    for pg in made.podgroups if made is not None else []:
        amounts = ", ".join(f"{k} {v}" for k, v in pg["spec"]["minResources"].items())
        lines.append(
            f"- gang: LWS makes PodGroup {pg['metadata']['name'].removesuffix(REVISION)}<revision>: minMember "
            f"{pg['spec']['minMember']}, minResources {amounts}"
        )
    return lines


def _object_lines(r: K8sRendering, made: Manifests | None) -> list[str]:
    lines = [f"- Pod Security Standards: the pods need the {r.level} level"]
    lines += [f"  - {q.line()}" for q in r.requirements]
    if made is not None:
        sizes = [
            (str(obj["metadata"]["name"]), last_applied_bytes(obj))
            for obj in made.objects()
            if obj["kind"] == "ConfigMap"
        ]
        biggest = max(sizes, key=lambda s: s[1])
        lines.append(
            f"- ConfigMaps: {len(sizes)}, the largest {biggest[0]} at {biggest[1]} of "
            f"kubectl apply's {ANNOTATION_CAP} annotation bytes"
        )
    wiring = r.proxy.proxy if r.proxy is not None else None
    if wiring is not None and wiring.bootstrap and not r.options.elastic:
        ids = ", ".join(b.engine_id for b in wiring.bootstrap)
        lines.append(
            f"- bootstrap mode: the prefills' engine ids are fixed ({ids}); vLLM's "
            "MooncakeConnector keeps the address it learned for an id for good, so after a "
            "prefill pod is made again (kubectl delete pod, LWS recreating its group) every "
            "decoder that met it fails the requests routed to that prefill (each after "
            "VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT + 60 s) until the decoder restarts: restart "
            "the decode pods then, or render with k8s.elastic=on (an id per pod incarnation)"
        )
    if r.options.elastic:
        from servekit.platforms.k8s import elastic

        o = r.options
        secret, key = elastic.admin_secret(o)
        lines.append(
            "- elastic: any group index runs (kubectl scale lws/NAME); the proxy discovers "
            f"the pods (ServiceAccount {elastic.service_account(o.prefix)}); each engine pod's "
            f"preStop drains it through {elastic.peers_service(o.prefix)} within "
            f"{elastic.hook_wait(o)} s (grace period {elastic.grace_period(o)} s); create the "
            f"admin key first: kubectl create secret generic {secret} --from-literal={key}=..."
        )
        if o.autoscale != "off":
            lines.append(
                f"- autoscale: {o.autoscale} on each LeaderWorkerSet, 1 to {o.max_replicas} "
                f"instances, from {elastic.autoscale_reads(o)}"
            )
    return lines


def _change_lines(r: K8sRendering) -> list[str]:
    from servekit.platforms.k8s.wiring import REASONS

    by_reason: dict[str, list[Change]] = {}
    for c in r.changes:
        by_reason.setdefault(c.reason, []).append(c)
    lines = [f"Differences from the ModelArts rendering ({len(r.changes)} values):"]
    for reason, items in by_reason.items():
        lines.append(f"- {len(items)} x {reason}: {REASONS[reason]}; e.g. {items[0].line()}")
    lines.append(
        "- address-derived: NODE<k>_IP of a DP master is the leader pod's IP "
        "(LWS_LEADER_ADDRESS on workers), NODE_IP the pod IP, NODE_NIC its interface"
    )
    return lines


def summary(r: K8sRendering, made: Manifests | None = None) -> str:
    """What the rendering holds and what differs from ModelArts, for k8s.md and the console."""
    o = r.options
    lines = [f"Kubernetes ({o.kind}, accelerator {o.accelerator or 'none'}):"]
    lines += _group_lines(r) + _host_lines(r) + _placement_lines(r, made)
    lines += _object_lines(r, made) + _change_lines(r)
    return "\n".join(lines) + "\n"


def render_k8s(
    plan: Plan,
    layout: Layout,
    options: K8sSettings,
    bundled: dict[str, bytes],
    budget: int = BUDGET,
) -> dict[str, str | bytes]:
    """Every file of a Kubernetes rendering, by relative path."""
    r = decide(plan, layout, options)
    out: dict[str, str | bytes] = {}
    made = manifests(r, bundled, budget)
    for name, objs in made.files.items():
        out[name] = dump(*objs)
    out["kustomization.yaml"] = dump(kustomization(r, list(made.files)))
    out["k8s.md"] = summary(r, made)
    return out
