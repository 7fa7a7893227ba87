"""What discovery must know of each role's pods, as typed data (the ``--discovery-spec`` file).

A pod of a role is found by its labels (``selector``, equality on every key, as
vLLM's router's ``--prefill-selector``). What it serves is not read from the pod
(its command line, its environment: text, which the proxy would have to parse
and could be fooled by) but from this spec: for each LeaderWorkerSet worker
index (the pod's ``leaderworkerset.sigs.k8s.io/worker-index`` label; a pod
without it is worker 0), the API ports that pod serves, one per DP rank placed
there, each with its KV-event publisher's port and replay port when it
publishes. In bootstrap mode (vLLM's MooncakeConnector) every endpoint of an
engine names the engine's id and its bootstrap server: the role's
``bootstrap_port`` on the engine's leader (worker 0), or the endpoint's own
``bootstrap_port`` on its own pod (vLLM's external DP: each rank's API server has
its engine's server). The id is ``engine_id_prefix`` followed by one of
(``engine_id_from``):

- ``leader_pod``: the leader pod's name (unique across groups and rollout revisions);
- ``group_index``: its LeaderWorkerSet group index;
- ``id_rule``: the id the group index is given by ``engine_ids`` (an :class:`IdRule`):
  the rendered instances' own ids, and beyond them ``base + (g - rendered) x step +
  offset``. This is what ``k8s.elastic=on`` renders: the same :class:`IdRule` object
  gives the pods their ids (``pod.sh``'s numbers) and the proxy its names, so the
  two cannot drift apart;

then, with ``engine_id_pod_uid``, ``-`` and the ``metadata.uid`` of the pod whose
bootstrap server it is (each incarnation of a pod its own id: vLLM's connector keeps
the workers' address it learned for an id for good, so a pod made again under an id
a decoder met would be pulled from at its old address), and, for an endpoint with a
``dp_rank``, vLLM's ``_dp<rank>`` (:func:`servekit.kvprotocol.kv_engine_id`: an engine
of DP > 1 registers each rank under its own id).

The renderer writes the file with :meth:`DiscoverySpec.to_doc` from the Plan;
the proxy reads it with :func:`load_spec`, which refuses anything else in one
line naming the field. Standard library only (the zipapp carries it).
"""

from __future__ import annotations

import json
import math
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
ENGINE_ID_FROM = ("leader_pod", "group_index", "id_rule")
MAX_RENDERED = 1024  # rendered instances an id rule names by their own id
MAX_ID_BASE = 1 << 40  # ids stay far inside pod.sh's 64-bit shell arithmetic
MAX_ID_STEP = 1 << 16
MAX_DP_RANK = 1 << 16  # a DP rank an endpoint names (vLLM's data_parallel_size is far below)
# Kubernetes label syntax: a name of 63 characters at most, an optional DNS-subdomain prefix.
_NAME = r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)"
LABEL_KEY = re.compile(rf"([a-z0-9]([-a-z0-9.]{{0,251}}[a-z0-9])?/)?{_NAME}")
LABEL_VALUE = re.compile(rf"{_NAME}?")
NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
PREFIX = re.compile(r"[-A-Za-z0-9_.:]{0,128}")
ENGINE_ID = re.compile(r"[-A-Za-z0-9_.:]{1,128}")
UID_SEP = "-"  # between an engine's id and its pod's uid (engine_id_pod_uid)


@dataclass(frozen=True)
class IdRule:
    """The engine id of each group index of one LeaderWorkerSet.

    Indexes below ``rendered`` are the rendered instances, each with the id the layout
    gives it (``ids``; empty where the layout gives none); index ``g`` beyond them gets
    :meth:`derived` ``(g)``, which ``pod.sh`` computes for the pod and discovery for the
    proxy: one rule, written once here.
    """

    rendered: int
    base: int
    step: int
    offset: int
    ids: tuple[str, ...] = ()

    def derived(self, index: int) -> int:
        """``base + (index - rendered) x step + offset`` (an index beyond the rendered)."""
        return self.base + (index - self.rendered) * self.step + self.offset

    def engine_id(self, index: int) -> str | None:
        """The id group index ``index`` serves under (None: a rendered one without an id)."""
        if index < self.rendered:
            return self.ids[index] if self.ids else None
        return str(self.derived(index))


