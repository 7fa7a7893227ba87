"""Rich tables for the kit commands (presentation only, no decisions).

Every column folds instead of cutting (``…``), and the grids (layers, payload)
go through :mod:`servekit.termtable`, so an 80-column terminal shows every
cell whole; the JSON output (``--json``) stays the full record.
"""

from __future__ import annotations

import json

from rich.console import Console
from rich.table import Table

from servekit.kit.checks import CheckReport
from servekit.kit.inspector import ImageSummary
from servekit.kit.models import KitManifest
from servekit.termtable import fit_tables

STYLE = {"pass": "green", "fail": "bold red", "skip": "yellow"}


def checks_table(report: CheckReport, title: str) -> Table:
    """One row per check: name, PASS/FAIL/SKIP, detail."""
    table = Table(title=f"{title}: {report.subject}")
    table.add_column("check", overflow="fold")
    table.add_column("result", no_wrap=True)
    table.add_column("detail", overflow="fold")
    for check in report.checks:
        table.add_row(check.name, f"[{STYLE[check.status]}]{check.status.upper()}[/]", check.detail)
    return table


def _delta_rows(m: KitManifest) -> list[tuple[str, str]]:
    d = m.config_delta
    rows = [(f"Env {k}", v) for k, v in sorted(d.env.items())]
    rows += [(f"Env {k}", "(removed)") for k in d.env_removed]
    rows += [(f"Label {k}", v) for k, v in sorted(d.labels.items())]
    rows += [(f"Label {k}", "(removed)") for k in d.labels_removed]
    for key, value in (("Entrypoint", d.entrypoint), ("Cmd", d.cmd), ("WorkingDir", d.working_dir)):
        if value is not None:
            rows.append((key, json.dumps(value)))
    return rows


def _promises(m: KitManifest) -> str:
    e = m.expect
    if e is None:
        return "none declared"
    counts = (("default", len(e.defaults)), ("gate", len(e.gates)), ("marker", len(e.markers)))
    text = ", ".join(f"{n} {word}{'s' if n != 1 else ''}" for word, n in counts)
    return text + (f"; release baseline {e.repo_rev}" if e.repo_rev else "")


def print_kit(console: Console, m: KitManifest, payload_limit: int = 50) -> None:
    """Stamps, layers, payload and config delta of a kit."""
    stamps = Table(title=f"kit {m.name}", show_header=False)
    stamps.add_column(no_wrap=True)
    stamps.add_column(overflow="fold")
    stamps.add_row("generator", f"{m.generator.name} {m.generator.version}")
    stamps.add_row("created", m.created or "-")
    stamps.add_row("repo_rev", m.code.repo_rev if m.code else "-")
    stamps.add_row(
        "base", f"{m.base.reference} ({m.base.layer_count} layers, {m.base.image_id[:19]})"
    )
    stamps.add_row("image id", m.image.image_id)
    stamps.add_row("filesystem", f"{m.image.fs_entries} entries")
    stamps.add_row("promises", _promises(m))
    console.print(stamps)
    layers = [
        [
            layer.file,
            str(layer.raw_size),
            str(layer.compressed_size),
            str(layer.entries),
            str(len(layer.whiteouts)),
            str(len(layer.opaque_dirs)),
        ]
        for layer in m.layers
    ]
    header = ["file", "raw bytes", "blob bytes", "entries", "whiteouts", "opaque"]
    _grid(console, header, layers, "working layers")
    payload = [
        [item.path, item.mode, f"{item.uid}:{item.gid}", str(item.size), item.sha256[:16]]
        for item in m.payload[:payload_limit]
    ]
    header = ["path", "mode", "owner", "bytes", "sha256"]
    _grid(console, header, payload, f"payload ({len(m.payload)} files)")
    _fields(console, "config delta", _delta_rows(m) or [("(none)", "")])


def print_image(console: Console, s: ImageSummary) -> None:
    """Identity, layers and config of an image."""
    console.print(f"{s.format} {s.reference}  name={s.name or '-'}  id={s.image_id}")
    rows = [
        [str(layer.index), layer.diff_id, layer.digest or "-", str(layer.size), layer.media_type]
        for layer in s.layers
    ]
    header = ["#", "diffID", "blob digest", "bytes", "media type"]
    _grid(console, header, rows, f"layers ({len(s.layers)})")
    _fields(console, "config", [(key, json.dumps(value)) for key, value in s.config.items()])


def _grid(console: Console, header: list[str], rows: list[list[str]], title: str) -> None:
    for table in fit_tables(console, header, rows, title):
        console.print(table)


def _fields(console: Console, title: str, rows: list[tuple[str, str]]) -> None:
    table = Table(title=title)
    table.add_column("field", overflow="fold")
    table.add_column("value", overflow="fold")
    for key, value in rows:
        table.add_row(key, value)
    console.print(table)
