"""``servekit layouts new NAME --from BASE``: a layout derived from another, computed.

The source's authors add a layout by hand (their ``new-deployment`` procedure):
copy the closest layout, rename it by the grammar ``<A>x<B>p<C>x<D>d``, size
DP/TP so ``dp_local * tp`` fills a node (A2 8, A3 16), keep engine ids unique
and kv ports distinct per role, make every ``kv_connector_extra_config`` say the
real prefill and decode dp/tp sizes, wire the proxy from the nodes, and write
the provenance. Each of those steps is a rule, so this module computes them from
BASE's own layout data (its profiles stay references, its per-engine settings and
environment are carried over unchanged) and refuses, in one line, what cannot
work. The result is checked by the same rules as every catalog layout and
written only when it loads, through a temp file and rename.

The computation follows the source's own derivations: instances of a role are
copies of BASE's first engine of that role, prefill instances first on the
lowest nodes, then decode; numeric engine ids go prefill even, decode odd
(``0, 2, 4`` / ``1, 3, 5``); every instance of a role keeps its role's kv_port
(instances never share a node); the proxy sits on node 0 (group 0, the node the
platform routes traffic to) and fans out to every API port of every instance.
"""

from __future__ import annotations

import copy
import datetime as dt
from pathlib import Path
from typing import Any

from servekit import safeyaml
from servekit.catalog import (
    LAYOUT_FILE,
    MAX_NODES,
    PROFILES_DIR,
    LayoutName,
    LayoutsNewOptions,
    Topology,
    canonical_name,
    layout_path,
    load,
    packaged_catalog,
    parse_layout_text,
    resolve_catalog,
)
from servekit.errors import UsageError
from servekit.importer import HARDWARE, dump_yaml, summary
from servekit.render import assign_path, check_layout, parse_set, topology_of
from servekit.vocabulary import PD_ROLES, atomic_write_text

MAX_INSTANCES = 64


def parse_topology(text: str, flag: str = "--topology") -> Topology:
    """The grammar's name -> counts; one line naming the grammar when it is not one."""
    topo = Topology.parse(text, variant=False)
    if topo is None or not topo.is_pd:
        raise UsageError(
            f"{flag} {text[:40]!r}: not a PD topology of the grammar <A>x<B>p<C>x<D>d "
            "(A/C instances, B/D nodes each spans, x1 omitted), e.g. 2p2d or 1x2p1x4d"
        )
    return make_topology(topo.prefill, topo.prefill_nodes, topo.decode, topo.decode_nodes, flag)


def make_topology(a: int, b: int, c: int, d: int, flag: str = "--prefill/--decode") -> Topology:
    for value in (a, b, c, d):
        if not 1 <= value <= MAX_INSTANCES:
            raise UsageError(
                f"{flag}: instances and nodes per instance must be 1..{MAX_INSTANCES}, got {value}"
            )
    topo = Topology(a, b, c, d)
    if topo.nodes > MAX_NODES:
        raise UsageError(
            f"{flag}: {topo.name} needs {topo.nodes} nodes; a layout has at most {MAX_NODES}"
        )
    return topo


def read_base(base: str, catalog: Path) -> tuple[str, dict[str, Any]]:
    """(canonical name, raw layout data) of BASE: its profiles stay references."""
    real = canonical_name(base, catalog)
    path = layout_path(real, catalog)
    load(real, catalog)  # BASE itself must be a valid layout
    _node, data = safeyaml.load_file(path)
    if not isinstance(data, dict):
        raise UsageError(f"--from {base}: {path} is not a mapping")
    return real, {k: v for k, v in data.items() if not str(k).startswith("x-")}


