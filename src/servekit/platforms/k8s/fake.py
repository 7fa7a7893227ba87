"""A Kubernetes dry run on this machine: the rendered manifests, each pod as processes.

What the cluster does, done here with nothing faked but the engine, the hub and the network:

1. render the layout for Kubernetes (``servekit render NAME --target k8s``) and read
   its manifests back (the ConfigMaps, each LeaderWorkerSet or the DisaggregatedSet's
   roles, the proxy's Deployment and Service);
2. expand them the way the controllers do: ``replicas`` groups of ``size`` pods per
   LeaderWorkerSet (named ``<lws>-<i>`` and ``<lws>-<i>-<w>``), one pod per
   Deployment replica; each pod gets its own loopback address (127.0.0.2, ...);
3. give each pod the environment LWS and the kubelet inject: its template's ``env``
   with the downward API and Secrets resolved (``status.podIP``, the group-index
   label, ``metadata.name``, ``metadata.uid``: a fresh one for every pod made,
   ``secretKeyRef`` from ``secrets``), ``LWS_LEADER_ADDRESS``
   (``<lws>-<i>.<lws>.<namespace>``), ``LWS_GROUP_SIZE``, ``LWS_WORKER_INDEX``, ``HOSTNAME``;
4. its volumes, as the kubelet makes them, in a folder per pod: a ConfigMap or a
   projected volume of ConfigMaps as their files (mode 0755), an emptyDir empty, a
   hostPath the node's folder (under ``hostfs/``: what ``host_paths`` provides, else
   a placeholder; a missing ``Directory``/``File`` fails the pod as the kubelet's type
   check does), a claim a folder per claim (``subPath`` honoured); each mount path is
   a link in the pod's root folder (``SERVEKIT_FAKE_ROOTFS``), and a command word under a
   mount path is rewritten to the volume's folder; ``workingDir`` is the pod's root
   folder's; the simulated ``vllm`` refuses to start unless the model it is given
   resolves through the pod's mounts to a folder holding ``config.json``;
5. init containers run first, in order, each to its exit (a failure fails the pod),
   every pod's at once (as the kubelets of a cluster do: the preflight's initContainers
   wait for each other); ``huggingface_hub`` is a stand-in on their ``PYTHONPATH``
   that writes a model and records the token and mirror it was given (the hub itself
   cannot be reached); the engine pods' preflight sees the node filesystem and NPU
   fabric of :mod:`servekit.platforms.fakenpu` (``faults`` injected), and
   :func:`k8s_refused` runs only the init containers, to see them refuse;
6. DNS: every pod's name through its LWS's headless Service and every Service name
   (short and qualified) resolve to the pod's address through a hosts table that a
   ``sitecustomize`` on ``PYTHONPATH`` serves to ``socket.getaddrinfo`` and
   ``gethostbyname``; a Service resolves straight to its first pod, a headless
   Service to every pod it selects (the proxy pods of ``<prefix>-proxy-peers``), as
   its A records do; the pods' ``python3`` puts the shim last on any ``PYTHONPATH``
   a script sets, so every Python process of a pod resolves through it (the preStop
   hook's path is the proxy's zipapp alone);
7. probes: every pod's readiness and liveness probes (``httpGet`` or ``exec``) must
   pass before the cluster is ready;
8. :meth:`K8sDryCluster.apply` renders again and replaces the pods of every
   workload whose pod template changed (the ConfigMaps' hash is in it); pods of
   unchanged workloads keep running. An elastic rendering's LeaderWorkerSets roll as
   LWS's controller rolls them (:mod:`.fakelws`, :mod:`.fakerollout`: surge groups,
   the partition from the highest index down, each old pod drained by its preStop
   hook); otherwise a changed workload's pods are recreated together.

``/dev/shm``, accelerators, resources, ``hostNetwork`` and schedulers are not emulated;
``servekit sim serve`` is ``vllm`` unless ``engine="vllm"`` (the real engine on the CPU), and
``python3 -m vllm.entrypoints.openai.api_server`` (the CPU layouts' command) too: a stand-in
``vllm`` module first on the engine pods' ``PYTHONPATH`` (:data:`API_SERVER_STUB`).
"""

from __future__ import annotations

import base64
import concurrent.futures
import contextlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import yaml

import servekit
from servekit.catalog import load
from servekit.local import engine_env, find_broken, port_is_free
from servekit.platforms.fake import (
    DryCluster,
    Node,
    NodeOutcome,
    loopback_block,
    node_env,
    stop_nodes,
    wait_ready,
)
from servekit.platforms.fakenpu import HEALTHY, Fabric, Faults, taken_ports
from servekit.platforms.k8s.attach import process_hosts
from servekit.platforms.k8s.elastic import KUBE_API_VAR, KUBE_TOKEN_VAR
from servekit.platforms.k8s.entry import render
from servekit.platforms.k8s.fakeapi import FakeApi
from servekit.platforms.k8s.fakelws import Autoscaler, Elastic, scale_targets
from servekit.platforms.k8s.fakerollout import REVISION_LABEL, revision
from servekit.platforms.k8s.podspec import GROUP_INDEX_LABEL, GROUP_LABEL, MODEL_VOLUME
from servekit.platforms.k8s.settings import NAMES as SETTINGS
from servekit.platforms.prepare import render_named, split_sets
from servekit.preflight import PLATFORM_OF, PORT_BASE as PREFLIGHT_PORT, SPEC_FILE
from servekit.procgroup import start_detached
from servekit.render import build_plan
from servekit.vocabulary import atomic_write_text, url_for

