"""The text contract between the acceptance checks and the simulator, written once.

The acceptance checks ask questions whose answers they can judge; the
simulator answers them from the prompt alone. Both sides use what is here, so
they cannot drift:

- the needle wording: ``The secret code for needle X is CODE.`` in the
  document, ``What is the secret code for needle X?`` as the question (X one
  capital letter, CODE letters and digits in dash-joined groups such as
  ``ZQ7K-3341``), and ``Repeat the code CODE`` for the short check;
- :func:`retrieve`: the answer a model that follows the contract gives;
- the simulator's tokenizer (:func:`pieces`, :func:`encode`) and chat template
  (:func:`render_chat`), which the acceptance suite's tests count with.

Standard library only: the simulator and the proxy import it without pulling
anything else of servekit.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Sequence

NEEDLE_NAME = r"[A-Z]"
CODE = r"[A-Za-z0-9]+(?:-[A-Za-z0-9]+)*"
QUESTION = re.compile(rf"What is the secret code for needle ({NEEDLE_NAME})\?")
REPEAT = re.compile(rf"Repeat the code ({CODE})")
_SENTENCE_CODE = re.compile(rf"({CODE})\.")
_TAIL_CHARS = 2000


def needle_sentence(name: str, code: str) -> str:
    """The sentence that hides needle ``name`` in a document."""
    return f"The secret code for needle {name} is {code}."


def question(name: str) -> str:
    """The question that retrieves needle ``name``."""
    return f"What is the secret code for needle {name}?"


def short_instruction(code: str) -> str:
    """The short check's request: repeat a code given in the prompt."""
    return f"Repeat the code {code}"


def retrieve(prompt: str, asked: str | None = None) -> str | None:
    """The code a contract-following model answers, or None when nothing is asked.

    ``asked`` is where the question is looked for (the last user message of a
    chat); by default the prompt's last 2,000 characters. The last needle
    question wins; a question about a needle the prompt does not hold, or no
    question but a ``Repeat the code`` request, falls through to the repeat.
    """
    ask = asked if asked is not None else prompt[-_TAIL_CHARS:]
    names = QUESTION.findall(ask)
    if names:
        lead = needle_sentence(names[-1], "")[:-1]
        at = prompt.rfind(lead)
        if at >= 0:
            found = _SENTENCE_CODE.match(prompt, at + len(lead))
            if found:
                return found.group(1)
    repeat = REPEAT.findall(ask)
    return repeat[-1] if repeat else None


# -- tokenizer and chat template ------------------------------------------------

_PIECE = re.compile(r" ?\w+| ?[^\s\w]+|\s+(?!\S)|\s+")
_IDS: dict[str, int] = {}
_IDS_MAX = 200_000


def pieces(text: str) -> list[str]:
    """Word pieces: an optional space plus a word or punctuation run, or whitespace.

    Joining them gives the text back exactly (``"".join(pieces(t)) == t``), so
    /tokenize, usage and generated tokens always agree.
    """
    return _PIECE.findall(text)


def piece_ids(parts: Sequence[str]) -> list[int]:
    """Token ids of pieces: a 31-bit CRC, stable across processes (memoised)."""
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
    """The chat template: a ``<|role|>\\ncontent\\n`` block per message, then ``<|assistant|>\\n``."""
    out = [f"<|{role}|>\n{content}\n" for role, content in messages]
    if add_generation_prompt:
        out.append("<|assistant|>\n")
    return "".join(out)
