"""servekit's vocabulary: every word more than one package uses, defined once.

Roles, engine kinds, the vLLM metric names the figures read, the URL check,
atomic writes, Markdown cells and the strict frozen model live here, at the
bottom of the layers, so that no package redefines them and a change to one of
them is one edit. Modules the proxy's zipapp needs are standard library only
(the zipapp runs on an engine image without pydantic); the face imports nothing
up front for the same reason.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from servekit.lazyface import lazy_face

if TYPE_CHECKING:
    # vocab-utils: URL check, atomic write, strict model, Markdown cells, bounded reads.
    from servekit.vocabulary.atomic import atomic_write_bytes, atomic_write_text, atomic_writer
    from servekit.vocabulary.markdown import markdown_cell
    from servekit.vocabulary.model import StrictModel
    from servekit.vocabulary.reading import read_at_most
    from servekit.vocabulary.urls import MAX_HOST, SCHEMES, check_url, is_url

_NAMES: dict[str, str] = {
    # vocab-utils: URL check, atomic write, strict model, Markdown cells, bounded reads.
    "MAX_HOST": "urls",
    "SCHEMES": "urls",
    "StrictModel": "model",
    "atomic_write_bytes": "atomic",
    "atomic_write_text": "atomic",
    "atomic_writer": "atomic",
    "check_url": "urls",
    "is_url": "urls",
    "markdown_cell": "markdown",
    "read_at_most": "reading",
}
__getattr__, __dir__ = lazy_face(__name__, _NAMES)
__all__ = [
    # vocab-utils
    "MAX_HOST",
    "SCHEMES",
    "StrictModel",
    "atomic_write_bytes",
    "atomic_write_text",
    "atomic_writer",
    "check_url",
    "is_url",
    "markdown_cell",
    "read_at_most",
]
