"""What ``servekit layouts`` and ``servekit defaults`` print (rich tables).

Kept apart from the command module so the CLI stays a thin mapping and the
logic is testable without typer.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from rich.console import Console
from rich.table import Table

from servekit.catalog.ledger import verification_status as layout_status
from servekit.catalog.loader import LoadedLayout, load, load_all, resolve_catalog
from servekit.catalog.schema import Layout
from servekit.defaults import ENGINE_KINDS, ROLES, table_rows
from servekit.errors import UsageError
from servekit.render.rules import Finding, check_layout


def topology(layout: Layout) -> str:
    """A short shape like '1P1D', '4 DP x TP 4', '2 replicas'."""
    roles = Counter(e.role for e in layout.engines)
    if roles["prefill"] or roles["decode"]:
        return f"{roles['prefill']}P{roles['decode']}D"
    engines = [e for e in layout.engines if e.role == "mixed"]
    if len(engines) > 1 or engines[0].replicas > 1:
        return f"{sum(e.replicas for e in engines)} replicas"
    e = engines[0]
    return f"DP {e.dp_size} x TP {e.tp}" if e.dp_size > 1 else f"TP {e.tp}"


def print_list(catalog: Path | None, console: Console | None = None) -> None:
    out = console or Console()
    table = Table(title=f"layouts in {resolve_catalog(catalog)}")
    for col in ("layout", "hardware", "nodes", "topology", "status"):
        table.add_column(col, no_wrap=True)
    table.add_column("why")
    for loaded in load_all(catalog):
        lay = loaded.layout
        status = layout_status(loaded)
        table.add_row(
            lay.name,
            lay.hardware.accelerator,
            str(lay.nodes),
            topology(lay),
            status.state,
            status.reason,
        )
    out.print(table)


def print_show(name: str, catalog: Path | None, console: Console | None = None) -> None:
    from servekit.render.plan import build_plan

    out = console or Console()
    loaded = load(name, catalog)
    lay = loaded.layout
    status = layout_status(loaded)
    out.print(f"[bold]{lay.name}[/bold]: {lay.title}")
    out.print(lay.summary)
    out.print(
        f"model {lay.model.served_name} at {lay.model.path} (max_model_len {lay.model.max_model_len})"
    )
    out.print(f"hardware {lay.hardware.accelerator} x {lay.nodes} node(s); image {lay.image}")
    out.print(f"status: {status.state}: {status.reason}")
    prov = lay.provenance
    out.print(f"source: {prov.source}")
    if prov.source_ref is not None:
        ref = prov.source_ref
        out.print(f"verified scripts: {ref.repo}@{ref.commit[:12]} {ref.folder}")
    if prov.derived_from:
        out.print(f"derived from {prov.derived_from}")
    for d in prov.deviations:
        where = f" ({', '.join(d.engines)})" if d.engines else ""
        out.print(f"deviation: {d.names}{where}: {d.what} - because {d.reason}", markup=False)
    for d in prov.source_deviations:
        out.print(f"source's own deviation from upstream: {d.what} - because {d.reason}")
    for c in prov.caveats:
        out.print(f"caveat: {c}")
    plan = build_plan(lay)
    table = Table(title="plan")
    for col in ("node", "process", "role", "engine id", "devices", "api", "kv"):
        table.add_column(col)
    for p in plan.processes:
        table.add_row(
            str(p.node),
            p.name,
            p.role + (" (headless)" if p.headless else ""),
            p.engine_id or "-",
            ",".join(map(str, p.devices)) or "-",
            str(p.api_port or "-"),
            str(p.kv_port or "-"),
        )
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
    if errors or (strict and warnings):
        return 1
    return 0


def print_defaults(role: str | None, kind: str | None, console: Console | None = None) -> None:
    if role is not None and role not in ROLES:
        raise UsageError(f"--role {role!r}: choose one of {', '.join(ROLES)}")
    if kind is not None and kind not in ENGINE_KINDS:
        raise UsageError(f"--kind {kind!r}: choose one of {', '.join(ENGINE_KINDS)}")
    out = console or Console()
    table = Table(title="servekit defaults (one table; every rendered surface reads it)")
    for col in ("engine kind", "role", "setting", "script var", "value", "reaches vLLM as"):
        table.add_column(col)
    for k, r, setting, value in table_rows():
        if (role and r != role) or (kind and k != kind):
            continue
        table.add_row(k, r, setting.key, setting.var, value, f"{setting.how} {setting.target}")
    out.print(table)
