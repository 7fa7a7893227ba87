"""What ``servekit layouts`` and ``servekit defaults`` print (rich tables).

Kept apart from the command module so the CLI stays a thin mapping and the
logic is testable without typer. Tables go through :mod:`servekit.termtable`,
so an 80-column terminal shows every cell whole (wrapped, transposed or split,
never cut to ``re…``).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

from rich.console import Console
from rich.text import Text

from servekit.catalog import (
    ANY_ROLE,
    DefaultsRow,
    Layout,
    LayoutName,
    LoadedLayout,
    defaults_rows,
    family_users,
    load,
    load_all,
    resolve_catalog,
    verification_status as layout_status,
)
from servekit.defaults import SETTINGS
from servekit.errors import UsageError
from servekit.render.rules import Finding, check_layout, topology_of
from servekit.termtable import fit_tables, natural_width
from servekit.vocabulary import ENGINE_KINDS, ROLES, EngineKind


def topology(layout: Layout) -> str:
    """A short shape: the grammar's name of a PD layout (``1x2p1x4d``, by
    :class:`servekit.catalog.Topology`; ``?`` where the grammar has none), else
    '4 DP x TP 4', '2 replicas'."""
    roles = Counter(e.role for e in layout.engines)
    if roles["prefill"] or roles["decode"]:
        return topology_of(layout)
    engines = [e for e in layout.engines if e.role == "mixed"]
    if len(engines) > 1 or engines[0].replicas > 1:
        return f"{sum(e.replicas for e in engines)} replicas"
    e = engines[0]
    return f"DP {e.dp_size} x TP {e.tp}" if e.dp_size > 1 else f"TP {e.tp}"


LIST_HEADER = (
    "model",
    "layout",
    "hardware",
    "nodes",
    "topology",
    "source says",
    "status",
    "derived",
)


ENGINE_DEFAULT = "the engine's default"


def context_shown(value: int | None) -> str:
    """A max_model_len as the user reads it: the number, or the engine's default (null)."""
    return ENGINE_DEFAULT if value is None else str(value)


def model_of(layout: Layout) -> str:
    """The model a layout serves, as the catalog groups it (the source's model folder)."""
    model = LayoutName.parse(layout.name).model
    if model is not None:
        return model
    ref = layout.provenance.source_ref
    if ref is not None:
        folder = ref.folder.rstrip("/").split("/")
        if len(folder) >= 2:
            return re.sub(r"-(a2|a3)$", "", folder[-2])
    return layout.model.served_name


def source_claim(layout: Layout) -> str:
    """What the source says of its own verification (its claim, never servekit's)."""
    if layout.provenance.source_ref is None:
        return "-"
    return "verified" if layout.provenance.verification.verified else "unverified"


def _grouped(loaded: list[LoadedLayout]) -> list[LoadedLayout]:
    """By model, then hardware, then topology (name)."""
    return sorted(
        loaded,
        key=lambda x: (model_of(x.layout), LayoutName.parse(x.layout.name).hardware, x.layout.name),
    )


def also_named(loaded: LoadedLayout) -> str:
    """``also: a3/1p1d; `` for a layout with old names (aliases.yaml), else nothing."""
    old = loaded.aliases
    return f"also: {', '.join(old)}; " if old else ""


def list_rows(catalog: Path | None) -> list[tuple[list[str], str]]:
    """Each layout's short columns and the reason for its status (with its aliases)."""
    rows = []
    for loaded in _grouped(load_all(catalog)):
        lay = loaded.layout
        status = layout_status(loaded)
        derived = str(lay.provenance.derived) if lay.provenance.derived else "-"
        cells = [
            model_of(lay),
            lay.name,
            lay.hardware.accelerator,
            str(lay.nodes),
            topology(lay),
            source_claim(lay),
            status.state,
            derived,
        ]
        seen = f" [observed: {status.observed}]" if status.observed else ""
        rows.append((cells, also_named(loaded) + status.reason + seen))
    return rows


