"""JSON on the request path: orjson when it is installed, the standard library otherwise.

orjson (well kept, a wheel for every platform vLLM runs on, and already in a
vLLM image) parses and writes several times faster than :mod:`json`. It is
stricter on a few inputs the standard library takes (``NaN``, lone
surrogates); for those the standard library decides, so the proxy accepts and
refuses what it did before. One difference is orjson's own: an integer beyond
64 bits parses as a float. The zipapp, which carries aiohttp only, runs on
:mod:`json` alone.
"""

from __future__ import annotations

import json
from typing import Any

try:
    import orjson

    FAST = True
except ImportError:  # the zipapp's plain environment
    FAST = False


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
