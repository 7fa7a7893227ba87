"""servekit.importer: bring a source-convention layout folder in by running it, contained.

Face: :func:`extract_folder` (every node rank's entry on the fake platform, in a
bubblewrap sandbox, -> :class:`FolderFacts`), :func:`read_meta` (meta.yaml ->
:class:`SourceMeta`), :class:`ImportRefused` (one line, exit 2). ``platform/``
is the fake platform itself (rank table, fake tools, recorders, normalizer).
"""

from __future__ import annotations

from servekit.importer.contain import ImportRefused
from servekit.importer.extract import FolderFacts, SourceRef, extract_folder
from servekit.importer.meta import SourceMeta, read_meta

__all__ = [
    "FolderFacts",
    "ImportRefused",
    "SourceMeta",
    "SourceRef",
    "extract_folder",
    "read_meta",
]