def list_json(catalog: Path | None) -> str:
    """``layouts list --json``: one object per layout, grouped as the table is."""
    items = []
    for loaded in _grouped(load_all(catalog)):
        lay = loaded.layout
        ref = lay.provenance.source_ref
        status = layout_status(loaded)
        items.append(
            {
                "name": lay.name,
                "aliases": loaded.aliases,
                "model": model_of(lay),
                "hardware": LayoutName.parse(lay.name).hardware,
                "nodes": lay.nodes,
                "topology": topology(lay),
                "source": None
                if ref is None
                else {"repo": ref.repo, "commit": ref.commit, "folder": ref.folder},
                "source_claim": source_claim(lay),
                "status": status.state,
                "status_reason": status.reason,
                "derived": str(lay.provenance.derived) if lay.provenance.derived else None,
            }
        )
    return json.dumps(items, indent=1)


NARROW = (1, 2, 4, 6)  # layout, hardware, topology, status: the columns kept side by side


def print_list(catalog: Path | None, console: Console | None = None) -> None:
    """The catalog as one table; where it does not fit, the key columns and a line per layout."""
    out = console or Console()
    rows = list_rows(catalog)
    title = f"layouts in {resolve_catalog(catalog)}"
    wide = [[*cells, why] for cells, why in rows]
    tables = fit_tables(out, [*LIST_HEADER, "why"], wide, title)
    if len(tables) == 1 and natural_width(out, tables[0]) <= out.width:
        out.print(tables[0])
        return
    header = [LIST_HEADER[i] for i in NARROW]
    for table in fit_tables(out, header, [[cells[i] for i in NARROW] for cells, _ in rows], title):
        out.print(table)
    for cells, why in rows:
        model, _name, _hw, nodes, _topology, claim, state, derived = cells
        more = f"model {model}, {nodes} node(s), source says {claim}, derived {derived}"
        out.print(Text.assemble((cells[1], "bold"), f" ({state}; {more}): {why}"))


def print_show(name: str, catalog: Path | None, console: Console | None = None) -> None:
    from servekit.render.plan import build_plan
    from servekit.render.shell import device_span

    out = console or Console()
    loaded = load(name, catalog)
    lay = loaded.layout
    status = layout_status(loaded)
    out.print(f"[bold]{lay.name}[/bold]: {lay.title}")
    if loaded.alias is not None:
        out.print(f"{loaded.alias} is an alias of {lay.name} (layouts/aliases.yaml)", markup=False)
    out.print(lay.summary)
    out.print(
        f"model {lay.model.served_name} at {lay.model.path} "
        f"(max_model_len {context_shown(lay.model.max_model_len)})"
    )
    out.print(f"hardware {lay.hardware.accelerator} x {lay.nodes} node(s); image {lay.image}")
    out.print(f"status: {status.state}: {status.reason}", markup=False)
    if status.observed:
        out.print(f"observed by the run it rests on: {status.observed}", markup=False)
    prov = lay.provenance
    out.print(f"source: {prov.source}")
    if prov.source_ref is not None:
        ref = prov.source_ref
        out.print(f"verified scripts: {ref.repo}@{ref.commit[:12]} {ref.folder}")
    if prov.derived_from:
        out.print(f"derived from {prov.derived_from}")
    for d in prov.deviations:
        where = f" ({', '.join(d.engines)})" if d.engines else ""
        named = f" {d.names}{where}:" if d.names or where else ""
        out.print(f"deviation:{named} {d.what} - because {d.reason}", markup=False)
    for d in prov.source_deviations:
        out.print(f"source's own deviation from upstream: {d.what} - because {d.reason}")
    for c in prov.caveats:
        out.print(f"caveat: {c}", markup=False, highlight=False)
    plan = build_plan(lay)
    rows = [
        [
            p.name,
            str(p.node),
            p.role + (" (headless)" if p.headless else ""),
            p.engine_id or "-",
            device_span(p.devices, shortest=3),
            str(p.api_port or "-"),
            str(p.kv_port or "-"),
        ]
        for p in plan.processes
    ]
    header = ["process", "node", "role", "engine id", "devices", "api", "kv"]
    for table in fit_tables(out, header, rows, "plan"):
        out.print(table)