@dataclass(frozen=True)
class Endpoint:
    """One API server of a pod (a DP rank), where its KV events come from and, in
    bootstrap mode, its DP rank (vLLM's id suffix) and its own bootstrap server's port."""

    api_port: int
    kv_events_port: int | None = None
    kv_replay_port: int | None = None
    dp_rank: int | None = None
    """Given for an engine of DP > 1: its id gets ``_dp<dp_rank>``."""
    bootstrap_port: int | None = None
    """Its engine's own bootstrap server, on its pod (else the role's, on the leader)."""


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
    engine_ids: IdRule | None = None
    """``engine_id_from: id_rule``: the rule (its ``ids`` one per rendered instance)."""
    engine_id_pod_uid: bool = False
    """Each incarnation its own id: ``-<uid>`` of the pod running the bootstrap server."""

    def names_bootstrap(self) -> bool:
        """Whether the role names bootstrap servers (the role's, or its endpoints' own)."""
        return self.bootstrap_port is not None or any(
            e.bootstrap_port is not None for w in self.workers for e in w.endpoints
        )

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
        doc["bootstrap_port"] = role.bootstrap_port
    if role.names_bootstrap():
        doc.update(engine_id_prefix=role.engine_id_prefix, engine_id_from=role.engine_id_from)
    if role.engine_id_pod_uid:
        doc["engine_id_pod_uid"] = True
    if role.engine_ids is not None:
        rule = role.engine_ids
        doc["engine_ids"] = {"rendered": list(rule.ids), "base": rule.base, "step": rule.step,
                             "offset": rule.offset}  # fmt: skip
    return doc


def _endpoint_doc(e: Endpoint) -> dict[str, Any]:
    doc: dict[str, Any] = {"api_port": e.api_port}
    if e.kv_events_port is not None:
        doc["kv_events_port"] = e.kv_events_port
    if e.kv_replay_port is not None:
        doc["kv_replay_port"] = e.kv_replay_port
    if e.dp_rank is not None:
        doc["dp_rank"] = e.dp_rank
    if e.bootstrap_port is not None:
        doc["bootstrap_port"] = e.bootstrap_port
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
    optional = ("kv_events_port", "kv_replay_port", "dp_rank", "bootstrap_port")
    d = _fields(doc, where, ("api_port",), optional)
    kv = _port(d.get("kv_events_port"), f"{where}.kv_events_port", optional=True)
    replay = _port(d.get("kv_replay_port"), f"{where}.kv_replay_port", optional=True)
    if replay is not None and kv is None:
        raise UsageError(f"{where}.kv_replay_port: needs kv_events_port")
    api = _port(d["api_port"], f"{where}.api_port")
    assert api is not None
    rank = d.get("dp_rank")
    if rank is not None:
        rank = _number(rank, f"{where}.dp_rank", 0, MAX_DP_RANK)
    bootstrap = _port(d.get("bootstrap_port"), f"{where}.bootstrap_port", optional=True)
    return Endpoint(api, kv, replay, rank, bootstrap)


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