NAMESPACE = "default"
INIT_TIMEOUT_S = 120.0
SETTLE_S = 10.0
PROBE_TIMEOUT_S = 10.0
DNS_SHIM = '''"""servekit's fake cluster DNS: names in SERVEKIT_FAKE_HOSTS (JSON name -> its
addresses: one for a pod or a Service, every pod's for a headless Service)."""
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


def _names(host):
    if isinstance(host, bytes):
        host = host.decode("ascii", "replace")
    if isinstance(host, str):
        found = _HOSTS.get(host.rstrip(".").lower())
        if isinstance(found, list) and found:
            return found
    return [host]


def getaddrinfo(host, *args, **kwargs):
    return [info for name in _names(host) for info in _getaddrinfo(name, *args, **kwargs)]


def gethostbyname(host):
    return _gethostbyname(_names(host)[0])


socket.getaddrinfo = getaddrinfo
socket.gethostbyname = gethostbyname

try:  # uvloop (the proxy's and vLLM's loop) resolves in libuv, not through socket
    import uvloop
except ImportError:
    uvloop = None
if uvloop is not None:

    class _Loop(uvloop.Loop):
        async def getaddrinfo(self, host, *args, **kwargs):
            out = []
            for name in _names(host):
                out += await super().getaddrinfo(name, *args, **kwargs)
            return out

    uvloop.Loop = _Loop
'''
PYTHON_WRAPPER = """#!/bin/sh
# The fake cluster's python3: a pod's DNS answers every process in it, whatever PYTHONPATH
# it sets (the preStop hook's is the proxy's zipapp alone), so the shim comes last on it.
PYTHONPATH=${{PYTHONPATH:+$PYTHONPATH:}}{dns}
export PYTHONPATH
exec {python} "$@"
"""
HUB_STUB = '''"""The fake cluster's huggingface_hub: no hub is reachable here, so a download writes a
small model and records what the init container passed (the repository, the revision,
whether a token came, the mirror)."""
import json
import os


def snapshot_download(repo_id, revision=None, local_dir=None, token=None, **kwargs):
    os.makedirs(local_dir, exist_ok=True)
    with open(os.path.join(local_dir, "config.json"), "w") as f:
        json.dump({"model_type": "servekit-fake", "repo": repo_id}, f)
    record = {
        "repo": repo_id,
        "revision": revision,
        "token": bool(token),
        "endpoint": os.environ.get("HF_ENDPOINT", ""),
    }
    with open(os.path.join(local_dir, "fake-hub-download.json"), "w") as f:
        json.dump(record, f)
    return local_dir
'''
VLLM_WRAPPER = """#!/bin/sh
# The fake cluster's vllm: the model must be where the pod's mounts put it, then the simulator.
[ "$1" = serve ] && shift
model=$1
case "$model" in
  /*) where="${{SERVEKIT_FAKE_ROOTFS:-}}$model" ;;
  *) where="$PWD/$model" ;;
esac
if [ ! -f "$where/config.json" ]; then
  echo "vllm (fake cluster): no model at $model: config.json is not in the pod's mounts" >&2
  exit 1
fi
PYTHONPATH={code}${{PYTHONPATH:+:$PYTHONPATH}}
export PYTHONPATH
# every engine of the cluster answers a migrated stream's continuation (servekit.sim.resume)
SERVEKIT_SIM_TRANSCRIPTS=${{SERVEKIT_SIM_TRANSCRIPTS:-{transcripts}}}
export SERVEKIT_SIM_TRANSCRIPTS
exec {python} -m servekit.sim serve "$@"
"""


API_SERVER_STUB = '''"""The fake cluster's ``python3 -m vllm.entrypoints.openai.api_server`` (the command of
the CPU layouts): the simulated ``vllm serve`` on the PATH, the model its first word."""
import os
import sys

args = sys.argv[1:]
model = []
for i, arg in enumerate(args):
    if arg == "--model" and i + 1 < len(args):
        model, args = [args[i + 1]], args[:i] + args[i + 2 :]
        break
    if arg.startswith("--model="):
        model, args = [arg.split("=", 1)[1]], args[:i] + args[i + 1 :]
        break
os.execvp("vllm", ["vllm", "serve", *model, *args])
'''
SIM_MODULES = "sim-vllm"
"""The folder first on the engine pods' PYTHONPATH with ``engine="sim"``: a ``vllm`` package
holding only :data:`API_SERVER_STUB`, so a layout that starts vLLM as a module runs the
simulator as one that runs ``vllm serve`` does."""


def _fake_vllm(bin_dir: Path) -> None:
    code = shlex.quote(str(Path(servekit.__file__).resolve().parent.parent))
    transcripts = shlex.quote(str(bin_dir.parent / "sim-transcripts"))
    (bin_dir / "vllm").write_text(
        VLLM_WRAPPER.format(python=shlex.quote(sys.executable), code=code, transcripts=transcripts)
    )
    (bin_dir / "vllm").chmod(0o755)
    package = bin_dir.parent / SIM_MODULES / "vllm" / "entrypoints" / "openai"
    package.mkdir(parents=True)
    for folder in (package, package.parent, package.parent.parent):
        (folder / "__init__.py").write_text("")
    (package / "api_server.py").write_text(API_SERVER_STUB)


@dataclass
class FakePod:
    """One pod: its name, address, template, the env LWS injects, its names and labels.

    ``key`` is the name servekit gives it (``<group>-<i>[-<w>]``, what ``--pods``
    takes); it equals ``name`` but for a DisaggregatedSet's pods, whose
    LeaderWorkerSets the controller names with a revision. ``workload`` is the
    LeaderWorkerSet or Deployment it belongs to.
    """

    name: str
    address: str
    template: dict[str, Any]
    injected: dict[str, str]
    dns: tuple[str, ...]
    labels: dict[str, str]
    key: str
    workload: str
    group_index: int = 0
    logs: str = ""
    """Its processes' logs' folder under the cluster's ``logs`` ("": that folder): a
    Deployment's second and later replicas run processes of the first's names."""
    uid: str = field(default_factory=lambda: str(uuid.uuid4()))
    """metadata.uid: a fresh one for every pod made, as the API server gives it."""

    @property
    def ports(self) -> tuple[int, ...]:
        container = self.template["spec"]["containers"][0]
        return tuple(p["containerPort"] for p in container.get("ports", []))


def _names(short: str) -> tuple[str, ...]:
    return (
        short,
        f"{short}.{NAMESPACE}",
        f"{short}.{NAMESPACE}.svc",
        f"{short}.{NAMESPACE}.svc.cluster.local",
    )


