"""Fidelity fixtures: the normalized facts of a source layout's processes, as JSON.

A fixture says where the facts come from (``source``: repo, commit, folder), how
they were taken (``entry``, ``shell``, ``nodes``, ``group0_size``, ``assumptions``)
and lists every recorded process's facts (``processes``, sorted by
``normalize.sort_key``). ``dumps`` writes one flag and one variable per line, so a
refreshed fixture diffs readably in git.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from servekit.importer.platform.normalize import ProcessFacts, sorted_facts

PLACEHOLDERS = {
    "{NODE<k>_IP}": "node k's IP address (rank k of the rank table)",
    "{NODE<k>_NIC}": "the network interface holding node k's IP",
    "{NODE<k>_POD}": "node k's pod name",
    "{INHERITED}": "the variable's value inherited from the platform",
    "{PROXY_SCRIPT}": "the proxy script named by $PROXY_SCRIPT",
    "cwd null": "the directory the platform starts the entry in",
}
INLINE_WIDTH = 80


def document(meta: dict[str, Any], processes: Sequence[ProcessFacts]) -> dict[str, Any]:
    """A fixture document: ``meta`` first, then the placeholders and the processes."""
    return {
        **meta,
        "placeholders": PLACEHOLDERS,
        "processes": [p.to_json() for p in sorted_facts(processes)],
    }


def _is_flag_entry(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and str(value[0]).startswith("-")


def _inline(value: Any) -> bool:
    if _is_flag_entry(value):
        return True  # a flag entry: one per line
    if isinstance(value, list) and value and all(_is_flag_entry(v) for v in value):
        return False  # a flags list: never on one line
    return len(json.dumps(value, ensure_ascii=False)) <= INLINE_WIDTH


def _dump(value: Any, indent: int) -> str:
    if not isinstance(value, dict | list) or _inline(value):
        return json.dumps(value, ensure_ascii=False)
    pad, inner = " " * indent, " " * (indent + 2)
    if isinstance(value, list):
        items = [inner + _dump(v, indent + 2) for v in value]
        return "[\n" + ",\n".join(items) + "\n" + pad + "]"
    pairs = [f"{inner}{json.dumps(k)}: {_dump(v, indent + 2)}" for k, v in value.items()]
    return "{\n" + ",\n".join(pairs) + "\n" + pad + "}"


def dumps(doc: dict[str, Any]) -> str:
    """The fixture's text: JSON, one flag entry and one variable per line."""
    return _dump(doc, 0) + "\n"


def read(path: Path) -> tuple[dict[str, Any], list[ProcessFacts]]:
    """A fixture's metadata and its processes' facts."""
    doc = json.loads(path.read_text())
    meta = {k: v for k, v in doc.items() if k != "processes"}
    return meta, [ProcessFacts.from_json(p) for p in doc["processes"]]