def _number(value: Any, where: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise UsageError(f"{where}: expected a whole number from {low} to {high}")
    return value


def _id_rule(doc: Any, where: str) -> IdRule:
    """``engine_ids``: the rendered instances' ids, then base + (g - rendered) x step + offset."""
    d = _fields(doc, where, ("rendered", "base", "step", "offset"), ())
    ids = _list(d["rendered"], f"{where}.rendered", MAX_RENDERED)
    for i, engine in enumerate(ids):
        if not isinstance(engine, str) or not ENGINE_ID.fullmatch(engine):
            raise UsageError(f"{where}.rendered[{i}]: an engine id is 1 to 128 of "
                             "A-Z a-z 0-9 - _ . :")  # fmt: skip
    if len(set(ids)) != len(ids):
        raise UsageError(f"{where}.rendered: an engine id is given twice; each instance has "
                         "its own")  # fmt: skip
    base = _number(d["base"], f"{where}.base", 0, MAX_ID_BASE)
    step = _number(d["step"], f"{where}.step", 1, MAX_ID_STEP)
    offset = _number(d["offset"], f"{where}.offset", 0, step - 1)
    return IdRule(len(ids), base, step, offset, tuple(ids))


def _role(doc: Any, where: str) -> RoleSpec:
    optional = ("bootstrap_port", "engine_id_prefix", "engine_id_from", "engine_ids",
                "engine_id_pod_uid")  # fmt: skip
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
    names = _names_bootstrap(role, bootstrap, workers, where)
    uid = d.get("engine_id_pod_uid", False)
    if not isinstance(uid, bool):
        raise UsageError(f"{where}.engine_id_pod_uid: expected true or false")
    if uid and not names:
        raise UsageError(f"{where}.engine_id_pod_uid: engine ids name bootstrap servers; "
                         "give bootstrap_port")  # fmt: skip
    rule = None
    if source == "id_rule":
        if "engine_ids" not in d:
            raise UsageError(f"{where}.engine_ids: engine_id_from id_rule needs the rule "
                             "(rendered, base, step, offset)")  # fmt: skip
        if not names:
            raise UsageError(f"{where}.engine_ids: engine ids name bootstrap servers; give "
                             "bootstrap_port")  # fmt: skip
        rule = _id_rule(d["engine_ids"], f"{where}.engine_ids")
    elif "engine_ids" in d:
        raise UsageError(f"{where}.engine_ids: applies to engine_id_from id_rule; drop it "
                         "or set engine_id_from: id_rule")  # fmt: skip
    selector = _selector(d["selector"], f"{where}.selector")
    return RoleSpec(role, selector, workers, bootstrap, prefix, source, rule, uid)


def _names_bootstrap(
    role: str, bootstrap: int | None, workers: tuple[WorkerPorts, ...], where: str
) -> bool:
    """Whether the role names bootstrap servers (its own port or its endpoints'); a
    bootstrap port outside a prefill role, or a DP rank where none is named, refused."""
    at = [(f"workers[{i}].endpoints[{j}]", e) for i, w in enumerate(workers)
          for j, e in enumerate(w.endpoints)]  # fmt: skip
    own = [path for path, e in at if e.bootstrap_port is not None]
    if (bootstrap is not None or own) and role != "prefill":
        field = f"{own[0]}.bootstrap_port" if own else "bootstrap_port"
        raise UsageError(f"{where}.{field}: only a prefill role has a bootstrap server")
    names = bootstrap is not None or bool(own)
    ranked = [path for path, e in at if e.dp_rank is not None]
    if ranked and not names:
        raise UsageError(f"{where}.{ranked[0]}.dp_rank: names a DP rank's engine id, which "
                         "only a role naming bootstrap servers has; give bootstrap_port or "
                         "drop dp_rank")  # fmt: skip
    return names


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
    _check_unique_ids(roles)
    return DiscoverySpec(roles, namespace)


def _check_unique_ids(roles: tuple[RoleSpec, ...]) -> None:
    """No two group indexes of the id rules (of roles with one prefix) get one engine id.

    Two derived sequences ``s + g x step`` meet for some indexes exactly when their starts
    are congruent modulo the gcd of their steps; a rendered id meets a rule's derived ones
    when it is one of them."""
    ruled = [(i, r, r.engine_ids) for i, r in enumerate(roles) if r.engine_ids is not None]
    numbers = {i: [(e, int(e)) for e in rule.ids if e.isdigit() and str(int(e)) == e]
               for i, _, rule in ruled}  # fmt: skip
    for i, a, rule_a in ruled:
        where = f"discovery spec.roles[{i}].engine_ids"
        start = rule_a.base + rule_a.offset
        for j, b, rule_b in ruled:
            if a.engine_id_prefix != b.engine_id_prefix:
                continue
            for engine, n in numbers[j]:
                if n >= start and (n - start) % rule_a.step == 0:
                    raise UsageError(f"{where}: a group index beyond the rendered ones would get "
                                     f"engine id {engine}, which roles[{j}] renders; raise base "
                                     f"above it")  # fmt: skip
            if j <= i:
                continue
            start_b = rule_b.base + rule_b.offset
            if (start_b - start) % math.gcd(rule_a.step, rule_b.step) == 0:
                raise UsageError(f"{where}: its derived engine ids meet those of roles[{j}] "
                                 "(give each role its own offset below one shared step)")  # fmt: skip


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