def lws_pod(name: str, spec: dict[str, Any], g: int, w: int, ip: str) -> FakePod:
    """Pod ``w`` of group ``g`` of one LeaderWorkerSet (name, env and labels as LWS sets them)."""
    tmpl = spec["leaderWorkerTemplate"]
    size = tmpl.get("size", 1)
    template = (
        tmpl.get("leaderTemplate", tmpl["workerTemplate"]) if w == 0 else tmpl["workerTemplate"]
    )
    pod = f"{name}-{g}" if w == 0 else f"{name}-{g}-{w}"
    injected = {
        "LWS_LEADER_ADDRESS": f"{name}-{g}.{name}.{NAMESPACE}",
        "LWS_GROUP_SIZE": str(size),
        "LWS_WORKER_INDEX": str(w),
        "HOSTNAME": pod,
    }
    labels = {
        **template["metadata"].get("labels", {}),
        "leaderworkerset.sigs.k8s.io/name": name,
        GROUP_INDEX_LABEL: str(g),
        "leaderworkerset.sigs.k8s.io/worker-index": str(w),
        REVISION_LABEL: revision(spec),
    }
    group = labels.get(GROUP_LABEL, name)
    key = f"{group}-{g}" if w == 0 else f"{group}-{g}-{w}"
    dns = _names(f"{pod}.{name}")
    return FakePod(pod, ip, template, injected, dns, labels, key, name, g)


def _lws_pods(name: str, spec: dict[str, Any], ips: Iterator[str]) -> list[FakePod]:
    """The pods LWS creates for one LeaderWorkerSet."""
    size = spec["leaderWorkerTemplate"].get("size", 1)
    return [
        lws_pod(name, spec, g, w, next(ips))
        for g in range(spec.get("replicas", 1))
        for w in range(size)
    ]


def _deployment_pods(obj: dict[str, Any], ips: Iterator[str]) -> list[FakePod]:
    template = obj["spec"]["template"]
    name = obj["metadata"]["name"]
    pods = []
    for r in range(obj["spec"].get("replicas", 1)):
        pod = f"{name}-fake{r}"
        labels = dict(template["metadata"]["labels"])
        pods.append(FakePod(pod, next(ips), template, {"HOSTNAME": pod}, (), labels, pod, name,
                            logs=pod if r else ""))  # fmt: skip
    return pods


def _workload_pods(objects: list[dict[str, Any]], ips: Iterator[str]) -> list[FakePod]:
    """Every pod the controllers would create, in manifest order (the proxy last).

    A DisaggregatedSet's child LeaderWorkerSets are named as LWS v0.10's controller
    names them, ``<set>-<slice>-<revision>-<role>`` (revision ``rev0`` here), so nothing
    may rely on those names. Each Service's names resolve to the first pod its selector
    matches.
    """
    pods: list[FakePod] = []
    for obj in objects:
        kind, name = obj["kind"], obj["metadata"]["name"]
        if kind == "LeaderWorkerSet":
            pods += _lws_pods(name, obj["spec"], ips)
        elif kind == "DisaggregatedSet":
            for role in obj["spec"]["roles"]:
                pods += _lws_pods(f"{name}-0-rev0-{role['name']}", role["spec"], ips)
    for obj in objects:
        if obj["kind"] == "Deployment":
            pods += _deployment_pods(obj, ips)
    for obj in objects:
        if obj["kind"] != "Service":
            continue
        sel = obj["spec"]["selector"]
        matches = [p for p in pods if all(p.labels.get(k) == v for k, v in sel.items())]
        headless = obj["spec"].get("clusterIP") == "None"
        for match in matches if headless else matches[:1]:
            match.dns = match.dns + _names(obj["metadata"]["name"])
    return pods


def hosts_table(pods: list[FakePod]) -> dict[str, list[str]]:
    """Name -> its addresses, in the pods' order (several: a headless Service's pods)."""
    out: dict[str, list[str]] = {}
    for pod in pods:
        for name in pod.dns:
            out.setdefault(name, []).append(pod.address)
    return out


def _workloads(objects: list[dict[str, Any]]) -> dict[str, str]:
    """Workload name -> its pod templates as one text (what a rollout compares)."""
    out = {}
    for obj in objects:
        if obj["kind"] == "LeaderWorkerSet":
            out[obj["metadata"]["name"]] = json.dumps(obj["spec"], sort_keys=True)
        elif obj["kind"] == "DisaggregatedSet":
            for role in obj["spec"]["roles"]:
                name = f"{obj['metadata']['name']}-0-rev0-{role['name']}"
                out[name] = json.dumps(role["spec"], sort_keys=True)
        elif obj["kind"] == "Deployment":
            out[obj["metadata"]["name"]] = json.dumps(obj["spec"], sort_keys=True)
    return out


def _pods_are_free(count: int, ports: list[tuple[int, int]]) -> Callable[[str], bool]:
    """Whether every (pod index, port) is free under a 127.0.N prefix."""

    def check(prefix: str) -> bool:
        return count + 2 <= 255 and all(
            port_is_free(port, f"{prefix}.{2 + i}", reuse=True) for i, port in ports
        )

    return check


class PodFailed(RuntimeError):
    """A pod could not start, for the reason a kubelet would give."""


