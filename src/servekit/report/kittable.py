"""The kit's release table in the report: each seed row with N/N and its evidence link.

``servekit verify NAME --kit KIT`` has the kit package write the table
(``kit/kit-table.json``, a :class:`servekit.kit.KitReleaseTable`) beside each
row's evidence file; the report reads it back and links every row to its file,
relative to the run folder.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from servekit.report.models import KitCheck
from servekit.report.view import KitRow, Mark

MARKS: dict[str, Mark] = {"pass": "ok", "fail": "fail", "not run": "none"}


def kit_section(run_dir: Path, kit: KitCheck | None) -> tuple[str | None, tuple[KitRow, ...]]:
    """(title, rows) of the release table, or (None, ()) without one."""
    if kit is None or kit.table is None or not (run_dir / kit.table).is_file():
        return None, ()
    from servekit.kit import KitReleaseTable

    table = KitReleaseTable.model_validate_json((run_dir / kit.table).read_text(encoding="utf-8"))
    folder = PurePosixPath(kit.table).parent
    rows = tuple(
        KitRow(
            item=row.item,
            status=row.status,
            ratio=row.ratio,
            result=row.result,
            href=str(folder / row.evidence) if row.evidence else None,
            mark=MARKS[row.status],
        )
        for row in table.rows
    )
    name = table.name or Path(table.kit).name
    rev = f", repo_rev {table.repo_rev}" if table.repo_rev else ""
    return f"Kit release table: {name}{rev}", rows
