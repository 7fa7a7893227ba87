"""JSON on the request path: orjson when it is installed, the standard library otherwise.

orjson (well kept, a wheel for every platform vLLM runs on, and already in a
vLLM image) parses and writes several times faster than :mod:`json`. It is
stricter on a few inputs the standard library takes (``NaN``, lone
surrogates); for those the standard library decides, so the proxy accepts and
refuses what it did before. One difference is orjson's own: an integer beyond
64 bits parses as a float. The zipapp, which carries aiohttp only, runs on
:mod:`json` alone.

:func:`members` reads a few members of a big object (an engine's answer) with
msgspec where it is installed (servekit's dependency, and vLLM's: every engine
image has it), building those members only.
"""

from __future__ import annotations

import codecs
import functools
import json
from types import ModuleType
from typing import Any

try:
    import orjson

    FAST = True
except ImportError:  # the zipapp's plain environment
    FAST = False

msgspec: ModuleType | None
try:
    import msgspec
except ImportError:  # the zipapp's plain environment: members() parses whole
    msgspec = None

UTF8_CHUNK = 1 << 20


def loads(raw: bytes | str) -> Any:
    """Parse JSON; ValueError (or RecursionError) as :func:`json.loads` raises them."""
    if FAST:
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass  # the standard library decides what orjson is stricter about
    return json.loads(raw)


def dumps(doc: Any) -> bytes:
    """Serialise to UTF-8 JSON bytes."""
    if FAST:
        try:
            return orjson.dumps(doc)
        except TypeError:  # orjson.JSONEncodeError: big ints, surrogates, odd keys
            pass
    return json.dumps(doc).encode()


def members(raw: bytes, keys: tuple[str, ...]) -> dict[str, Any] | None:
    """The members ``keys`` of the JSON object ``raw`` (absent ones left out); ``{}`` when it
    is JSON but not an object, None when it is not UTF-8 JSON.

    With msgspec, ``raw`` is decoded into a struct of those members only: the rest
    is checked to be JSON and skipped without being built (a 4 MiB answer of small
    objects peaked at 83 MB parsed whole, 20x; read this way, under 1.5x), and its
    UTF-8 is checked a megabyte at a time. What msgspec refuses and the standard
    library takes (``NaN``, a lone surrogate escape) is decided by :func:`loads`,
    parsed whole. Without msgspec (the zipapp's plain environment) ``raw`` is parsed
    whole: the proxy charges ``--memory-budget`` for that parse before it starts
    (:func:`servekit.proxy.budget.parse_cost`, at least what ``json.loads``
    allocates), an answer is at most ``--max-answer-bytes``, and a parse worker it
    grows past ``--parse-worker-rss`` is replaced once idle.
    """
    if msgspec is not None and _utf8(raw):
        try:
            doc = _members_decoder(keys).decode(raw)
        except msgspec.ValidationError:  # not an object: no members
            return {}
        except msgspec.DecodeError:
            pass  # malformed, or what only the standard library takes: it decides
        else:
            values = (getattr(doc, f"m{n}") for n in range(len(keys)))
            return {k: v for k, v in zip(keys, values, strict=True) if v is not msgspec.UNSET}
    try:
        whole = loads(raw.decode("utf-8"))
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return None
    if not isinstance(whole, dict):
        return {}
    return {key: whole[key] for key in keys if key in whole}


@functools.lru_cache(maxsize=16)
def _members_decoder(keys: tuple[str, ...]) -> Any:
    """A JSON decoder of an object into its members ``keys`` (any value), the rest skipped."""
    assert msgspec is not None
    fields = [(f"m{n}", Any, msgspec.UNSET) for n in range(len(keys))]
    rename = {f"m{n}": key for n, key in enumerate(keys)}
    return msgspec.json.Decoder(msgspec.defstruct("Members", fields, rename=rename))


def _utf8(raw: bytes) -> bool:
    """``raw`` is UTF-8, checked a chunk at a time (never a copy of it all)."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    view = memoryview(raw)
    try:
        for at in range(0, len(raw), UTF8_CHUNK):
            decoder.decode(view[at : at + UTF8_CHUNK])
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        return False
    return True