@dataclass
class _Cluster:
    """What the fake cluster holds while it runs: the nodes' folders and each pod's state."""

    root: Path
    bin_dir: Path
    speed: float | None
    extra_env: dict[str, str]
    cwd: Path | None
    host_paths: dict[str, Path] | None
    secrets: dict[str, dict[str, str]]
    configmaps: dict[str, dict[str, Any]] = field(default_factory=dict)
    env_of: dict[str, dict[str, str]] = field(default_factory=dict)
    volumes_of: dict[str, dict[str, Path]] = field(default_factory=dict)
    generation: int = 0
    fabric_env: dict[str, dict[str, str]] = field(default_factory=dict)
    """pod name -> its node's filesystem and NPU fabric (fakenpu), for its init containers"""

    def _host_path(self, path: str, kind: str, volume: str) -> Path:
        local = self.root / "hostfs" / path.lstrip("/")
        if self.host_paths is not None:
            if path in self.host_paths:
                local.parent.mkdir(parents=True, exist_ok=True)
                if not local.exists() and not local.is_symlink():
                    local.symlink_to(self.host_paths[path])
        elif not local.exists():
            # the operator's provisioning: the model on every node, the host's files
            if kind == "File":
                local.parent.mkdir(parents=True, exist_ok=True)
                local.write_text("# placeholder written by servekit's fake cluster\n")
            else:
                local.mkdir(parents=True, exist_ok=True)
                if volume == MODEL_VOLUME:
                    (local / "config.json").write_text('{"model_type": "servekit-fake"}\n')
        if kind == "File" and not local.is_file():
            raise PodFailed(f"hostPath {path}: type check failed: not a file on the node")
        if kind == "Directory" and not local.is_dir():
            raise PodFailed(f"hostPath {path}: type check failed: no such directory on the node")
        return local

    def _claim(self, claim: str, filled_by_init: bool, model: bool) -> Path:
        local = self.root / "claims" / claim
        if not local.exists():
            local.mkdir(parents=True)
            if model and not filled_by_init and self.host_paths is None:
                (local / "config.json").write_text('{"model_type": "servekit-fake"}\n')
        return local

    def _volumes(self, pod: FakePod, folder: Path) -> dict[str, Path]:
        spec = pod.template["spec"]
        init_mounts = {
            m["name"] for c in spec.get("initContainers", []) for m in c.get("volumeMounts", [])
        }
        out: dict[str, Path] = {}
        for vol in spec.get("volumes", []):
            name = vol["name"]
            local = folder / "volumes" / name
            if "configMap" in vol or "projected" in vol:
                sources = (
                    [s["configMap"]["name"] for s in vol["projected"]["sources"]]
                    if "projected" in vol
                    else [vol["configMap"]["name"]]
                )
                local.mkdir(parents=True)
                for cm_name in sources:
                    cm = self.configmaps.get(cm_name)
                    if cm is None:
                        raise PodFailed(f"volume {name}: configmap {cm_name!r} not found")
                    for key, text in cm.get("data", {}).items():
                        (local / key).write_text(text)
                    for key, blob in cm.get("binaryData", {}).items():
                        (local / key).write_bytes(base64.b64decode(blob))
                for path in local.iterdir():
                    path.chmod(0o755)
            elif "emptyDir" in vol:
                local.mkdir(parents=True)
            elif "hostPath" in vol:
                hp = vol["hostPath"]
                local = self._host_path(hp["path"], hp.get("type", ""), name)
            elif "persistentVolumeClaim" in vol:
                claim = vol["persistentVolumeClaim"]["claimName"]
                local = self._claim(claim, name in init_mounts, name == MODEL_VOLUME)
            else:
                raise PodFailed(f"volume {name}: the fake cluster does not know {sorted(vol)}")
            out[name] = local
        return out

    def _mounts(self, container: dict[str, Any], volumes: dict[str, Path]) -> dict[str, Path]:
        out = {}
        for m in container.get("volumeMounts", []):
            local = volumes[m["name"]]
            if m.get("subPath"):
                local = local / m["subPath"]
                local.mkdir(parents=True, exist_ok=True)
            out[m["mountPath"]] = local
        return out

    def _rootfs(self, folder: Path, mounts: dict[str, Path], workdir: str | None) -> Path:
        rootfs = folder / "rootfs"
        rootfs.mkdir(parents=True, exist_ok=True)
        for path, local in mounts.items():
            link = rootfs / path.lstrip("/")
            link.parent.mkdir(parents=True, exist_ok=True)
            if link.is_symlink():
                link.unlink()
            link.symlink_to(local)
        if workdir:
            (rootfs / workdir.lstrip("/")).mkdir(parents=True, exist_ok=True)
        return rootfs

    def _env(
        self, pod: FakePod, container: dict[str, Any], rootfs: Path, init: bool
    ) -> dict[str, str]:
        out: dict[str, str] = {}
        for item in container.get("env", []):
            if "value" in item:
                text = str(item["value"])
                mounted = rootfs / text.lstrip("/")
                # a path under a mount (SERVEKIT_RUN_DIR) reads through the pod's root folder
                out[item["name"]] = (
                    str(mounted) if text.startswith("/") and mounted.exists() else text
                )
                continue
            ref = item["valueFrom"]
            if "secretKeyRef" in ref:
                sec = ref["secretKeyRef"]
                value = self.secrets.get(sec["name"], {}).get(sec["key"])
                if value is None:
                    raise PodFailed(
                        f"env {item['name']}: secret {sec['name']!r} key {sec['key']!r} not found"
                    )
                out[item["name"]] = value
                continue
            path = ref["fieldRef"]["fieldPath"]
            if path == "status.podIP":
                out[item["name"]] = pod.address
            elif path == f"metadata.labels['{GROUP_INDEX_LABEL}']":
                out[item["name"]] = str(pod.group_index)
            elif path == "metadata.name":
                out[item["name"]] = pod.name
            elif path == "metadata.uid":
                out[item["name"]] = pod.uid
            else:
                raise PodFailed(f"the fake cluster does not know fieldRef {path}")
        python_path = [str(self.root / "dns")]
        if init:
            python_path.insert(0, str(self.root / "hub"))
        injected = {
            "PYTHONPATH": ":".join(python_path),
            "SERVEKIT_FAKE_HOSTS": str(self.root / "dns" / "hosts.json"),
            "SERVEKIT_FAKE_ROOTFS": str(rootfs),
            "LEADER_RESOLVE_TIMEOUT": "60",
            "PREFLIGHT_TIMEOUT": "60",
            **(self.fabric_env.get(pod.name, {}) if init else {}),
            **pod.injected,
            **out,
        }
        env = node_env(
            self.root,
            pod.name,
            pod.address,
            speed=self.speed,
            bin_dir=self.bin_dir,
            platform=injected,
        )
        if not init:
            env.update(self.extra_env)
        if pod.logs:
            env["LOG_DIR"] = str(self.root / "logs" / pod.logs)
        return env

    def _command(self, container: dict[str, Any], mounts: dict[str, Path]) -> list[str]:
        out = []
        for word in container["command"]:
            here = word
            for path, local in mounts.items():
                if word == path or word.startswith(path + "/"):
                    here = str(local) + word[len(path) :]
            out.append(here)
        return out

    def _cwd(self, container: dict[str, Any], rootfs: Path) -> Path:
        workdir = str(container.get("workingDir") or "")
        if workdir:
            return rootfs / workdir.lstrip("/")
        return self.cwd or self.root

    def prepare(self, pod: FakePod) -> _Pending:
        """Make the pod's volumes; what its init containers and its container will run."""
        self.generation += 1
        folder = self.root / "pods" / f"{pod.name}.{self.generation}"
        volumes = self._volumes(pod, folder)
        inits = []
        for init in pod.template["spec"].get("initContainers", []):
            mounts = self._mounts(init, volumes)
            rootfs = self._rootfs(folder / init["name"], mounts, init.get("workingDir"))
            env = self._env(pod, init, rootfs, init=True)
            inits.append((init["name"], self._command(init, mounts), env, self._cwd(init, rootfs)))
        return _Pending(pod, folder, volumes, inits)

    def run_inits(self, pending: _Pending) -> tuple[int | None, str]:
        """A pod's init containers in order, each to its exit: the first failing status
        (None: it ran past its time) and the output, or 0."""
        output = ""
        for name, command, env, cwd in pending.inits:
            try:
                done = subprocess.run(
                    command,
                    env=env,
                    cwd=cwd,
                    stdin=subprocess.DEVNULL,
                    capture_output=True,
                    timeout=INIT_TIMEOUT_S,
                    check=False,
                )
            except subprocess.TimeoutExpired:
                return None, f"{output}init container {name} ran past {INIT_TIMEOUT_S:g} s\n"
            output += (done.stdout + done.stderr).decode(errors="replace")
            if done.returncode != 0:
                return done.returncode, output
        return 0, output

    def launch(self, pending: _Pending) -> Node:
        """Start the pod's container (its init containers have passed)."""
        pod, folder = pending.pod, pending.folder
        container = pod.template["spec"]["containers"][0]
        mounts = self._mounts(container, pending.volumes)
        rootfs = self._rootfs(folder / "main", mounts, container.get("workingDir"))
        command = self._command(container, mounts)
        node = Node(pod.name, pod.address, folder / "main" / "entry" / Path(command[-2]).name)
        node.entry.parent.mkdir(parents=True, exist_ok=True)
        env = self._env(pod, container, rootfs, init=False)
        self.env_of[pod.name] = env
        self.volumes_of[pod.name] = pending.volumes
        with node.output.open("wb") as out:
            node.popen = start_detached(
                command, stdout=out, env=env, cwd=self._cwd(container, rootfs)
            )
        return node

    def init_all(self, pods: list[FakePod]) -> list[tuple[_Pending, NodeOutcome]]:
        """Every pod's init containers at once, as a cluster's kubelets run them."""
        pending = [self.prepare(pod) for pod in pods]

        def one(p: _Pending) -> NodeOutcome:
            status, output = self.run_inits(p)
            return NodeOutcome(p.pod.name, p.pod.address, status, output, ())

        if not pending:
            return []
        with concurrent.futures.ThreadPoolExecutor(len(pending)) as pool:
            return list(zip(pending, pool.map(one, pending), strict=True))

    def start(self, pods: list[FakePod]) -> dict[str, Node]:
        """Make the pods' volumes, run their init containers, start their containers."""
        ran = self.init_all(pods)
        for pending, outcome in ran:
            if outcome.returncode != 0:
                raise PodFailed(
                    f"{pending.pod.name}: an init container exited {outcome.returncode}:\n"
                    + outcome.output[-1500:]
                )
        return {pending.pod.name: self.launch(pending) for pending, _ in ran}