def _templates(base: str, data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    engines = [e for e in data.get("engines") or [] if isinstance(e, dict)]
    out: dict[str, dict[str, Any]] = {}
    for role in PD_ROLES:
        first = next((e for e in engines if e.get("role") == role), None)
        if first is None:
            raise UsageError(
                f"--from {base}: has no {role} engine; derive a PD layout from a PD base "
                "(e.g. a3/deepseekv4-flash/1p1d)"
            )
        out[role] = first
    return out


def _engine_ids(
    templates: dict[str, dict[str, Any]], topo: Topology
) -> dict[str, list[str | None]]:
    """Prefill even, decode odd, as the source numbers them.

    A base without ids whose engines transfer KV (a connector and a kv_port) gets
    them too: servekit's rule requires one per engine, shared by its ranks (the
    source's GLM layouts leave it unset, so vLLM draws a random id per process).
    """
    ids: dict[str, list[str | None]] = {}
    for offset, role in enumerate(PD_ROLES):
        t = templates[role]
        raw = t.get("engine_id")
        n = topo.count(role)
        if raw is None and not (t.get("kv_connector") and t.get("kv_port") is not None):
            ids[role] = [None] * n
        elif raw is None or str(raw).isdigit():
            ids[role] = [str(2 * i + offset) for i in range(n)]
        else:
            ids[role] = [str(raw) if i == 0 else f"{raw}-{i}" for i in range(n)]
    return ids


def _extra_config(conn: dict[str, Any], sizes: dict[str, tuple[int, int]]) -> None:
    extra = conn.get("extra_config")
    if not isinstance(extra, dict):
        return
    for role in PD_ROLES:
        if isinstance(extra.get(role), dict):
            extra[role] = {**extra[role], "dp_size": sizes[role][0], "tp_size": sizes[role][1]}


def _ports(first: int, count: int) -> str:
    return str(first) if count == 1 else f"{first}-{first + count - 1}"


def _fanout(engine: dict[str, Any]) -> list[dict[str, Any]]:
    """Every API endpoint of one instance: external DP opens dp_local ports per node."""
    api = int(engine["api_port"])
    if engine.get("launch") == "external-dp":
        per = int(engine.get("dp_size_per_node", 1))
        return [{"node": n, "ports": _ports(api, per)} for n in engine["nodes"]]
    return [{"node": engine["nodes"][0], "ports": _ports(api, 1)}]


def _hardware(data: dict[str, Any], hardware: str | None) -> int:
    if hardware is not None:
        accelerator, per_node = HARDWARE[hardware]
        data["hardware"] = {
            **(data.get("hardware") or {}),
            "accelerator": accelerator,
            "devices_per_node": per_node,
        }
    return int((data.get("hardware") or {}).get("devices_per_node", 0))


def _fits(role: str, engine: dict[str, Any], per_node: int, accelerator: str) -> None:
    """The source's rule: ``dp_local * tp`` equals the NPUs of a node."""
    if engine.get("partial_node") or per_node == 0:
        return
    dp_local, tp = int(engine.get("dp_size_per_node", 1)), int(engine.get("tp", 1))
    if dp_local * tp != per_node:
        raise UsageError(
            f"{role} instance: dp_size_per_node {dp_local} x tp {tp} = {dp_local * tp}, but "
            f"{accelerator} nodes have {per_node} NPUs; --set {role}.dp_size_per_node=N "
            f"--set {role}.tp=M with N x M = {per_node}"
        )


Set = tuple[list[str], Any, str]  # --set's path, value and key as written


def _split_sets(items: list[str]) -> tuple[list[Set], list[Set]]:
    """(role-template sets such as ``prefill.tp=8``, applied before the engines are
    computed; the sets on the derived layout)."""
    early: list[Set] = []
    late: list[Set] = []
    for item in items:
        path, value = parse_set(item)
        if path[0] in PD_ROLES and len(path) < 2:
            raise UsageError(f"--set {item[:80]}: name a field, e.g. --set {path[0]}.tp=8")
        (early if path[0] in PD_ROLES else late).append((path, value, item.partition("=")[0]))
    return early, late


def _instances(
    templates: dict[str, dict[str, Any]], topo: Topology, sizes: dict[str, tuple[int, int]]
) -> list[dict[str, Any]]:
    """Prefill instances first on the lowest nodes, then decode, each a copy of its role's."""
    ids = _engine_ids(templates, topo)
    engines: list[dict[str, Any]] = []
    next_node = 0
    for role in PD_ROLES:
        for i in range(topo.count(role)):
            e = copy.deepcopy(templates[role])
            e["name"] = f"{role}{i}"
            e["nodes"] = list(range(next_node, next_node + topo.span(role)))
            next_node += topo.span(role)
            if e.get("launch", "single") != "single":
                e["dp_size"] = sizes[role][0]
            if ids[role][i] is not None:
                e["engine_id"] = ids[role][i]
            if isinstance(e.get("kv_connector"), dict):
                _extra_config(e["kv_connector"], sizes)
            engines.append(e)
    return engines


def derive_data(
    base: str,
    data: dict[str, Any],
    name: str,
    topo: Topology,
    *,
    hardware: str | None = None,
    model: str | None = None,
    sets: tuple[str, ...] = (),
    today: dt.date | None = None,
) -> dict[str, Any]:
    """BASE's layout data -> the derived layout's data (not yet checked by the rules)."""
    out = copy.deepcopy(data)
    templates = {r: copy.deepcopy(e) for r, e in _templates(base, data).items()}
    early, late = _split_sets(list(sets))
    for path, value, key in early:
        assign_path(templates[path[0]], path[1:], value, key)
    per_node = _hardware(out, hardware)
    accelerator = str((out.get("hardware") or {}).get("accelerator", "?"))
    if model is not None:
        out.setdefault("model", {})["path"] = model
    for role in PD_ROLES:
        _fits(role, templates[role], per_node, accelerator)
    sizes: dict[str, tuple[int, int]] = {
        r: (
            int(templates[r].get("dp_size_per_node", 1)) * topo.span(r),
            int(templates[r].get("tp", 1)),
        )
        for r in PD_ROLES
    }
    engines = _instances(templates, topo, sizes)
    out["engines"] = engines
    out["nodes"] = topo.nodes
    proxy = out.get("proxy")
    if isinstance(proxy, dict):
        proxy["node"] = 0
        for role in PD_ROLES:
            if role in proxy:
                proxy[role] = [ep for e in engines if e["role"] == role for ep in _fanout(e)]
    _names(out, base, name, topo)
    _provenance(out, base, data, today or dt.datetime.now(dt.UTC).date())
    for path, value, key in late:
        assign_path(out, path, value, key)
    return out


def _names(out: dict[str, Any], base: str, name: str, topo: Topology) -> None:
    hw = LayoutName.parse(name).hardware.upper()
    base_topo = LayoutName.parse(base).leaf
    title = str(out.get("title", ""))
    model_title = title.split(f" {base_topo} ", 1)[0] if f" {base_topo} " in title else title
    out["name"] = name
    out["title"] = f"{model_title} {topo.name} on {topo.nodes}x {hw}".strip()
    out["summary"] = summary(out["engines"])


def _provenance(out: dict[str, Any], base: str, data: dict[str, Any], today: dt.date) -> None:
    prov = dict(data.get("provenance") or {})
    ref = prov.pop("source_ref", None)
    commit = str(ref.get("commit", "")) if isinstance(ref, dict) else ""
    prov["derived_from"] = f"{base}@{commit}" if commit else base
    prov["derived"] = today.isoformat()
    prov["verification"] = {
        "verified": False,
        "note": "derived by servekit layouts new; only a ledger record can verify it",
    }
    prov["notes"] = (
        f"Derived by servekit layouts new from {base}: per-engine settings and environment "
        "are the base's; engine ids, kv ports, DP sizes, nodes and the proxy fan-out computed."
    )
    prov.pop("source_document", None)
    out["provenance"] = prov


def _check_name(name: str, topo: Topology) -> None:
    parsed = _three_part(name)
    if parsed.leaf != topo.name:
        raise UsageError(
            f"NAME {name}: says {parsed.leaf!r} but the topology is {topo.name}; name it "
            f"{parsed.with_leaf(topo.name)} or change --topology"
        )


def _three_part(name: str) -> LayoutName:
    try:
        parsed = LayoutName.parse(name)
    except ValueError:
        parsed = None
    if parsed is None or not parsed.has_model:
        raise UsageError(
            f"NAME {name[:80]!r}: expected <hardware>/<model>/<topology>, e.g. a3/glm5.1/1x2p1x2d"
        )
    return parsed


def choose_topology(
    name: str,
    topology: str | None,
    counts: tuple[int | None, int | None, int, int],
) -> Topology:
    """--topology, or --prefill/--decode with nodes per instance, or NAME's own topology."""
    prefill, decode, p_nodes, d_nodes = counts
    if topology is not None and (prefill is not None or decode is not None):
        raise UsageError("--topology and --prefill/--decode say the same thing; give one")
    if topology is not None:
        return parse_topology(topology)
    if prefill is not None or decode is not None:
        if prefill is None or decode is None:
            raise UsageError("--prefill N needs --decode M (and the other way round)")
        return make_topology(prefill, p_nodes, decode, d_nodes)
    return parse_topology(_three_part(name).leaf, "NAME")


def derive_layout(opts: LayoutsNewOptions, *, today: dt.date | None = None) -> dict[str, Any]:
    """The derived layout's data, checked by every catalog rule (nothing written).

    ``opts`` is ``servekit layouts new``'s own model; ``today`` dates the provenance.
    """
    name, hardware = opts.name, opts.hardware
    root = resolve_catalog(opts.catalog)
    counts = (opts.prefill, opts.decode, opts.prefill_nodes, opts.decode_nodes)
    topo = choose_topology(name, opts.topology, counts)
    _check_name(name, topo)
    named = _three_part(name)
    if hardware is not None and named.hardware != hardware:
        raise UsageError(f"NAME {name}: starts with {named.hardware} but --hardware is {hardware}")
    real, data = read_base(opts.base, root)
    out = derive_data(
        real, data, name, topo, hardware=hardware, model=opts.model, sets=opts.set, today=today
    )
    _unique_ids(out)
    hw_dir = root / named.hardware / PROFILES_DIR
    layout = parse_layout_text(dump_yaml(out), f"{name} (derived)", profiles_dir=hw_dir)
    errors = [f for f in check_layout(layout) if f.level == "error"]
    if errors:
        raise UsageError(f"{errors[0].line()} (derived from {real}; fix it with --set)")
    if topology_of(layout) != topo.name:
        raise UsageError(
            f"NAME {name}: the derived engines make {topology_of(layout)}, not {topo.name}"
        )
    return out


def _unique_ids(out: dict[str, Any]) -> None:
    seen: dict[str, str] = {}
    for e in out.get("engines") or []:
        eid = e.get("engine_id")
        if eid is None:
            continue
        if str(eid) in seen:
            raise UsageError(
                f"engines.{e.get('name')}.engine_id {eid!r} clashes with {seen[str(eid)]}'s; "
                "every engine needs its own engine_id (drop the --set or pick another)"
            )
        seen[str(eid)] = str(e.get("name"))


def write_derived(name: str, data: dict[str, Any], catalog: Path | None, force: bool) -> Path:
    """Write the layout atomically; never over an existing layout unless ``force``.

    The packaged catalog is written only when ``--catalog`` names it: a derived
    layout lands in the user's catalog (``--catalog`` or ``SERVEKIT_CATALOG``).
    """
    root = resolve_catalog(catalog)
    if catalog is None and root == packaged_catalog():
        raise UsageError(
            f"NAME {name}: would be written into servekit's packaged catalog; pass --catalog DIR "
            f"(your catalog, or --catalog {root} to write there) or --dry-run"
        )
    path = root / name / LAYOUT_FILE
    if path.exists() and not force:
        raise UsageError(f"NAME {name}: {path} exists; pick another name or pass --force")
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, dump_yaml(data))
    return path
