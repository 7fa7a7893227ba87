"""The pod templates: what an engine or proxy pod mounts, asks for, exposes and is probed on.

One function per concern, each from the rendering's decisions (:class:`.build.K8sRendering`):

- volumes: the pod's ConfigMaps as one projected volume at ``/servekit``, ``/dev/shm``
  (a memory emptyDir of the chosen size), the model at the layout's model path (a
  hostPath, a claim, or a download by the ``fetch-model`` init container), the Ascend
  host files, and a scratch folder where ``pod.sh`` joins a file cut into parts;
- resources: the accelerator, cpu, memory and ephemeral storage with requests equal
  to limits in every container (init containers too), so engine pods are Guaranteed;
  the RDMA resource and ``IPC_LOCK`` for GPU pods that move KV;
- ports: every port any pod of the template binds, named by what it is
  (``api-9900``, ``rpc-10521``, ``kv-30000``, ``ev-5557``);
- probes: startup, readiness and liveness on every API port the pod serves
  (``httpGet`` for one, a bash ``/dev/tcp`` check of each for several);
- a content hash of the mounted ConfigMaps in the template, so a changed script is a
  changed template and LeaderWorkerSet rolls the group.
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, Any

from servekit.platforms.k8s.groups import Group, Pod
from servekit.platforms.k8s.settings import ASCEND_HOST_FILES, WORKDIR, pod_resources
from servekit.render import ProcessPlan

if TYPE_CHECKING:
    from servekit.platforms.k8s.rendering import K8sRendering

IMAGE_NAME = "servekit-engine"
MOUNT = "/servekit"
RUN_DIR = "/servekit-run"
SCRIPTS_VOLUME = "servekit"
MODEL_VOLUME = "model"
HASH_ANNOTATION = "servekit.io/config-hash"
GROUP_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/group-index"
GROUP_LABEL = "servekit.io/group"
STARTUP_PERIOD_S = 10
STARTUP_FAILURES = 360  # one hour for a large model's load and graph capture
PROXY_STARTUP_FAILURES = 30
READINESS = {"periodSeconds": 5, "timeoutSeconds": 5, "failureThreshold": 3}
LIVENESS = {"periodSeconds": 15, "timeoutSeconds": 10, "failureThreshold": 4}
PORT_KINDS = (("api", "api_port"), ("rpc", "rpc_port"), ("kv", "kv_port"), ("ev", "kv_events_port"))
HTTP_CHECK = (
    'for p in {ports}; do exec 3<>"/dev/tcp/${{POD_IP}}/$p" || exit 1; '
    'printf "GET /health HTTP/1.0\\r\\nHost: %s\\r\\n\\r\\n" "${{POD_IP}}" >&3; '
    "IFS= read -r -t 5 line <&3 || exit 1; exec 3<&-; "
    'case "$line" in "HTTP/"*" 200"*) ;; *) exit 1 ;; esac; done'
)


def model_mount(model_path: str) -> str:
    """Where the model is mounted: the layout's path, under the working folder if relative."""
    if model_path.startswith("/"):
        return model_path
    while model_path.startswith("./"):
        model_path = model_path[2:]
    return f"{WORKDIR}/{model_path}"


def _bound(p: ProcessPlan) -> list[tuple[str, int]]:
    """(kind, port) of every port a process listens on: its API, DP rpc and KV-events
    ports, and its KV side-channel window (``kv_port + dp_rank x tp + tp_rank`` for each
    of its ranks, as the Mooncake and NIXL connectors bind, and render/rules.py checks)."""
    out = [(kind, getattr(p, attr)) for kind, attr in PORT_KINDS if getattr(p, attr) is not None]
    if p.kv_port is not None and p.kind == "engine":
        first = p.dp_rank or 0
        for rank in range(first, first + p.dp_local):
            out += [("kv", p.kv_port + rank * p.tp + t) for t in range(p.tp)]
    return out