@dataclass
class _Pending:
    """A pod whose volumes are made: its init containers (name, argv, env, cwd) to run."""

    pod: FakePod
    folder: Path
    volumes: dict[str, Path]
    inits: list[tuple[str, list[str], dict[str, str], Path]]


def _probe_passes(pod: FakePod, probe: dict[str, Any], env: dict[str, str]) -> bool:
    if "httpGet" in probe:
        get = probe["httpGet"]
        url = url_for(pod.address, get["port"], get.get("path", "/"))
        try:
            with urllib.request.urlopen(url, timeout=probe.get("timeoutSeconds", 1)) as r:
                status: int = r.status
                return 200 <= status < 400
        except OSError:
            return False
    done = subprocess.run(
        probe["exec"]["command"],
        env=env,
        capture_output=True,
        timeout=probe.get("timeoutSeconds", 1) + 5,
        check=False,
    )
    return done.returncode == 0


def _wait_probes(pods: list[FakePod], env_of: dict[str, dict[str, str]], timeout_s: float) -> None:
    """Until every pod's readiness and liveness probes pass, as the kubelet runs them."""
    deadline = time.monotonic() + timeout_s
    pending = [
        (pod, kind, c[kind])
        for pod in pods
        for c in pod.template["spec"]["containers"][:1]
        for kind in ("readinessProbe", "livenessProbe")
        if kind in c
    ]
    while pending:
        pending = [(p, k, pr) for p, k, pr in pending if not _probe_passes(p, pr, env_of[p.name])]
        if not pending:
            return
        if time.monotonic() > deadline:
            pod, kind, _ = pending[0]
            raise RuntimeError(f"{pod.name}: {kind} does not pass after {timeout_s:.0f} s")
        time.sleep(0.5)


class Apply(Protocol):
    """``K8sDryCluster.apply``: render again, edit, ``kubectl apply``; the replaced pods."""

    def __call__(
        self, sets: list[str], edit: Callable[[dict[str, Any]], None] | None = None
    ) -> list[str]: ...


@dataclass
class K8sDryCluster(DryCluster):
    """A running fake Kubernetes cluster: the proxy Service's endpoint and each pod's address."""

    pods: dict[str, str] | None = None
    pods_arg: str = ""
    reference_pods: str = ""
    fake_pods: list[FakePod] = field(default_factory=list)
    elastic: Elastic | None = None
    """With ``k8s.elastic=on``: the API server, LWS's scaling and the kubelet (fakelws)."""
    autoscaler: Autoscaler | None = None
    """With ``k8s.autoscale``: the HPA over the rendered objects (started by the caller)."""
    proxies: dict[str, str] = field(default_factory=dict)
    """Each proxy pod's name and URL (``k8s.proxy_replicas``); ``entry_url`` is the
    first's (the proxy Service resolves to its first pod here)."""
    apply: Apply = field(default=lambda sets, edit=None: [])
    """Render the layout again with these ``--set``s (each object then given to ``edit``)
    and roll out what changed (the workloads whose pod template differs); the replaced
    pods' names. With ``k8s.elastic=on`` each changed LeaderWorkerSet rolls as LWS's
    controller rolls it (its ``rolloutStrategy``: surge groups, partition), until done."""

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


