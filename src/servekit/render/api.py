"""``servekit render``: layout + overrides -> Plan -> files on disk."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from servekit.catalog import load, packaged_catalog, resolve_catalog
from servekit.errors import UsageError
from servekit.fsutil import check_output_dir
from servekit.render.overrides import apply_overrides
from servekit.render.plan import build_plan
from servekit.render.rules import check_layout
from servekit.render.shell import Target, write_rendering


def render_layout(
    name: str,
    out: Path,
    sets: list[str],
    catalog: Path | None,
    console: Console | None = None,
    *,
    target: Target = "modelarts",
    force: bool = False,
) -> list[Path]:
    """Render one layout; refuses (exit 2) a layout whose overrides break a rule."""
    con = console or Console()
    # Before anything is read: --out may never replace, hold or sit inside the
    # catalog being read or the packaged one (--force or not), or a render of
    # --out CAT --catalog CAT --force deletes every layout it came from.
    inputs = [("catalog", resolve_catalog(catalog)), ("packaged catalog", packaged_catalog())]
    check_output_dir(out, force, "--out", inputs)
    layout = apply_overrides(load(name, catalog).layout, sets)
    errors = [f for f in check_layout(layout) if f.level == "error"]
    if errors:
        raise UsageError(
            f"{errors[0].text()} (fix it or drop the --set; 'servekit layouts check' lists all)"
        )
    written = write_rendering(build_plan(layout), out, target, force=force)
    con.print(f"rendered {layout.name} for {target}: {len(written)} files in {out}")
    return written