def named_ports(pods: list[Pod]) -> list[dict[str, Any]]:
    """Every port the pods of one template bind, each named once by what it is."""
    names: dict[int, str] = {}
    for pod in pods:
        for p in pod.processes:
            for kind, port in _bound(p):
                names.setdefault(port, f"{kind}-{port}")
    return [
        {"name": names[port], "containerPort": port, "protocol": "TCP"} for port in sorted(names)
    ]


def probe(ports: tuple[int, ...], failures: int, timing: dict[str, int]) -> dict[str, Any]:
    """``/health`` of every API port: ``httpGet`` for one, a bash check of each for several."""
    if len(ports) == 1:
        action: dict[str, Any] = {"httpGet": {"path": "/health", "port": ports[0]}}
    else:
        script = HTTP_CHECK.format(ports=" ".join(str(p) for p in ports))
        action = {"exec": {"command": ["/bin/bash", "-c", script]}}
    return {**action, **timing, "failureThreshold": failures}


def _probes(ports: tuple[int, ...], startup_failures: int) -> dict[str, Any]:
    if not ports:
        return {}
    startup = {"periodSeconds": STARTUP_PERIOD_S, "timeoutSeconds": 5}
    return {
        "startupProbe": probe(ports, startup_failures, startup),
        "readinessProbe": probe(ports, READINESS["failureThreshold"], READINESS),
        "livenessProbe": probe(ports, LIVENESS["failureThreshold"], LIVENESS),
    }


def _guaranteed(values: dict[str, str]) -> dict[str, Any]:
    return {"requests": dict(values), "limits": dict(values)}


def _projected(names: list[str]) -> dict[str, Any]:
    return {
        "name": SCRIPTS_VOLUME,
        "projected": {
            "defaultMode": 0o755,
            "sources": [{"configMap": {"name": n}} for n in names],
        },
    }


def _base_env(r: K8sRendering, engine: bool, joins: bool) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = [
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
    ]
    if engine:
        path = f"metadata.labels['{GROUP_INDEX_LABEL}']"
        env.append({"name": "SERVEKIT_GROUP_INDEX", "valueFrom": {"fieldRef": {"fieldPath": path}}})
    if joins:
        env.append({"name": "SERVEKIT_RUN_DIR", "value": RUN_DIR})
    return env


def _model_volumes(
    r: K8sRendering,
) -> tuple[list[dict[str, Any]], dict[str, Any], dict[str, Any] | None]:
    """The model's volume(s), the engine's mount of it, and the download init container."""
    s = r.options.model
    mount = model_mount(r.plan.model_path)
    engine_mount: dict[str, Any] = {"name": MODEL_VOLUME, "mountPath": mount, "readOnly": True}
    volume: dict[str, Any]
    if s.kind == "host":
        volume = {"name": MODEL_VOLUME, "hostPath": {"path": s.path or mount, "type": "Directory"}}
        return [volume], engine_mount, None
    if s.kind == "pvc":
        volume = {
            "name": MODEL_VOLUME,
            "persistentVolumeClaim": {"claimName": s.claim, "readOnly": True},
        }
        if s.sub_path:
            engine_mount["subPath"] = s.sub_path
        return [volume], engine_mount, None
    cache = r.options.model_cache
    if cache is None:
        volume = {
            "name": MODEL_VOLUME,
            "emptyDir": {"sizeLimit": r.options.model_size},
        }
    else:
        volume = {"name": MODEL_VOLUME, "persistentVolumeClaim": {"claimName": cache.claim}}
        if cache.sub_path:
            engine_mount["subPath"] = cache.sub_path
    fetch_mount = {k: v for k, v in engine_mount.items() if k != "readOnly"}
    env: list[dict[str, Any]] = []
    if r.options.model_secret is not None:
        name, key = r.options.model_secret
        env.append({"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": name, "key": key}}})
    if r.options.model_endpoint:
        env.append({"name": "HF_ENDPOINT", "value": r.options.model_endpoint})
    init: dict[str, Any] = {
        "name": "fetch-model",
        "image": IMAGE_NAME,
        "command": ["python3", f"{MOUNT}/servekit_fetch_model.py", s.repo, s.revision, mount],
        "env": env,
        "volumeMounts": [
            {"name": SCRIPTS_VOLUME, "mountPath": MOUNT, "readOnly": True},
            fetch_mount,
        ],
    }
    return [volume], engine_mount, init


