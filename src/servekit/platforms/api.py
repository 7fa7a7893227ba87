"""``servekit render``: layout + overrides -> Plan -> a platform's files on disk."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rich.console import Console

from servekit.catalog import packaged_catalog, resolve_catalog
from servekit.errors import UsageError
from servekit.fsutil import check_output_dir
from servekit.platforms.prepare import render_named, split_sets
from servekit.platforms.request import Files
from servekit.platforms.table import DEFAULT_TARGET, PLATFORMS, TargetName, platform
from servekit.render import write_files


def _flag_settings(target: str, flags: Mapping[str, Any]) -> dict[str, str]:
    """The target's own flags as its settings; another platform's flag, given, is refused."""
    mine: dict[str, str] = {}
    for p in PLATFORMS.values():
        defaults = p.flag_defaults()
        for field, setting in p.flag_settings().items():
            value = flags.get(field, defaults[field])
            if p.name == target:
                mine[setting] = str(value)
            elif value != defaults[field]:
                flag = "--" + field.replace("_", "-")
                raise UsageError(f"{flag} is for --target {p.name}")
    return mine


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
    p = platform(target)
    settings, layout_sets = split_sets(target, p.settings, sets, PLATFORMS)
    settings.update(extra or {})
    return render_named(
        p.render, name, settings, layout_sets, catalog, notes=notes, preflight=preflight
    )


def render_layout(
    name: str,
    out: Path,
    sets: list[str],
    catalog: Path | None,
    console: Console | None = None,
    *,
    target: TargetName = DEFAULT_TARGET,
    force: bool = False,
    flags: Mapping[str, Any] | None = None,
    preflight: bool = True,
) -> list[Path]:
    """Render one layout; refuses (exit 2) a layout whose overrides break a rule.

    ``flags``: the platforms' own flags as given (``k8s_kind``: :meth:`RenderOptions.platform_flags`).
    """
    con = console or Console()
    # Before anything is read: --out may never replace, hold or sit inside the
    # catalog being read or the packaged one (--force or not), or a render of
    # --out CAT --catalog CAT --force deletes every layout it came from.
    inputs = [("catalog", resolve_catalog(catalog)), ("packaged catalog", packaged_catalog())]
    check_output_dir(out, force, "--out", inputs)
    extra = _flag_settings(target, flags or {})
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
    summary = files.get(platform(target).summary or "")
    if isinstance(summary, str):
        con.print(summary, markup=False, highlight=False)
    return written
