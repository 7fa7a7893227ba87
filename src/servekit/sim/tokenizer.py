"""The simulator's tokenizer: word pieces, fast, and the same everywhere.

A piece is an optional leading space plus a run of word characters, or of
punctuation, or a whitespace run (GPT-2's split). Joining the pieces gives the
text back exactly, so the count that /tokenize reports, the usage of a request
and the tokens the engine generates always agree. Ids are a CRC of the piece:
stable across processes and runs, so prefix-cache block hashes are too.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Sequence

_PIECE = re.compile(r" ?\w+| ?[^\s\w]+|\s+(?!\S)|\s+")
_IDS: dict[str, int] = {}
_IDS_MAX = 200_000


def pieces(text: str) -> list[str]:
    """Split ``text`` into pieces; ``"".join(pieces(t)) == t``."""
    return _PIECE.findall(text)


def piece_ids(parts: Sequence[str]) -> list[int]:
    """Token ids of pieces (a 31-bit CRC, memoised)."""
    get = _IDS.get
    out: list[int] = []
    append = out.append
    for p in parts:
        i = get(p)
        if i is None:
            i = zlib.crc32(p.encode("utf-8")) & 0x7FFFFFFF
            if len(_IDS) >= _IDS_MAX:
                _IDS.clear()
            _IDS[p] = i
        append(i)
    return out


def encode(text: str) -> list[int]:
    """Token ids of ``text``."""
    return piece_ids(pieces(text))


def render_chat(messages: Sequence[tuple[str, str]], add_generation_prompt: bool = True) -> str:
    """The simulator's chat template: ``<|role|>`` headers, one message per block."""
    out = [f"<|{role}|>\n{content}\n" for role, content in messages]
    if add_generation_prompt:
        out.append("<|assistant|>\n")
    return "".join(out)