def _render(
    name: str, tag: str, kind: str, catalog: str | None, sets: list[str]
) -> list[dict[str, Any]]:
    settings, layout_sets = split_sets("k8s", SETTINGS, sets, ("k8s",))
    _, files = render_named(
        render, name, {**settings, "kind": kind, "prefix": tag}, layout_sets, catalog
    )
    objects: list[dict[str, Any]] = []
    for rel, text in files.items():
        if rel.endswith(".yaml") and rel != "kustomization.yaml" and isinstance(text, str):
            loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
            objects += [o for o in yaml.load_all(text, Loader=loader) if o]
    return objects


def _real_engine_env(root: Path) -> dict[str, str]:
    """Real vLLM here: the torch companions that cannot load are hidden, as ``up`` does.

    ``up``'s engine hook is a ``sitecustomize`` that runs the next one on the path, so
    it goes first and the fake DNS's runs after it.
    """
    return engine_env(find_broken(), pythonpath=str(root / "dns"))


def _sim_engine_env(root: Path) -> dict[str, str]:
    """The simulator here: the stand-in ``vllm`` module first, the fake DNS after it."""
    return {"PYTHONPATH": f"{root / SIM_MODULES}:{root / 'dns'}"}


def proxy_urls(pods: list[FakePod], tag: str = "sk") -> dict[str, str]:
    """Each proxy pod's name and URL (the Deployment's replicas), in the pods' order."""
    return {p.name: url_for(p.address, str(p.ports[0]))
            for p in pods if p.name.startswith(f"{tag}-proxy") and p.ports}  # fmt: skip


def _targets(
    plan_name: str, tag: str, pods: list[FakePod], catalog: str | None
) -> tuple[list[tuple[str, dict[str, int]]], str, str, dict[str, str], FakePod | None]:
    plan = build_plan(load(plan_name, catalog).layout)
    addresses = {p.key: p.address for p in pods}
    by_process = process_hosts(plan, addresses, tag)
    proxy_pods = [p for p in pods if p.name.startswith(f"{tag}-proxy")]
    proxy_pod = proxy_pods[0] if proxy_pods else None
    targets = []
    for proc in plan.api_processes():
        counts = proc.proxy.backend_counts() if proc.proxy else {}
        hosts = [p.address for p in proxy_pods] if proc.kind == "proxy" and proxy_pods else []
        for host in hosts or [by_process[proc.name]]:  # every proxy pod (its replicas)
            targets.append((url_for(host, str(proc.api_port)), counts))
    entry = plan.process(plan.entry)
    entry_host = proxy_pod.address if proxy_pod else by_process[entry.name]
    url = url_for(entry_host, str(entry.api_port))
    engine_pods = ",".join(f"{p.key}={p.address}" for p in pods if p not in proxy_pods)
    return targets, url, engine_pods, addresses, proxy_pod


@dataclass
class _Running:
    """The fake cluster's pods while it runs: start them all, or roll out a new rendering."""

    name: str
    kind: str
    catalog: str | None
    fake: _Cluster
    cluster: K8sDryCluster
    rendered: dict[str, tuple[str, list[dict[str, Any]]]]
    pods_of: dict[str, list[FakePod]]
    targets: list[tuple[str, dict[str, int]]]
    ready_timeout_s: float
    nodes: dict[str, Node] = field(default_factory=dict)
    elastic: Elastic | None = None

    def running(self) -> list[Node]:
        return list(self.nodes.values())

    def _sync(self) -> None:
        self.cluster.nodes = [self.nodes[p.name] for p in self.pods_of["sk"]]
        self.cluster.reference = [self.nodes[p.name] for p in self.pods_of.get("ref", [])]
        self.cluster.fake_pods = self.pods_of["sk"]

    def _ready(self, pods: list[FakePod]) -> None:
        wait_ready(self.targets, self.running(), self.ready_timeout_s, self.fake.root / "logs")
        _wait_probes(pods, self.fake.env_of, self.ready_timeout_s)

    def start_all(self) -> None:
        every = [p for pods in self.pods_of.values() for p in pods]
        self.nodes.update(self.fake.start(every))
        self._sync()
        self._ready(every)

    def apply(
        self, sets: list[str], edit: Callable[[dict[str, Any]], None] | None = None
    ) -> list[str]:
        """Render again with ``sets`` (each object then passed to ``edit``: an operator's
        own change to the manifests) and apply: the pods of each workload whose template
        changed are replaced; the replaced pods' names."""
        old = _workloads(self.rendered["sk"][1])
        objects = _render(self.name, "sk", self.kind, self.catalog, sets)
        if edit is not None:
            for obj in objects:
                edit(obj)
        new = _workloads(objects)
        if set(old) != set(new):
            raise RuntimeError("the fake cluster rolls out changed templates, not new workloads")
        changed = {w for w in new if new[w] != old[w]}
        if self.elastic is not None:
            return self._roll(objects, changed)
        current = self.pods_of["sk"]
        fresh = _workload_pods(objects, iter(p.address for p in current))
        if [p.name for p in fresh] != [p.name for p in current]:
            raise RuntimeError("the fake cluster rolls out templates, not a changed pod count")
        for pod, before in zip(fresh, current, strict=True):
            pod.dns = before.dns
        self.fake.configmaps.update(_configmaps(objects))
        gone = [p for p in current if p.workload in changed]
        stop_nodes([self.nodes[p.name] for p in gone])
        self.rendered["sk"] = (self.name, objects)
        self.pods_of["sk"] = fresh
        self.nodes.update(self.fake.start([p for p in fresh if p.workload in changed]))
        self._sync()
        self._ready(fresh)
        self._settle()
        return [p.name for p in gone]

    def _roll(self, objects: list[dict[str, Any]], changed: set[str]) -> list[str]:
        """An elastic rendering applied: its LeaderWorkerSets to the emulated controllers
        (each changed template a rolling update, :mod:`.fakerollout`), until each is done."""
        elastic = self.elastic
        assert elastic is not None
        specs = {
            o["metadata"]["name"]: o["spec"] for o in objects if o["kind"] == "LeaderWorkerSet"
        }
        if changed - set(specs):
            raise RuntimeError(
                f"the fake cluster rolls an elastic rendering's LeaderWorkerSets, not "
                f"{sorted(changed - set(specs))}"
            )
        self.fake.configmaps.update(_configmaps(objects))
        self.rendered["sk"] = (self.name, objects)
        before = {n: len(elastic.sets[n].replaced) for n in changed}
        elastic.apply(specs)
        elastic.wait_rolled(sorted(changed), self.ready_timeout_s)
        return [pod for n in sorted(changed) for pod in elastic.sets[n].replaced[before[n] :]]

    def _settle(self) -> None:
        """Until the proxy has counted every backend healthy for :data:`SETTLE_S` in a row.

        A proxy finds a recreated pod's engines gone only after its ejection window (3
        failed probes 2 s apart) and takes them back a probe later, so right after a
        rollout its health may still count the old pods; an operator waits the same way.
        """
        proxies = [(url, counts) for url, counts in self.targets if counts]
        deadline = time.monotonic() + self.ready_timeout_s
        steady_since = time.monotonic()
        while time.monotonic() - steady_since < SETTLE_S:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the proxy did not settle after {self.ready_timeout_s:.0f} s")
            if not all(_counts_ok(url, counts) for url, counts in proxies):
                steady_since = time.monotonic()
            time.sleep(0.5)


