"""A Kubernetes dry run on this machine: the rendered manifests, each pod as processes.

What the cluster does, done here with nothing faked but the engine and the network:

1. render the layout for Kubernetes (``servekit render NAME --target k8s``) and read
   its manifests back (the ConfigMap, each LeaderWorkerSet or the DisaggregatedSet's
   roles, the proxy's Deployment and Service);
2. expand them the way the controllers do: ``replicas`` groups of ``size`` pods per
   LeaderWorkerSet (named ``<lws>-<i>`` and ``<lws>-<i>-<w>``), one pod per
   Deployment replica; each pod gets its own loopback address (127.0.0.2, ...);
3. give each pod the environment LWS and the kubelet inject: its template's ``env``
   with the downward API resolved (``status.podIP``, the group-index label),
   ``LWS_LEADER_ADDRESS`` (``<lws>-<i>.<lws>.<namespace>``), ``LWS_GROUP_SIZE``,
   ``LWS_WORKER_INDEX``, ``HOSTNAME``; the ConfigMap's files in a folder standing in
   for the volume (its mount path rewritten in the command);
4. DNS: every pod's name through its LWS's headless Service and every Service name
   (short and qualified) resolve to the pod's address through a hosts table that a
   ``sitecustomize`` on ``PYTHONPATH`` serves to ``socket.getaddrinfo`` and
   ``gethostbyname`` (every process of a pod is Python or asks ``python3``); a
   Service resolves straight to its one ready pod (no virtual IP, no kube-proxy);
5. a pod's own network namespace is played by ``BIND_HOST`` (its address) and its
   filesystem by ``WORK_DIR`` (a folder per pod); ``/dev/shm``, accelerators,
   probes and ``hostNetwork`` are not emulated; ``servekit sim serve`` is ``vllm``
   unless ``engine="vllm"`` (the real engine on the CPU, for ``local/*``).

Then every API server answers ``/health`` and the proxy sees every backend;
``servekit verify NAME --target URL --pods POD=IP,...`` checks it as a real one.
"""

from __future__ import annotations

import base64
import contextlib
import json
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from servekit.catalog import load
from servekit.local import engine_env, find_broken, port_is_free
from servekit.platforms.api import render_target
from servekit.platforms.fake import (
    DryCluster,
    Node,
    loopback_block,
    node_env,
    simulated_vllm,
    stop_nodes,
    wait_ready,
)
from servekit.platforms.k8s.attach import process_hosts
from servekit.platforms.k8s.build import GROUP_INDEX_LABEL, GROUP_LABEL
from servekit.render import build_plan

NAMESPACE = "default"
DNS_SHIM = '''"""servekit's fake cluster DNS: names in SERVEKIT_FAKE_HOSTS (JSON name -> address)."""
import json
import os
import socket

try:
    with open(os.environ["SERVEKIT_FAKE_HOSTS"], encoding="utf-8") as f:
        _HOSTS = json.load(f)
except (KeyError, OSError, ValueError):
    _HOSTS = {}
_getaddrinfo = socket.getaddrinfo
_gethostbyname = socket.gethostbyname


def _name(host):
    if isinstance(host, bytes):
        host = host.decode("ascii", "replace")
    if isinstance(host, str):
        return _HOSTS.get(host.rstrip(".").lower(), host)
    return host


def getaddrinfo(host, *args, **kwargs):
    return _getaddrinfo(_name(host), *args, **kwargs)


def gethostbyname(host):
    return _gethostbyname(_name(host))


socket.getaddrinfo = getaddrinfo
socket.gethostbyname = gethostbyname

try:  # uvloop (the proxy's and vLLM's loop) resolves in libuv, not through socket
    import uvloop
except ImportError:
    uvloop = None
if uvloop is not None:

    class _Loop(uvloop.Loop):
        async def getaddrinfo(self, host, *args, **kwargs):
            return await super().getaddrinfo(_name(host), *args, **kwargs)

    uvloop.Loop = _Loop
'''


@dataclass
class FakePod:
    """One pod: its name, address, container command, environment and labels.

    ``key`` is the name servekit gives it (``<group>-<i>[-<w>]``, what ``--pods``
    takes); it equals ``name`` but for a DisaggregatedSet's pods, whose
    LeaderWorkerSets the controller names with a revision.
    """

    name: str
    address: str
    command: list[str]
    env: dict[str, str]
    dns: tuple[str, ...]
    ports: tuple[int, ...]
    labels: dict[str, str]
    key: str


