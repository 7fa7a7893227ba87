"""Finding every process a run started, from /proc, so teardown leaves no orphan.

Each child starts in its own session (its own process group), and signals go to
the whole group. A grandchild that left the group (``setsid``) would escape a
group signal, so teardown also walks the parent links recorded beforehand.
"""

from __future__ import annotations

import os
from pathlib import Path


def _stat_fields(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    # The command name may hold spaces and parentheses; fields follow the last ')'.
    return text.rsplit(")", 1)[1].split()


def snapshot() -> dict[int, tuple[int, int, str]]:
    """Every live process: pid -> (ppid, pgid, state letter)."""
    table: dict[int, tuple[int, int, str]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fields = _stat_fields(int(entry))
        if fields is not None and len(fields) > 3:
            table[int(entry)] = (int(fields[1]), int(fields[2]), fields[0])
    return table


def members(roots: set[int]) -> set[int]:
    """Live, non-zombie processes in the groups of ``roots`` or descending from them."""
    table = snapshot()
    found = {pid for pid, (_, pgid, st) in table.items() if pgid in roots and st != "Z"}
    frontier = set(roots) | found
    while frontier:
        children = {
            pid
            for pid, (ppid, _, st) in table.items()
            if ppid in frontier and st != "Z" and pid not in found
        }
        found |= children
        frontier = children
    return {pid for pid in found | (roots & set(table)) if table.get(pid, (0, 0, "Z"))[2] != "Z"}