def _counts_ok(url: str, counts: dict[str, int]) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=5) as r:
            doc = json.loads(r.read())
    except (OSError, ValueError):
        return False
    return isinstance(doc, dict) and all(doc.get(k) == v for k, v in counts.items())


def _configmaps(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == "ConfigMap"}


def _prepare(root: Path, engine: str) -> Path:
    for sub in ("bin", "dns", "home", "tmp", "logs", "work", "hub/huggingface_hub"):
        (root / sub).mkdir(parents=True)
    if engine == "sim":
        _fake_vllm(root / "bin")
    (root / "dns" / "sitecustomize.py").write_text(DNS_SHIM)
    python = root / "bin" / "python3"
    dns, interpreter = shlex.quote(str(root / "dns")), shlex.quote(sys.executable)
    python.write_text(PYTHON_WRAPPER.format(dns=dns, python=interpreter))
    python.chmod(0o755)
    (root / "hub" / "huggingface_hub" / "__init__.py").write_text(HUB_STUB)
    return root / "bin"


def _place(
    held: contextlib.ExitStack, rendered: dict[str, tuple[str, list[dict[str, Any]]]]
) -> dict[str, list[FakePod]]:
    """Each layout's pods on a loopback block held for the cluster's life."""
    probe = iter(f"127.0.0.{i}" for i in range(2, 255))
    trial = [pod for _, objects in rendered.values() for pod in _workload_pods(objects, probe)]
    ports = [(i, p) for i, pod in enumerate(trial) for p in (*pod.ports, PREFLIGHT_PORT)]
    prefix = held.enter_context(
        loopback_block(_pods_are_free(len(trial), ports), "the pods' ports")
    )
    ips = iter(f"{prefix}.{i}" for i in range(2, 255))
    return {tag: _workload_pods(objects, ips) for tag, (_, objects) in rendered.items()}


def _spec_units(fake: _Cluster, objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The preflight's units of a rendering (its spec, in the engines' bundle ConfigMap)."""
    for obj in objects:
        if obj["kind"] == "ConfigMap" and SPEC_FILE in obj.get("data", {}):
            units: list[dict[str, Any]] = json.loads(obj["data"][SPEC_FILE])["units"]
            return units
    return []


def _fabric(
    fake: _Cluster,
    rendered: dict[str, tuple[str, list[dict[str, Any]]]],
    pods_of: dict[str, list[FakePod]],
    *,
    faults: Faults,
    catalog: str | None,
    held: contextlib.ExitStack,
) -> None:
    """Each engine pod's node filesystem and NPU fabric (by its preflight unit, in the
    spec's order, which ``faults`` index), and the ports the faults hold."""
    for tag, (layout_name, objects) in rendered.items():
        units = _spec_units(fake, objects)
        if not units:
            continue
        hardware = load(layout_name, catalog).layout.hardware
        platform = PLATFORM_OF.get(hardware.accelerator, "cpu")
        fault = faults if tag == "sk" else HEALTHY
        fabric = Fabric(fake.root / "npu" / tag, platform, hardware.devices_per_node, fault)
        by_key = {p.key: p for p in pods_of[tag]}
        for i, unit in enumerate(units):
            pod = by_key.get(unit["name"])
            if pod is not None:
                fake.fabric_env[pod.name] = fabric.add(i, len(unit["devices"]))
        addresses = [by_key[u["name"]].address for u in units if u["name"] in by_key]
        held.enter_context(taken_ports(fault, addresses))


@dataclass
class _Setup:
    fake: _Cluster
    cluster: K8sDryCluster
    rendered: dict[str, tuple[str, list[dict[str, Any]]]]
    pods_of: dict[str, list[FakePod]]
    targets: list[tuple[str, dict[str, int]]]
    api: FakeApi | None = None


def _elastic_api(
    root: Path, objects: list[dict[str, Any]], pods: list[FakePod], held: contextlib.ExitStack
) -> FakeApi | None:
    """An elastic rendering's API server (its proxy has a ServiceAccount), the service
    account's token and namespace where the proxy reads them, the proxy pointed at it."""
    if not any(o["kind"] == "ServiceAccount" for o in objects):
        return None
    token = "fake-" + os.urandom(12).hex()
    api = FakeApi(NAMESPACE, token)
    api.start()
    held.callback(api.stop)
    sa = root / "serviceaccount"
    sa.mkdir()
    (sa / "token").write_text(token)
    (sa / "namespace").write_text(NAMESPACE)
    for pod in pods:
        if pod.template["spec"].get("serviceAccountName"):
            pod.injected = {**pod.injected, KUBE_API_VAR: api.url,
                            KUBE_TOKEN_VAR: str(sa / "token")}  # fmt: skip
    return api