def _names(short: str) -> tuple[str, ...]:
    return (
        short,
        f"{short}.{NAMESPACE}",
        f"{short}.{NAMESPACE}.svc",
        f"{short}.{NAMESPACE}.svc.cluster.local",
    )


def _container_env(template: dict[str, Any], pod_ip: str, group: int) -> dict[str, str]:
    """The container's env with the downward API resolved (what the kubelet injects)."""
    out: dict[str, str] = {}
    for item in template["spec"]["containers"][0].get("env", []):
        if "value" in item:
            out[item["name"]] = str(item["value"])
            continue
        path = item["valueFrom"]["fieldRef"]["fieldPath"]
        if path == "status.podIP":
            out[item["name"]] = pod_ip
        elif path == f"metadata.labels['{GROUP_INDEX_LABEL}']":
            out[item["name"]] = str(group)
        else:
            raise ValueError(f"the fake cluster does not know fieldRef {path}")
    return out


def _command(template: dict[str, Any], volumes: dict[str, Path]) -> list[str]:
    container = template["spec"]["containers"][0]
    mounts = {
        m["mountPath"]: volumes[m["name"]]
        for m in container.get("volumeMounts", [])
        if m["name"] in volumes
    }
    out = []
    for word in container["command"]:
        here = word
        for path, local in mounts.items():
            if word == path or word.startswith(path + "/"):
                here = str(local) + word[len(path) :]
        out.append(here)
    return out


def _ports(template: dict[str, Any]) -> tuple[int, ...]:
    return tuple(p["containerPort"] for p in template["spec"]["containers"][0].get("ports", []))


def _lws_pods(
    name: str, spec: dict[str, Any], volumes: dict[str, Path], ips: Iterator[str]
) -> list[FakePod]:
    """The pods LWS creates for one LeaderWorkerSet (names, env and labels as LWS sets them)."""
    tmpl = spec["leaderWorkerTemplate"]
    size = tmpl.get("size", 1)
    pods = []
    for g in range(spec.get("replicas", 1)):
        for w in range(size):
            template = (
                tmpl.get("leaderTemplate", tmpl["workerTemplate"])
                if w == 0
                else tmpl["workerTemplate"]
            )
            pod = f"{name}-{g}" if w == 0 else f"{name}-{g}-{w}"
            ip = next(ips)
            env = _container_env(template, ip, g)
            env.update(
                LWS_LEADER_ADDRESS=f"{name}-{g}.{name}.{NAMESPACE}",
                LWS_GROUP_SIZE=str(size),
                LWS_WORKER_INDEX=str(w),
                HOSTNAME=pod,
            )
            labels = {
                **template["metadata"].get("labels", {}),
                "leaderworkerset.sigs.k8s.io/name": name,
                GROUP_INDEX_LABEL: str(g),
                "leaderworkerset.sigs.k8s.io/worker-index": str(w),
            }
            group = labels.get(GROUP_LABEL, name)
            key = f"{group}-{g}" if w == 0 else f"{group}-{g}-{w}"
            command = _command(template, volumes)
            dns = _names(f"{pod}.{name}")
            pods.append(FakePod(pod, ip, command, env, dns, _ports(template), labels, key))
    return pods


def _deployment_pods(
    obj: dict[str, Any], volumes: dict[str, Path], ips: Iterator[str]
) -> list[FakePod]:
    template = obj["spec"]["template"]
    pods = []
    for r in range(obj["spec"].get("replicas", 1)):
        ip = next(ips)
        pod = f"{obj['metadata']['name']}-fake{r}"
        env = {**_container_env(template, ip, 0), "HOSTNAME": pod}
        labels = dict(template["metadata"]["labels"])
        pods.append(
            FakePod(pod, ip, _command(template, volumes), env, (), _ports(template), labels, pod)
        )
    return pods


