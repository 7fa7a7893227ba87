"""``servekit render``: layout + overrides -> Plan -> a platform's files on disk."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from servekit.catalog import load, packaged_catalog, resolve_catalog
from servekit.errors import UsageError
from servekit.fsutil import check_output_dir
from servekit.platforms.request import Files, RenderRequest
from servekit.platforms.table import PLATFORMS, TargetName
from servekit.render import apply_overrides, build_plan, check_layout, write_files


def _platform_settings(target: TargetName, sets: list[str]) -> tuple[dict[str, str], list[str]]:
    """``--set <target>.KEY=VALUE`` are the platform's; the rest change the layout."""
    mine: dict[str, str] = {}
    rest = []
    allowed = PLATFORMS[target].settings
    for item in sets:
        key, _, value = item.partition("=")
        head, _, sub = key.strip().partition(".")
        if head in PLATFORMS:
            if head != target or sub not in allowed:
                known = ", ".join(f"{target}.{s}" for s in allowed) or "none"
                raise UsageError(
                    f"--set {key.strip()!r}: not a setting of --target {target} (its settings: {known})"
                )
            mine[sub] = value.strip()
        else:
            rest.append(item)
    return mine, rest


def render_target(
    name: str,
    target: TargetName,
    sets: list[str],
    catalog: Path | str | None = None,
    extra: dict[str, str] | None = None,
    *,
    notes: list[str] | None = None,
    preflight: bool = True,
) -> tuple[str, Files]:
    """The files of one layout for one platform (pure but for reading the catalog).

    ``notes`` gets what the render summary must say besides the files: each warning of
    render's rules and each caveat the layout records (a difference its import could
    not express renders otherwise than the source, and says so here).
    """
    settings, layout_sets = _platform_settings(target, sets)
    settings.update(extra or {})
    layout = apply_overrides(load(name, catalog).layout, layout_sets)
    findings = check_layout(layout)
    if notes is not None:
        notes += [f.line() for f in findings if f.level == "warning"]
        notes += [f"caveat: {c}" for c in layout.provenance.caveats]
    errors = [f for f in findings if f.level == "error"]
    if errors:
        raise UsageError(
            f"{errors[0].text()} (fix it or drop the --set; 'servekit layouts check' lists all)"
        )
    req = RenderRequest(
        plan=build_plan(layout), layout=layout, settings=settings, preflight=preflight
    )
    return layout.name, PLATFORMS[target].render(req)


def render_layout(
    name: str,
    out: Path,
    sets: list[str],
    catalog: Path | None,
    console: Console | None = None,
    *,
    target: TargetName = "modelarts",
    force: bool = False,
    k8s_kind: str = "leaderworkerset",
    preflight: bool = True,
) -> list[Path]:
    """Render one layout; refuses (exit 2) a layout whose overrides break a rule."""
    con = console or Console()
    # Before anything is read: --out may never replace, hold or sit inside the
    # catalog being read or the packaged one (--force or not), or a render of
    # --out CAT --catalog CAT --force deletes every layout it came from.
    inputs = [("catalog", resolve_catalog(catalog)), ("packaged catalog", packaged_catalog())]
    check_output_dir(out, force, "--out", inputs)
    extra = {"kind": k8s_kind} if target == "k8s" else None
    if target != "k8s" and k8s_kind != "leaderworkerset":
        raise UsageError("--k8s-kind is for --target k8s")
    notes: list[str] = []
    layout_name, files = render_target(
        name, target, sets, catalog, extra, notes=notes, preflight=preflight
    )
    written = write_files(files, out, force=force)
    con.print(f"rendered {layout_name} for {target}: {len(written)} files in {out}")
    if not preflight:
        con.print("without the preflight (--no-preflight): nothing is checked before launch")
    for line in notes:
        con.print(line, markup=False, highlight=False)
    summary = files.get("k8s.md")
    if isinstance(summary, str):
        con.print(summary, markup=False, highlight=False)
    return written
