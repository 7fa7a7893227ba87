"""Needles and the prompts built around them, worded by the text contract.

The wording of needles, questions and the short check comes from
:mod:`servekit.textcontract`, which the simulator answers from; here are the
codes, where needles sit in the filler and the instructions around them.
"""

from __future__ import annotations

import random
import string
from collections.abc import Sequence

from pydantic import Field

from servekit.textcontract import needle_sentence, question, short_instruction
from servekit.vocabulary import StrictModel

NEEDLE_NAMES = ("A", "B", "C", "D")
SYSTEM_PROMPT = "You are a careful reader. Answer questions about the document exactly."
ANSWER_LINE = "Answer with the code only."
DEFAULT_DEPTHS = (0.5, 0.5, 0.5, 0.5)
__all__ = [
    "ANSWER_LINE",
    "DEFAULT_DEPTHS",
    "NEEDLE_NAMES",
    "SYSTEM_PROMPT",
    "Needle",
    "ask",
    "embed",
    "instruction_phrases",
    "make_codes",
    "make_needles",
    "question",
    "short_instruction",
]


class Needle(StrictModel):
    """One needle: its name, its code and where in the filler it sits (0..1)."""

    name: str
    code: str
    depth: float = Field(default=0.5, ge=0.0, le=1.0)

    @property
    def sentence(self) -> str:
        return needle_sentence(self.name, self.code)

    @property
    def question(self) -> str:
        return question(self.name)


def make_codes(seed: str, count: int = len(NEEDLE_NAMES)) -> tuple[str, ...]:
    """``count`` distinct codes like ``ZQ7K-3341``, a pure function of ``seed``."""
    rng = random.Random(seed)
    alphabet = string.ascii_uppercase + string.digits
    codes: list[str] = []
    while len(codes) < count:
        code = "".join(rng.choices(alphabet, k=4)) + "-" + "".join(rng.choices(string.digits, k=4))
        if code not in codes:
            codes.append(code)
    return tuple(codes)


def make_needles(seed: str, depths: Sequence[float] = DEFAULT_DEPTHS) -> tuple[Needle, ...]:
    """Needles A-D with distinct codes at ``depths`` (one depth per needle)."""
    codes = make_codes(seed, len(NEEDLE_NAMES))
    return tuple(
        Needle(name=n, code=c, depth=d) for n, c, d in zip(NEEDLE_NAMES, codes, depths, strict=True)
    )


def embed(filler: str, needles: Sequence[Needle]) -> str:
    """Insert each needle sentence at the paragraph boundary nearest its depth."""
    paras = filler.split("\n\n")
    bounds = [0]
    for p in paras:
        bounds.append(bounds[-1] + len(p) + 2)
    total = max(bounds[-1], 1)
    inserts: dict[int, list[str]] = {}
    for needle in needles:
        at = min(range(len(bounds)), key=lambda i: abs(bounds[i] - needle.depth * total))
        inserts.setdefault(at, []).append(needle.sentence)
    out: list[str] = []
    for i, para in enumerate(paras):
        out.extend(inserts.get(i, []))
        out.append(para)
    out.extend(inserts.get(len(paras), []))
    return "\n\n".join(out)


def ask(document: str, name: str) -> str:
    """The user message: the document, a blank line, the question, the answer line."""
    return f"{document}\n\n{question(name)}\n{ANSWER_LINE}"


def instruction_phrases(name: str | None = None) -> tuple[str, ...]:
    """The prompt phrases an answer must not echo."""
    phrases = [SYSTEM_PROMPT, ANSWER_LINE, "Answer questions about the document"]
    if name is not None:
        phrases.append(question(name))
    return tuple(phrases)
