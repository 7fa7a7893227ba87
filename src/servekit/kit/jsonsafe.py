"""JSON from untrusted bytes: size-capped, strictly UTF-8, never a RecursionError.

Kits and images carry JSON written by someone else. ``json.loads`` raises
``RecursionError`` on deep nesting and ``UnicodeDecodeError`` on bad bytes;
here every such failure is a :class:`~servekit.kit.errors.KitRefused` naming
what was read, so no command ever shows a traceback for a hostile document.
"""

from __future__ import annotations

import json
from typing import Any

from servekit.kit.errors import KitRefused

MAX_DEPTH = 64


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether a parsed JSON value nests containers more than ``limit`` deep (iterative)."""
    stack: list[tuple[Any, int]] = [(value, 1)] if isinstance(value, (dict, list)) else []
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        children = item.values() if isinstance(item, dict) else item
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False


def decode_text(data: bytes, what: str) -> str:
    """Bytes as UTF-8, strictly: a bad byte is refused with its offset."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise KitRefused(
            f"{what}: not UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start})"
        ) from None


def load_json(data: bytes, what: str, max_depth: int = MAX_DEPTH) -> Any:
    """Parse JSON from bytes; refuse bad UTF-8, bad syntax and nesting past ``max_depth``."""
    text = decode_text(data, what)
    try:
        value = json.loads(text)
        deep = _deeper_than(value, max_depth)
    except RecursionError:
        deep = True
    except ValueError as exc:
        raise KitRefused(f"{what}: invalid JSON ({str(exc)[:120]})") from None
    if deep:
        raise KitRefused(f"{what}: JSON nests deeper than {max_depth} levels")
    return value