def _workload_pods(
    objects: list[dict[str, Any]], volumes: dict[str, Path], ips: Iterator[str]
) -> list[FakePod]:
    """Every pod the controllers would create, in manifest order (the proxy last).

    A DisaggregatedSet's child LeaderWorkerSets are named as its controller names them,
    ``<set>-<slice>-<revision>-<role>`` (revision ``rev0`` here), so nothing may rely on
    those names. Each Service's names resolve to the first pod its selector matches.
    """
    pods: list[FakePod] = []
    for obj in objects:
        kind, name = obj["kind"], obj["metadata"]["name"]
        if kind == "LeaderWorkerSet":
            pods += _lws_pods(name, obj["spec"], volumes, ips)
        elif kind == "DisaggregatedSet":
            for role in obj["spec"]["roles"]:
                pods += _lws_pods(f"{name}-0-rev0-{role['name']}", role["spec"], volumes, ips)
    for obj in objects:
        if obj["kind"] == "Deployment":
            pods += _deployment_pods(obj, volumes, ips)
    for obj in objects:
        if obj["kind"] != "Service":
            continue
        sel = obj["spec"]["selector"]
        match = next((p for p in pods if all(p.labels.get(k) == v for k, v in sel.items())), None)
        if match is not None:
            match.dns = match.dns + _names(obj["metadata"]["name"])
    return pods


def _write_configmap(obj: dict[str, Any], folder: Path) -> None:
    folder.mkdir(parents=True)
    for key, text in obj.get("data", {}).items():
        (folder / key).write_text(text)
    for key, blob in obj.get("binaryData", {}).items():
        (folder / key).write_bytes(base64.b64decode(blob))
    for path in folder.iterdir():
        path.chmod(0o755)


def _pods_are_free(count: int, ports: list[tuple[int, int]]) -> Callable[[str], bool]:
    """Whether every (pod index, port) is free under a 127.0.N prefix."""

    def check(prefix: str) -> bool:
        return count + 2 <= 255 and all(
            port_is_free(port, f"{prefix}.{2 + i}", reuse=True) for i, port in ports
        )

    return check


@dataclass
class K8sDryCluster(DryCluster):
    """A running fake Kubernetes cluster: the proxy Service's endpoint and each pod's address."""

    pods: dict[str, str] | None = None
    pods_arg: str = ""
    reference_pods: str = ""

    def verify_args(self) -> list[str]:
        """``servekit verify NAME --target URL --pods POD=IP,... --logs DIR``."""
        args = [
            self.layout,
            "--target",
            self.entry_url,
            "--pods",
            self.pods_arg,
            "--logs",
            str(self.logs),
        ]
        return args + (["--reference", self.reference_url] if self.reference_url else [])


