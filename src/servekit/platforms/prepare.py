"""From a layout's name and ``--set``s to one platform's files, without the table.

:mod:`.api` chooses the platform from the table and calls these; a platform's
own fake (``k8s/fake.py``) calls them with its own renderer, so no fake imports
the table that lists it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from pathlib import Path

from servekit.catalog import load
from servekit.errors import UsageError
from servekit.platforms.request import Files, RenderRequest
from servekit.render import apply_overrides, build_plan, check_layout


def split_sets(
    target: str, allowed: Collection[str], sets: list[str], platforms: Collection[str]
) -> tuple[dict[str, str], list[str]]:
    """``--set <target>.KEY=VALUE`` are the platform's; the rest change the layout.

    ``platforms``: every platform's name (a setting of another one is refused)."""
    mine: dict[str, str] = {}
    rest = []
    for item in sets:
        key, _, value = item.partition("=")
        head, _, sub = key.strip().partition(".")
        if head in platforms or head == target:
            if head != target or sub not in allowed:
                known = ", ".join(f"{target}.{s}" for s in allowed) or "none"
                raise UsageError(
                    f"--set {key.strip()!r}: not a setting of --target {target} (its settings: {known})"
                )
            mine[sub] = value.strip()
        else:
            rest.append(item)
    return mine, rest


def render_named(
    render: Callable[[RenderRequest], Files],
    name: str,
    settings: dict[str, str],
    layout_sets: list[str],
    catalog: Path | str | None = None,
    *,
    notes: list[str] | None = None,
    preflight: bool = True,
) -> tuple[str, Files]:
    """The files of one layout for one platform's ``render`` (pure but for reading the catalog).

    ``notes`` gets what the render summary must say besides the files: each warning of
    render's rules and each caveat the layout records (a difference its import could
    not express renders otherwise than the source, and says so here).
    """
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
    return layout.name, render(req)