def _host_files(r: K8sRendering) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    if not r.options.host_files:
        return [], []
    volumes = [{"name": n, "hostPath": {"path": p, "type": t}} for n, p, t in ASCEND_HOST_FILES]
    mounts = [{"name": n, "mountPath": p, "readOnly": True} for n, p, _ in ASCEND_HOST_FILES]
    return volumes, mounts


def engine_resources(r: K8sRendering, pod: Pod) -> dict[str, str]:
    """cpu, memory, ephemeral storage and shm of the group's pods (the node's share)."""
    hw = r.layout.hardware
    return pod_resources(r.options, hw.accelerator, len(pod.devices), hw.devices_per_node)


def _with_size(quantity: str, extra: str) -> str:
    """``quantity`` plus ``extra`` when both are binary (Gi/Mi/Ti), else ``quantity``."""
    units = {"Mi": 1, "Gi": 1024, "Ti": 1024 * 1024}

    def mi(q: str) -> int | None:
        for unit, factor in units.items():
            if q.endswith(unit) and q[: -len(unit)].isdigit():
                return int(q[: -len(unit)]) * factor
        return None

    a, b = mi(quantity), mi(extra)
    if a is None or b is None:
        return quantity
    total = a + b
    return f"{total // 1024}Gi" if total % 1024 == 0 else f"{total}Mi"


def _engine_limits(
    r: K8sRendering, group: Group, first: Pod, sizes: dict[str, str]
) -> dict[str, str]:
    """The engine container's requests (= limits): the node share, the accelerator, RDMA."""
    resources = {k: v for k, v in sizes.items() if k != "shm"}
    if r.options.model.kind == "hf" and r.options.model_cache is None:
        resources["ephemeral-storage"] = _with_size(
            resources["ephemeral-storage"], r.options.model_size
        )
    if r.options.accelerator and first.devices:
        resources[r.options.accelerator] = str(len(first.devices))
    if r.options.rdma is not None and group.name in r.rdma_groups:
        resources[r.options.rdma[0]] = str(r.options.rdma[1])
    return resources


def engine_template(
    r: K8sRendering,
    group: Group,
    pods: list[Pod],
    *,
    configmaps: list[str],
    joins: bool,
    digest: str,
) -> dict[str, Any]:
    """The pod template of one LWS template (the leader's, or every worker's)."""
    first = pods[0]
    sizes = engine_resources(r, first)
    resources = _engine_limits(r, group, first, sizes)
    model_volumes, model_mount_spec, fetch = _model_volumes(r)
    host_volumes, host_mounts = _host_files(r)
    mounts: list[dict[str, Any]] = [
        {"name": SCRIPTS_VOLUME, "mountPath": MOUNT, "readOnly": True},
        {"name": "dshm", "mountPath": "/dev/shm"},
        model_mount_spec,
        *host_mounts,
    ]
    volumes: list[dict[str, Any]] = [
        _projected(configmaps),
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": sizes["shm"]}},
        *model_volumes,
        *host_volumes,
    ]
    if joins:
        mounts.append({"name": "run", "mountPath": RUN_DIR})
        volumes.append({"name": "run", "emptyDir": {"sizeLimit": "1Gi"}})
    container: dict[str, Any] = {
        "name": "engine",
        "image": IMAGE_NAME,
        "command": ["/bin/bash", f"{MOUNT}/pod.sh", group.name],
        "env": _base_env(r, True, joins),
        "ports": named_ports(pods),
        "resources": _guaranteed(resources),
        "volumeMounts": mounts,
        **_probes(first.api_ports, STARTUP_FAILURES),
    }
    if not r.plan.model_path.startswith("/"):
        container["workingDir"] = WORKDIR
    if r.options.rdma is not None and group.name in r.rdma_groups:
        container["securityContext"] = {"capabilities": {"add": ["IPC_LOCK"]}}
    spec: dict[str, Any] = {"containers": [container], "volumes": volumes}
    if fetch is not None:
        fetch["resources"] = _guaranteed({"cpu": sizes["cpu"], "memory": sizes["memory"]})
        if not r.plan.model_path.startswith("/"):
            fetch["workingDir"] = WORKDIR
        spec["initContainers"] = [fetch]
    if r.options.preflight:  # after the model's download: it checks the model too
        spec.setdefault("initContainers", []).append(preflight_container(container, group.name))
    if group.name in r.host_network_groups:
        spec["hostNetwork"] = True
        spec["dnsPolicy"] = "ClusterFirstWithHostNet"
    if r.options.gang == "volcano":
        spec["schedulerName"] = "volcano"
    if r.options.node_selector:
        spec["nodeSelector"] = dict(r.options.node_selector)
    if r.options.tolerations:
        spec["tolerations"] = [t.as_k8s() for t in r.options.tolerations]
    _pull_secrets(r, spec)
    labels = {**r.labels(group.role), GROUP_LABEL: group.name}
    return {
        "metadata": {"labels": labels, "annotations": {HASH_ANNOTATION: digest}},
        "spec": spec,
    }