def _layout_pods(
    name: str, root: Path, tag: str, kind: str, catalog: str | None
) -> tuple[list[dict[str, Any]], Path]:
    _, files = render_target(name, "k8s", [], catalog, {"kind": kind, "prefix": tag})
    folder = root / tag
    objects: list[dict[str, Any]] = []
    for rel, text in files.items():
        if rel.endswith(".yaml") and rel != "kustomization.yaml" and isinstance(text, str):
            objects += [
                o
                for o in yaml.load_all(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
                if o
            ]
    for obj in objects:
        if obj["kind"] == "ConfigMap":
            _write_configmap(obj, folder / "configmap")
    return objects, folder / "configmap"


def _real_engine_env(root: Path) -> dict[str, str]:
    """Real vLLM here: the torch companions that cannot load are hidden, as ``up`` does.

    ``up``'s engine hook is a ``sitecustomize`` that runs the next one on the path, so
    it goes first and the fake DNS's runs after it.
    """
    return engine_env(find_broken(), pythonpath=str(root / "dns"))


def _env(root: Path, pod: FakePod, speed: float | None, bin_dir: Path) -> dict[str, str]:
    injected = {
        "PYTHONPATH": str(root / "dns"),
        "SERVEKIT_FAKE_HOSTS": str(root / "dns" / "hosts.json"),
        "LEADER_RESOLVE_TIMEOUT": "60",
        **pod.env,
    }
    return node_env(root, pod.name, pod.address, speed=speed, bin_dir=bin_dir, platform=injected)


def _place(
    cluster: K8sDryCluster,
    rendered: list[tuple[str, str, list[dict[str, Any]], Path]],
    pods_of: dict[str, list[FakePod]],
    catalog: str | None,
) -> list[tuple[str, dict[str, int]]]:
    """Fill in where each layout's pods are; the URLs to wait for, with the proxy's counts."""
    targets: list[tuple[str, dict[str, int]]] = []
    for tag, layout_name, _, _ in rendered:
        plan = build_plan(load(layout_name, catalog).layout)
        addresses = {p.key: p.address for p in pods_of[tag]}
        by_process = process_hosts(plan, addresses, tag)
        proxy_pod = next((p for p in pods_of[tag] if p.name.startswith(f"{tag}-proxy")), None)
        for proc in plan.api_processes():
            host = (
                proxy_pod.address if proc.kind == "proxy" and proxy_pod else by_process[proc.name]
            )
            counts = proc.proxy.backend_counts() if proc.proxy else {}
            targets.append((f"http://{host}:{proc.api_port}", counts))
        entry = plan.process(plan.entry)
        entry_host = proxy_pod.address if proxy_pod else by_process[entry.name]
        url = f"http://{entry_host}:{entry.api_port}"
        engine_pods = ",".join(f"{p.key}={p.address}" for p in pods_of[tag] if p is not proxy_pod)
        nodes = [
            Node(p.name, p.address, cluster.root / tag / "configmap" / "pod.sh")
            for p in pods_of[tag]
        ]
        if tag == "sk":
            cluster.entry_url, cluster.pods_arg, cluster.nodes = url, engine_pods, nodes
            cluster.pods = addresses
        else:
            cluster.reference_url, cluster.reference_pods, cluster.reference = (
                url,
                engine_pods,
                nodes,
            )
    return targets


@contextlib.contextmanager
def k8s_dry_cluster(
    name: str,
    *,
    speed: float | None = None,
    catalog: str | None = None,
    ready_timeout_s: float = 180.0,
    reference: bool = True,
    kind: str = "leaderworkerset",
    engine: str = "sim",
    cwd: Path | None = None,
    keep: bool = False,
) -> Iterator[K8sDryCluster]:
    """Render for Kubernetes, start every pod of the manifests, wait; tear down on exit.

    ``engine="vllm"``: the pods' ``vllm`` is the real one on this machine's PATH (a
    ``local/*`` layout: real vLLM on the CPU); else ``servekit sim serve``. ``cwd``:
    the pods' working folder (an image's WORKDIR; where a relative model path is).
    """
    layout = load(name, catalog).layout
    ref_name = layout.verify.reference if reference else None
    root = Path(tempfile.mkdtemp(prefix="servekit-k8s-"))
    held = contextlib.ExitStack()
    try:
        for sub in ("bin", "dns", "home", "tmp", "logs", "work"):
            (root / sub).mkdir()
        bin_dir = root / "bin"
        if engine == "sim":
            simulated_vllm(bin_dir)
        (root / "dns" / "sitecustomize.py").write_text(DNS_SHIM)
        tags = [("sk", name), *([("ref", ref_name)] if ref_name else [])]
        rendered = [(tag, n, *_layout_pods(n, root, tag, kind, catalog)) for tag, n in tags]
        probe = iter(f"127.0.0.{i}" for i in range(2, 255))
        trial = [
            pod
            for _, _, objects, volume in rendered
            for pod in _workload_pods(objects, {"scripts": volume}, probe)
        ]
        ports = [(i, p) for i, pod in enumerate(trial) for p in pod.ports]
        prefix = held.enter_context(
            loopback_block(_pods_are_free(len(trial), ports), "the pods' ports")
        )
        ips = iter(f"{prefix}.{i}" for i in range(2, 255))
        pods_of: dict[str, list[FakePod]] = {}
        for tag, _, objects, volume in rendered:
            pods_of[tag] = _workload_pods(objects, {"scripts": volume}, ips)
        hosts = {n: p.address for pods in pods_of.values() for p in pods for n in p.dns}
        (root / "dns" / "hosts.json").write_text(json.dumps(hosts, indent=1))
        cluster = K8sDryCluster(name, root, [], "", root / "logs")
        targets = _place(cluster, rendered, pods_of, catalog)
        started = time.perf_counter()
        all_nodes = [*cluster.nodes, *cluster.reference]
        extra = _real_engine_env(root) if engine == "vllm" else {}
        env_of = {
            p.name: (p, {**_env(root, p, speed, bin_dir), **extra})
            for pods in pods_of.values()
            for p in pods
        }
        try:
            for node in all_nodes:
                pod, env = env_of[node.pod]
                with node.output.open("wb") as out:
                    node.popen = subprocess.Popen(
                        pod.command,
                        env=env,
                        cwd=cwd or root,
                        stdin=subprocess.DEVNULL,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
            wait_ready(targets, all_nodes, ready_timeout_s, root / "logs")
            cluster.started_s = time.perf_counter() - started
            yield cluster
        finally:
            stop_nodes(all_nodes)
    finally:
        held.close()
        if not keep:
            shutil.rmtree(root, ignore_errors=True)