def check_findings(
    names: list[str], catalog: Path | None
) -> list[tuple[LoadedLayout, list[Finding]]]:
    chosen = [load(n, catalog) for n in names] if names else load_all(catalog)
    results = []
    for loaded in chosen:
        findings = check_layout(loaded.layout)
        status = layout_status(loaded)
        if status.state == "stale":
            findings.append(
                Finding(
                    level="warning",
                    layout=loaded.layout.name,
                    field="verification",
                    message=status.reason,
                )
            )
        results.append((loaded, findings))
    return results


def run_check(
    names: list[str], strict: bool, catalog: Path | None, console: Console | None = None
) -> int:
    """Print findings; return the exit code (1 on errors, or on warnings with --strict)."""
    out = console or Console(stderr=False)
    results = check_findings(names, catalog)
    errors = warnings = 0
    for loaded, findings in results:
        if not findings:
            out.print(f"ok: {loaded.layout.name}")
        for f in findings:
            style = "red" if f.level == "error" else "yellow"
            out.print(f"[{style}]{f.line()}[/{style}]", highlight=False, soft_wrap=True)
            errors += f.level == "error"
            warnings += f.level == "warning"
    out.print(f"{len(results)} layout(s): {errors} error(s), {warnings} warning(s)")
    return 1 if errors or (strict and warnings) else 0


def print_defaults(
    role: str | None,
    kind: str | None,
    console: Console | None = None,
    *,
    family: str | None = None,
    catalog: Path | str | None = None,
) -> None:
    """The defaults table: how each setting reaches vLLM, then each family's values per role."""
    if role is not None and role not in ROLES:
        raise UsageError(f"--role {role!r}: choose one of {', '.join(ROLES)}")
    if kind is not None and kind not in ENGINE_KINDS:
        raise UsageError(f"--kind {kind!r}: choose one of {', '.join(ENGINE_KINDS)}")
    rows = defaults_rows(catalog, kind=kind, role=role, family=family)
    out = console or Console()
    used = [s for s in SETTINGS if any(r.setting.key == s.key for r in rows)]
    out.print(
        Text("settings: script variable (VAR=${VAR:-value}), how it reaches vLLM, what it takes")
    )
    for s in used:
        out.print(
            Text.assemble((s.key, "bold"), f" ({s.var}): {s.how} {s.target}; {s.range_text()}")
        )
    users = family_users(catalog)
    for (fam, knd), cells in _by_family(rows).items():
        roles = [r for r in (*ROLES, ANY_ROLE) if any(c.role == r for c in cells)]
        grid = [
            [s.key, *(_value(cells, s.key, r) for r in roles)]
            for s in SETTINGS
            if any(c.setting.key == s.key for c in cells)
        ]
        used_by = ", ".join(users.get((fam, knd), [])) or "no layout of this catalog"
        out.print(Text(f"family {fam} ({knd}), used by {used_by}", style="bold"))
        for table in fit_tables(out, ["setting", *roles], grid):
            out.print(table)


def _by_family(rows: list[DefaultsRow]) -> dict[tuple[str, EngineKind], list[DefaultsRow]]:
    groups: dict[tuple[str, EngineKind], list[DefaultsRow]] = {}
    for row in rows:
        groups.setdefault((row.family, row.kind), []).append(row)
    return groups


def _value(cells: list[DefaultsRow], key: str, role: str) -> str:
    return next((c.value for c in cells if c.setting.key == key and c.role == role), "-")