def preflight_container(engine: dict[str, Any], group: str) -> dict[str, Any]:
    """The engine container as the ``preflight`` initContainer: the same image,
    environment, mounts, resources and devices (the kubelet hands an init container's
    devices on to the pod's containers), no ports or probes; it runs ``pod.sh GROUP
    preflight`` (servekit.preflight) and ends."""
    left_out = ("ports", "readinessProbe", "startupProbe", "livenessProbe")
    init = {k: v for k, v in engine.items() if k not in left_out}
    init["name"] = "preflight"
    init["command"] = ["/bin/bash", f"{MOUNT}/pod.sh", group, "preflight"]
    return init


def _pull_secrets(r: K8sRendering, spec: dict[str, Any]) -> None:
    if r.options.image_pull_secrets:
        spec["imagePullSecrets"] = [{"name": n} for n in r.options.image_pull_secrets]


def proxy_template(
    r: K8sRendering, api_port: int, configmaps: list[str], joins: bool, digest: str
) -> dict[str, Any]:
    """The proxy Deployment's pod template."""
    resources = {
        "cpu": r.options.proxy_cpu,
        "memory": r.options.proxy_memory,
        "ephemeral-storage": "1Gi",
    }
    mounts: list[dict[str, Any]] = [{"name": SCRIPTS_VOLUME, "mountPath": MOUNT, "readOnly": True}]
    volumes: list[dict[str, Any]] = [_projected(configmaps)]
    if joins:
        mounts.append({"name": "run", "mountPath": RUN_DIR})
        volumes.append({"name": "run", "emptyDir": {"sizeLimit": "1Gi"}})
    container: dict[str, Any] = {
        "name": "proxy",
        "image": IMAGE_NAME,
        "command": ["/bin/bash", f"{MOUNT}/pod.sh", "proxy"],
        "env": _base_env(r, False, joins),
        "ports": [{"name": "http", "containerPort": api_port, "protocol": "TCP"}],
        "resources": _guaranteed(resources),
        "volumeMounts": mounts,
        **_probes((api_port,), PROXY_STARTUP_FAILURES),
    }
    spec: dict[str, Any] = {"containers": [container], "volumes": volumes}
    _pull_secrets(r, spec)
    labels = r.labels("proxy")
    return {
        "metadata": {"labels": labels, "annotations": {HASH_ANNOTATION: digest}},
        "spec": spec,
    }


def fetch_command_text(repo: str, revision: str, mount: str) -> str:
    """The init container's command as a shell line, for the summary."""
    return shlex.join(["python3", f"{MOUNT}/servekit_fetch_model.py", repo, revision, mount])
