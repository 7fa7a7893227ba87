"""What discovery must know of each role's pods, as typed data (the ``--discovery-spec`` file).

A pod of a role is found by its labels (``selector``, equality on every key, as
vLLM's router's ``--prefill-selector``). What it serves is not read from the pod
(its command line, its environment: text, which the proxy would have to parse
and could be fooled by) but from this spec: for each LeaderWorkerSet worker
index (the pod's ``leaderworkerset.sigs.k8s.io/worker-index`` label; a pod
without it is worker 0), the API ports that pod serves, one per DP rank placed
there, each with its KV-event publisher's port and replay port when it
publishes. In bootstrap mode (vLLM's MooncakeConnector) every endpoint of an
engine names the engine's id and its bootstrap server, which runs on the
engine's leader (worker 0) at ``bootstrap_port``; the id is ``engine_id_prefix``
followed by the leader pod's name (unique across groups and rollout revisions)
or by its group index.

The renderer writes the file with :meth:`DiscoverySpec.to_doc` from the Plan;
the proxy reads it with :func:`load_spec`, which refuses anything else in one
line naming the field. Standard library only (the zipapp carries it).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servekit.errors import UsageError
from servekit.vocabulary import PD_ROLES, PROXY_POOLS, read_at_most

VERSION = 1
MAX_SPEC_BYTES = 1 << 20
MAX_ROLES = 32
MAX_WORKERS = 1024  # worker indexes per role
MAX_ENDPOINTS = 512  # API ports per pod
MAX_LABELS = 16
ENGINE_ID_FROM = ("leader_pod", "group_index")
# Kubernetes label syntax: a name of 63 characters at most, an optional DNS-subdomain prefix.
_NAME = r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)"
LABEL_KEY = re.compile(rf"([a-z0-9]([-a-z0-9.]{{0,251}}[a-z0-9])?/)?{_NAME}")
LABEL_VALUE = re.compile(rf"{_NAME}?")
NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
PREFIX = re.compile(r"[-A-Za-z0-9_.:]{0,128}")


@dataclass(frozen=True)
class Endpoint:
    """One API server of a pod (a DP rank), and where its KV events come from."""

    api_port: int
    kv_events_port: int | None = None
    kv_replay_port: int | None = None


@dataclass(frozen=True)
class WorkerPorts:
    """What a pod at one LeaderWorkerSet worker index serves."""

    worker_index: int
    endpoints: tuple[Endpoint, ...]


@dataclass(frozen=True)
class RoleSpec:
    """One role's pods: how to find them and what each serves."""

    role: str
    selector: tuple[tuple[str, str], ...]
    workers: tuple[WorkerPorts, ...]
    bootstrap_port: int | None = None
    engine_id_prefix: str = ""
    engine_id_from: str = "leader_pod"

    def endpoints_of(self, worker_index: int) -> tuple[Endpoint, ...]:
        """The API endpoints a pod at ``worker_index`` serves (none: it serves no API)."""
        found = next((w for w in self.workers if w.worker_index == worker_index), None)
        return () if found is None else found.endpoints

    def label_selector(self) -> str:
        """The selector as the API's ``labelSelector`` query parameter."""
        return ",".join(f"{k}={v}" for k, v in self.selector)


@dataclass(frozen=True)
class DiscoverySpec:
    """Every discovered role of one deployment."""

    roles: tuple[RoleSpec, ...]
    namespace: str | None = None

    def role_names(self) -> tuple[str, ...]:
        return tuple(sorted({r.role for r in self.roles}))

    def to_doc(self) -> dict[str, Any]:
        """The JSON document :func:`spec_from_doc` reads (the renderer writes it)."""
        doc: dict[str, Any] = {"version": VERSION, "roles": [_role_doc(r) for r in self.roles]}
        if self.namespace is not None:
            doc["namespace"] = self.namespace
        return doc


def _role_doc(role: RoleSpec) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "role": role.role,
        "selector": dict(role.selector),
        "workers": [
            {"worker_index": w.worker_index, "endpoints": [_endpoint_doc(e) for e in w.endpoints]}
            for w in role.workers
        ],
    }
    if role.bootstrap_port is not None:
        doc.update(
            bootstrap_port=role.bootstrap_port,
            engine_id_prefix=role.engine_id_prefix,
            engine_id_from=role.engine_id_from,
        )
    return doc


def _endpoint_doc(e: Endpoint) -> dict[str, Any]:
    doc: dict[str, Any] = {"api_port": e.api_port}
    if e.kv_events_port is not None:
        doc["kv_events_port"] = e.kv_events_port
    if e.kv_replay_port is not None:
        doc["kv_replay_port"] = e.kv_replay_port
    return doc


def _fields(
    doc: Any, where: str, required: tuple[str, ...], optional: tuple[str, ...]
) -> dict[str, Any]:
    if not isinstance(doc, dict):
        raise UsageError(f"{where}: expected an object")
    extra = sorted(str(k) for k in set(doc) - set(required) - set(optional))
    if extra:
        known = ", ".join(required + optional)
        raise UsageError(f"{where}: unknown field {extra[0][:40]!r}; known: {known}")
    for key in required:
        if key not in doc:
            raise UsageError(f"{where}.{key}: missing")
    return doc


def _port(value: Any, where: str, optional: bool = False) -> int | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= 65535:
        raise UsageError(f"{where}: expected a port number (1-65535), got {value!r}")
    return value


