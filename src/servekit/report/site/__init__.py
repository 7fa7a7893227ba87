"""``servekit catalog site``: the catalog as a static, self-contained HTML site.

In the spirit of the second seed's catalog page, but generated: an index with
filters by hardware, topology and verification status (the filter state lives
in the URL hash, so a filtered view can be linked), and a page per layout with
its topology diagram, plan table, verification status, deviations, notes,
caveats and links to its reports. No page loads anything from the network.
"""

from __future__ import annotations

from pathlib import Path

from servekit.catalog import load_all
from servekit.fsutil import staged_dir
from servekit.report.site.pages import Entry, entry_for
from servekit.report.templates_env import render_template

STATES = ("verified", "stale", "derived", "simulated-only", "unverified")
KINDS = ("single", "dp", "pd")

__all__ = ["KINDS", "STATES", "build_site"]


def _options(entries: list[Entry]) -> dict[str, list[str]]:
    return {
        "hw": sorted({e.hardware for e in entries}),
        "topology": [k for k in KINDS if any(e.topology.kind == k for e in entries)],
        "status": [s for s in STATES if any(e.status.state == s for e in entries)],
    }


def build_site(out: Path, catalog: str | None = None) -> Path:
    """Write the site to ``out`` (replaced whole); returns the index path."""
    loaded = load_all(catalog)
    with staged_dir(out) as tmp:
        entries = [entry_for(item, tmp) for item in loaded]
        # Grouped as users read the catalog: by model, then hardware, then topology.
        entries.sort(key=lambda e: (e.model, e.hardware, e.name))
        for entry in entries:
            render_template(
                "site/layout.html.j2", tmp / entry.page, e=entry, root="../", states=STATES
            )
        render_template(
            "site/index.html.j2",
            tmp / "index.html",
            entries=entries,
            options=_options(entries),
            states=STATES,
        )
    return out / "index.html"