@contextlib.contextmanager
def _setup(
    name: str,
    *,
    speed: float | None,
    catalog: str | None,
    reference: bool,
    kind: str,
    engine: str,
    cwd: Path | None,
    keep: bool,
    sets: list[str] | None,
    host_paths: dict[str, Path] | None,
    secrets: dict[str, dict[str, str]] | None,
    faults: Faults,
) -> Iterator[_Setup]:
    """Render, place every pod on a loopback block, lay out the nodes; remove it all after."""
    layout = load(name, catalog).layout
    ref_name = layout.verify.reference if reference else None
    root = Path(tempfile.mkdtemp(prefix="servekit-k8s-"))
    held = contextlib.ExitStack()
    try:
        bin_dir = _prepare(root, engine)
        tags = [("sk", name, list(sets or [])), *([("ref", ref_name, [])] if ref_name else [])]
        rendered = {tag: (n, _render(n, tag, kind, catalog, s)) for tag, n, s in tags}
        pods_of = _place(held, rendered)
        hosts = hosts_table([p for pods in pods_of.values() for p in pods])
        (root / "dns" / "hosts.json").write_text(json.dumps(hosts, indent=1))
        extra = _real_engine_env(root) if engine == "vllm" else _sim_engine_env(root)
        api = _elastic_api(root, rendered["sk"][1], pods_of["sk"], held)
        secrets = dict(secrets or {})
        if api is not None:  # the operator's `kubectl create secret generic sk-admin`
            secrets.setdefault("sk-admin", {"key": "fake-admin-" + os.urandom(8).hex()})
        fake = _Cluster(root, bin_dir, speed, extra, cwd, host_paths, secrets)
        for _, objects in rendered.values():
            fake.configmaps.update(_configmaps(objects))
        _fabric(fake, rendered, pods_of, faults=faults, catalog=catalog, held=held)
        cluster = K8sDryCluster(name, root, [], "", root / "logs")
        all_targets: list[tuple[str, dict[str, int]]] = []
        for tag, (layout_name, _) in rendered.items():
            targets, url, engine_pods, addresses, _ = _targets(
                layout_name, tag, pods_of[tag], catalog
            )
            all_targets += targets
            if tag == "sk":
                cluster.entry_url, cluster.pods_arg, cluster.pods = url, engine_pods, addresses
                cluster.proxies = proxy_urls(pods_of[tag], tag)
            else:
                cluster.reference_url, cluster.reference_pods = url, engine_pods
        yield _Setup(fake, cluster, rendered, pods_of, all_targets, api)
    finally:
        held.close()
        if not keep:
            shutil.rmtree(root, ignore_errors=True)


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
    sets: list[str] | None = None,
    host_paths: dict[str, Path] | None = None,
    secrets: dict[str, dict[str, str]] | None = None,
    faults: Faults = HEALTHY,
) -> Iterator[K8sDryCluster]:
    """Render for Kubernetes, start every pod of the manifests, wait; tear down on exit.

    ``engine="vllm"``: the pods' ``vllm`` is the real one on this machine's PATH (a
    ``local/*`` layout: real vLLM on the CPU); else ``servekit sim serve``. ``cwd``:
    the pods' working folder when their template names none. ``sets``: ``--set``s of
    the rendering (``k8s.model=...``). ``host_paths``: what the nodes hold (host path
    -> a folder or file here); None: every hostPath exists, a model volume's with a
    placeholder model. ``secrets``: the namespace's Secrets (name -> key -> value).
    ``faults``: what the engine pods' preflight finds wrong (it then fails their init
    containers: :func:`k8s_refused` shows them).
    """
    with _setup(
        name, speed=speed, catalog=catalog, reference=reference, kind=kind, engine=engine,
        cwd=cwd, keep=keep, sets=sets, host_paths=host_paths, secrets=secrets, faults=faults,
    ) as ready:  # fmt: skip
        run = _Running(
            name,
            kind,
            catalog,
            ready.fake,
            ready.cluster,
            ready.rendered,
            ready.pods_of,
            ready.targets,
            ready_timeout_s,
        )
        ready.cluster.apply = run.apply
        elastic = _elastic(run, ready)
        started = time.perf_counter()
        try:
            if elastic is not None:
                elastic.start()
            run.start_all()
            ready.cluster.started_s = time.perf_counter() - started
            yield ready.cluster
        finally:
            if ready.cluster.autoscaler is not None:
                ready.cluster.autoscaler.stop()
            if elastic is not None:
                elastic.stop()
            stop_nodes(run.running())


def _elastic(run: _Running, ready: _Setup) -> Elastic | None:
    """LWS's controllers, the kubelet and (with autoscaling objects) the HPA over the pods."""
    if ready.api is None:
        return None
    objects = ready.rendered["sk"][1]
    specs = {o["metadata"]["name"]: o["spec"] for o in objects if o["kind"] == "LeaderWorkerSet"}
    used = [p.address for pods in ready.pods_of.values() for p in pods]
    prefix = used[0].rsplit(".", 1)[0]
    last = max(int(a.rsplit(".", 1)[1]) for a in used)
    fresh = iter(f"{prefix}.{i}" for i in range(last + 1, 255))
    freed: deque[str] = deque()

    def address() -> str:
        """A new pod's address: one never used, else the one freed longest ago."""
        found = next(fresh, None)
        if found is None:
            if not freed:
                raise PodFailed(f"no address left on {prefix}.0/24 for a new pod")
            found = freed.popleft()
        return found

    def make_pod(lws: str, spec: dict[str, Any], g: int, w: int) -> FakePod:
        pod = lws_pod(lws, spec, g, w, address())
        hosts_file = ready.fake.root / "dns" / "hosts.json"
        hosts = json.loads(hosts_file.read_text())
        hosts.update({n: [pod.address] for n in pod.dns})
        atomic_write_text(hosts_file, json.dumps(hosts, indent=1))
        return pod

    elastic = Elastic(ready.api, run, make_pod, specs, _probe_passes, freed.append)
    ready.cluster.elastic = elastic
    run.elastic = elastic
    targets = scale_targets(objects)
    if targets:
        pages = {name: url + "/metrics" for name, url in ready.cluster.proxies.items()}
        ready.cluster.autoscaler = Autoscaler(elastic, targets, pages)
    return elastic


def k8s_refused(
    name: str,
    faults: Faults,
    *,
    catalog: str | None = None,
    kind: str = "leaderworkerset",
) -> list[NodeOutcome]:
    """Run every engine pod's init containers with ``faults`` injected, start nothing else:
    each pod's exit status and output (a pod whose init fails never starts its engine)."""
    with _setup(
        name, speed=None, catalog=catalog, reference=False, kind=kind, engine="sim",
        cwd=None, keep=False, sets=None, host_paths=None, secrets=None, faults=faults,
    ) as ready:  # fmt: skip
        pods = [p for p in ready.pods_of["sk"] if p.template["spec"].get("initContainers")]
        return [outcome for _, outcome in ready.fake.init_all(pods)]
