"""A source folder's ``meta.yaml`` as provenance facts: what the SOURCE says of itself.

The source convention puts a ``meta.yaml`` in every layout folder: ``source`` (the
upstream tutorial URL), ``derived`` (the date the config was extracted),
``vllm`` and ``vllm_ascend`` (the versions / image tag it targets), ``verified``
(true only after a run on real hardware, by the source's authors) and ``notes``.
These are the source's claims and stay marked so (``source_verified``): servekit's
own verdict comes from its ledger, never from here. An image tag of ``TODO`` (or
none) is kept as :data:`NOT_GIVEN`, never guessed. The keys' trailing ``# ...``
comments are the source's prose, not facts, and are not kept.

Read with :mod:`servekit.safeyaml` (bounded in bytes, depth and aliases); a
malformed or oversized file is one :class:`~servekit.importer.contain.ImportRefused`
line.
"""

from __future__ import annotations

import datetime
import re
from pathlib import Path
from typing import Any

from servekit import safeyaml
from servekit.catalog import MAX_NODES
from servekit.errors import UsageError
from servekit.importer.contain import ImportRefused
from servekit.vocabulary import StrictModel

NOT_GIVEN = "not given"
META_FILE = "meta.yaml"
_TODO = re.compile(r"\s*(TODO|TBD|FIXME)\b.*", re.IGNORECASE)
MAX_NOTES = 16 * 1024


class SourceMeta(StrictModel):
    """The provenance facts of one folder's meta.yaml (the source's own claims)."""

    file: str = META_FILE
    url: str | None = None
    derived: str | None = None
    vllm: str | None = None
    vllm_ascend: str = NOT_GIVEN
    source_verified: bool | None = None
    notes: str = ""
    nodes: int | None = None

    def document(self) -> dict[str, Any]:
        """The ``meta`` field of a facts document (``nodes`` only when the file gives it)."""
        return self.model_dump(exclude={"nodes"} if self.nodes is None else None)


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, datetime.date):
        return value.isoformat()
    if isinstance(value, bool | int | float | str):
        return str(value).strip() or None
    return None


def _image(value: Any) -> str:
    text = _text(value)
    if text is None or _TODO.fullmatch(text):
        return NOT_GIVEN
    return text


def _verified(value: Any, where: str) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    raise ImportRefused(f"{where}: verified must be true or false, got {value!r}; fix the file")


def _nodes(value: Any, where: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_NODES:
        raise ImportRefused(f"{where}: nodes must be a whole number 1..{MAX_NODES}, got {value!r}")
    return value


def read_meta(folder: Path) -> SourceMeta:
    """The folder's meta.yaml as provenance facts; an empty SourceMeta when it has none."""
    path = folder / META_FILE
    where = str(path)
    if not path.is_file() or path.is_symlink():
        return SourceMeta(file=f"{META_FILE} (absent)")
    try:
        text = safeyaml.decode(safeyaml.read_bytes(path, where), where)
        _node, data = safeyaml.compose(text, where)
    except UsageError as exc:
        raise ImportRefused(str(exc)) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ImportRefused(f"{where}: want a mapping of keys (source, derived, ...); fix the file")
    notes = _text(data.get("notes")) or ""
    return SourceMeta(
        url=_text(data.get("source")),
        derived=_text(data.get("derived")),
        vllm=_text(data.get("vllm")),
        vllm_ascend=_image(data.get("vllm_ascend")),
        source_verified=_verified(data.get("verified"), where),
        notes=notes[:MAX_NOTES],
        nodes=_nodes(data.get("nodes"), where),
    )