def _list(value: Any, where: str, most: int) -> list[Any]:
    if not isinstance(value, list) or not value or len(value) > most:
        raise UsageError(f"{where}: expected a list of 1 to {most} items")
    return value


def _endpoint(doc: Any, where: str) -> Endpoint:
    d = _fields(doc, where, ("api_port",), ("kv_events_port", "kv_replay_port"))
    kv = _port(d.get("kv_events_port"), f"{where}.kv_events_port", optional=True)
    replay = _port(d.get("kv_replay_port"), f"{where}.kv_replay_port", optional=True)
    if replay is not None and kv is None:
        raise UsageError(f"{where}.kv_replay_port: needs kv_events_port")
    api = _port(d["api_port"], f"{where}.api_port")
    assert api is not None
    return Endpoint(api, kv, replay)


def _worker(doc: Any, where: str) -> WorkerPorts:
    d = _fields(doc, where, ("worker_index", "endpoints"), ())
    index = d["worker_index"]
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < MAX_WORKERS:
        raise UsageError(f"{where}.worker_index: expected 0 to {MAX_WORKERS - 1}")
    items = _list(d["endpoints"], f"{where}.endpoints", MAX_ENDPOINTS)
    endpoints = tuple(_endpoint(e, f"{where}.endpoints[{i}]") for i, e in enumerate(items))
    if len({e.api_port for e in endpoints}) != len(endpoints):
        raise UsageError(f"{where}.endpoints: an api_port is given twice")
    return WorkerPorts(index, endpoints)


def _selector(value: Any, where: str) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, dict) or not value or len(value) > MAX_LABELS:
        raise UsageError(f"{where}: expected 1 to {MAX_LABELS} labels (key: value); an empty "
                         "selector would take every pod")  # fmt: skip
    for key, label in value.items():
        if not isinstance(key, str) or not LABEL_KEY.fullmatch(key) or len(key) > 317:
            raise UsageError(f"{where}: {key!r} is not a label key")
        if not isinstance(label, str) or not LABEL_VALUE.fullmatch(label):
            raise UsageError(f"{where}.{key}: {label!r} is not a label value")
    return tuple(sorted(value.items()))


def _role(doc: Any, where: str) -> RoleSpec:
    optional = ("bootstrap_port", "engine_id_prefix", "engine_id_from")
    d = _fields(doc, where, ("role", "selector", "workers"), optional)
    role = d["role"]
    if role not in PROXY_POOLS:
        raise UsageError(f"{where}.role: pick one of {', '.join(PROXY_POOLS)} (got {role!r})")
    items = _list(d["workers"], f"{where}.workers", MAX_WORKERS)
    workers = tuple(_worker(w, f"{where}.workers[{i}]") for i, w in enumerate(items))
    if len({w.worker_index for w in workers}) != len(workers):
        raise UsageError(f"{where}.workers: a worker_index is given twice")
    prefix, source = d.get("engine_id_prefix", ""), d.get("engine_id_from", "leader_pod")
    if not isinstance(prefix, str) or not PREFIX.fullmatch(prefix):
        raise UsageError(f"{where}.engine_id_prefix: up to 128 of A-Z a-z 0-9 - _ . :")
    if source not in ENGINE_ID_FROM:
        raise UsageError(f"{where}.engine_id_from: pick one of {', '.join(ENGINE_ID_FROM)}")
    bootstrap = _port(d.get("bootstrap_port"), f"{where}.bootstrap_port", optional=True)
    if bootstrap is not None and role != "prefill":
        raise UsageError(f"{where}.bootstrap_port: only a prefill role has a bootstrap server")
    selector = _selector(d["selector"], f"{where}.selector")
    return RoleSpec(role, selector, workers, bootstrap, prefix, source)


def spec_from_doc(doc: Any) -> DiscoverySpec:
    """The spec from its decoded JSON; a UsageError naming the field when it is wrong."""
    d = _fields(doc, "discovery spec", ("version", "roles"), ("namespace",))
    if d["version"] != VERSION:
        raise UsageError(f"discovery spec.version: this proxy reads version {VERSION}")
    namespace = d.get("namespace")
    if namespace is not None and (
        not isinstance(namespace, str) or not NAMESPACE.fullmatch(namespace)
    ):
        raise UsageError("discovery spec.namespace: not a namespace name")
    items = _list(d["roles"], "discovery spec.roles", MAX_ROLES)
    roles = tuple(_role(r, f"discovery spec.roles[{i}]") for i, r in enumerate(items))
    names = {r.role for r in roles}
    if names not in (set(PD_ROLES), set(PROXY_POOLS) - set(PD_ROLES)):
        raise UsageError("discovery spec.roles: give prefill and decode roles (PD) or replica only")
    return DiscoverySpec(roles, namespace)


def load_spec(path: str) -> DiscoverySpec:
    """Read ``--discovery-spec`` (at most 1 MiB of JSON)."""
    where = f"--discovery-spec {path}"
    raw = read_at_most(Path(path), MAX_SPEC_BYTES, where, f"larger than {MAX_SPEC_BYTES} bytes")
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError):
        raise UsageError(f"{where}: not JSON") from None
    try:
        return spec_from_doc(doc)
    except UsageError as exc:
        raise UsageError(f"{where}: {exc.message}") from None
