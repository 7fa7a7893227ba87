"""The layouts worth predicting: the family's catalog layouts and the ones derivable from them.

Catalog layouts of the family that fit the hardware (node count, devices per
node) come as they are. From every PD layout of the family, ``layouts new``'s
own rules (:func:`servekit.layouttools.derive_layout`, nothing re-implemented)
derive the P:D counts and node spans that fit the node count, and each role's
``dp_size_per_node x tp`` split of a node's devices. A derived candidate whose
endpoints are the same as a catalog layout's is that layout. Each candidate is
read from its Plan (the processes it will run), so what is predicted is what
``servekit up`` or a rendered script would start.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from servekit.advise.shapes import Shape
from servekit.catalog import (
    PROFILES_DIR,
    Layout,
    LayoutName,
    LayoutsNewOptions,
    Topology,
    layout_names,
    load,
    parse_layout_text,
    resolve_catalog,
)
from servekit.errors import UsageError
from servekit.render import Plan, PlanOptions, ProcessPlan, build_plan
from servekit.vocabulary import PD_ROLES

NO_PREFIX_FLAG = "--no-enable-prefix-caching"
CONTEXT_FLAG = "--max-model-len"
MAX_DERIVED = 400


@dataclass(frozen=True)
class Pool:
    """The endpoints of one role and shape in a candidate."""

    role: str
    shape: Shape
    count: int


@dataclass(frozen=True)
class Candidate:
    """One layout to predict: its endpoints by role and how to write it."""

    name: str
    origin: str
    nodes: int
    pools: tuple[Pool, ...]
    prefix_caching: bool
    max_model_len: int | None
    derive: LayoutsNewOptions | None = None

    @property
    def pd(self) -> bool:
        return any(p.role in PD_ROLES for p in self.pools)

    @property
    def signature(self) -> tuple[int, tuple[tuple[str, str, int], ...]]:
        return self.nodes, tuple(sorted((p.role, p.shape.key, p.count) for p in self.pools))

    def describe(self) -> str:
        """``P 4 x prefill:tp4:dp1 / D 16 x decode:tp1:dp1``."""
        letters = {"prefill": "P", "decode": "D", "mixed": "M"}
        return " / ".join(f"{letters[p.role]} {p.count} x {p.shape.key}" for p in self.pools)


def pools_of(plan: Plan) -> tuple[Pool, ...]:
    """API endpoints of the Plan's engines, grouped by role and shape."""
    apis = [p for p in plan.api_processes() if p.kind == "engine" and not p.headless]
    per_engine = Counter(p.engine for p in apis)
    shapes: Counter[tuple[str, Shape]] = Counter()
    for p in apis:
        ranks = max(1, (p.dp_size or 1) // per_engine[p.engine])
        role = p.role if p.role in PD_ROLES else "mixed"
        shapes[(role, Shape(role, p.tp, ranks))] += 1
    order = {"prefill": 0, "decode": 1, "mixed": 2}
    return tuple(
        Pool(role, shape, n)
        for (role, shape), n in sorted(shapes.items(), key=lambda kv: (order[kv[0][0]], kv[0][1]))
    )


def candidate_of(layout: Layout, origin: str, derive: LayoutsNewOptions | None = None) -> Candidate:
    plan = build_plan(layout, PlanOptions())
    engines = [p for p in plan.processes if p.kind == "engine"]
    prefix = not any(NO_PREFIX_FLAG in p.argv for p in engines)
    return Candidate(
        name=layout.name,
        origin=origin,
        nodes=layout.nodes,
        pools=pools_of(plan),
        prefix_caching=prefix,
        max_model_len=context_of(engines),
        derive=derive,
    )


def context_of(engines: list[ProcessPlan]) -> int | None:
    """The shortest ``--max-model-len`` the engines are told (None: every engine takes its
    model's default, which the layout does not say)."""
    found = []
    for proc in engines:
        argv = list(proc.argv)
        if CONTEXT_FLAG in argv[:-1]:
            value = argv[argv.index(CONTEXT_FLAG) + 1]
            if value.isdigit():
                found.append(int(value))
    return min(found) if found else None


def _fits(layout: Layout, nodes: int, devices: int | None) -> bool:
    per_node = layout.hardware.devices_per_node
    return layout.nodes <= nodes and (devices is None or per_node == devices)


def catalog_candidates(
    family: str, nodes: int, devices: int | None, catalog: Path
) -> list[Candidate]:
    """The family's layouts that fit the hardware, as they are."""
    names = [n for n in layout_names(catalog) if n.startswith(family.rstrip("/") + "/")]
    if not names:
        raise UsageError(
            f"--family {family}: no layout of the catalog ({catalog}) starts with it; "
            "pass <hardware>/<model>, e.g. a3/deepseekv4-flash ('servekit layouts list')"
        )
    out = []
    for name in names:
        layout = load(name, catalog).layout
        if _fits(layout, nodes, devices):
            out.append(candidate_of(layout, "catalog"))
    return out


def topologies(nodes: int) -> Iterator[Topology]:
    """Every PD topology of the grammar on at most ``nodes`` nodes."""
    for a, b, c, d in itertools.product(range(1, nodes + 1), repeat=4):
        topo = Topology(a, b, c, d)
        if topo.nodes <= nodes:
            yield topo


def splits(devices: int) -> list[tuple[int, int]]:
    """(dp_size_per_node, tp) pairs that fill a node's devices."""
    return [(devices // tp, tp) for tp in range(1, devices + 1) if devices % tp == 0]


def derived_layout(opts: LayoutsNewOptions, catalog: Path) -> Layout | None:
    """The layout ``layouts new`` derives (None when one of its rules refuses)."""
    from servekit.importer import dump_yaml
    from servekit.layouttools import derive_layout

    try:
        data = derive_layout(opts)
    except UsageError:
        return None
    hw_dir = catalog / LayoutName.parse(opts.name).hardware / PROFILES_DIR
    return parse_layout_text(dump_yaml(data), f"{opts.name} (derived)", profiles_dir=hw_dir)


def _template(layout: Layout, role: str) -> tuple[str, int, int] | None:
    """(launch, dp_size_per_node, tp) of the role's first engine: what derive copies."""
    engine = next((e for e in layout.engines if e.role == role), None)
    if engine is None:
        return None
    return engine.launch, engine.dp_size_per_node or 1, engine.tp


def _role_pool(role: str, launch: str, dp_local: int, tp: int, topo: Topology) -> Pool:
    """The endpoints ``build_plan`` makes of ``topo``'s instances of one role.

    External DP opens one API server per rank (dp_local per node it spans),
    built-in DP one per instance fronting all its ranks, a single engine one.
    ``tests/advise/test_candidates.py`` holds this to the Plan of every derivation.
    """
    span, count = topo.span(role), topo.count(role)
    if launch == "external-dp":
        return Pool(role, Shape(role, tp, 1), count * dp_local * span)  # type: ignore[arg-type]
    ranks = dp_local * span if launch == "builtin-dp" else 1
    return Pool(role, Shape(role, tp, ranks), count)  # type: ignore[arg-type]


def derived_candidates(
    family: str,
    nodes: int,
    *,
    devices: int | None,
    catalog: Path,
    bases: list[Candidate],
    wanted: set[str] | None,
) -> list[Candidate]:
    """P:D counts, spans and DP x TP splits derivable from each PD layout of the family.

    Their endpoints are computed from the base's role templates (what ``layouts
    new`` copies); the layouts themselves are derived, and checked against this,
    when they are shown or written (:func:`confirm`). ``wanted``: the shape keys a
    calibration covers (None: all).
    """
    if family.count("/") != 1:
        return []  # derive names layouts <hw>/<model>/<topology>
    out: list[Candidate] = []
    for base in (b for b in bases if b.pd):
        layout = load(base.name, catalog).layout
        per_node = devices if devices else layout.hardware.devices_per_node
        templates = {r: _template(layout, r) for r in PD_ROLES}
        options = splits(per_node) if per_node else [(0, 0)]
        for topo in sorted(
            topologies(nodes), key=lambda t: (t.nodes, t.prefill_nodes + t.decode_nodes, t.name)
        ):
            for split in itertools.product(options, repeat=2):
                pools, sets = [], []
                for role, chosen in zip(PD_ROLES, split, strict=True):
                    launch, base_dp, base_tp = templates[role]  # type: ignore[misc]
                    dp_local, tp = chosen if per_node else (base_dp, base_tp)
                    if per_node:
                        sets += [f"{role}.dp_size_per_node={dp_local}", f"{role}.tp={tp}"]
                    pools.append(_role_pool(role, launch, dp_local, tp, topo))
                if wanted is not None and any(p.shape.key not in wanted for p in pools):
                    continue
                out.append(
                    Candidate(
                        name=f"{family}/{topo.name}",
                        origin=f"derived from {base.name}",
                        nodes=topo.nodes,
                        pools=tuple(pools),
                        prefix_caching=base.prefix_caching,
                        max_model_len=base.max_model_len,
                        derive=LayoutsNewOptions(
                            name=f"{family}/{topo.name}", base=base.name, topology=topo.name,
                            set=tuple(sets), catalog=catalog, dry_run=True,
                        ),
                    )
                )  # fmt: skip
                if len(out) >= MAX_DERIVED:
                    return out
    return out


def confirm(cand: Candidate, catalog: Path | None = None) -> Candidate | None:
    """A derived candidate as ``layouts new`` really derives it (None: a rule refuses it).

    Its endpoints come from the derived layout's Plan; a catalog candidate is returned
    as it is.
    """
    if cand.derive is None:
        return cand
    root = resolve_catalog(catalog)
    layout = derived_layout(cand.derive, root)
    if layout is None:
        return None
    return candidate_of(layout, cand.origin, cand.derive)


def find_candidates(
    family: str,
    nodes: int,
    devices: int | None,
    catalog: Path | None = None,
    *,
    derive: bool = True,
    wanted: set[str] | None = None,
) -> list[Candidate]:
    """Catalog layouts first, then derived ones with endpoints no catalog layout has."""
    root = resolve_catalog(catalog)
    found = catalog_candidates(family, nodes, devices, root)
    if derive:
        seen = {c.signature for c in found}
        for cand in derived_candidates(
            family, nodes, devices=devices, catalog=root, bases=found, wanted=wanted
        ):
            if cand.signature not in seen:
                seen.add(cand.signature)
                found.append(cand)
    return found
