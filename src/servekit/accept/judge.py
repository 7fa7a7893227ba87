"""The needle judge: is an answer the expected code, short, and not an echo?

The seed's matrix judges every retrieval answer the same way: the expected code
is present, no other needle's code is, the answer is at most 200 characters, and
it repeats none of the prompt's instruction phrases (a model that echoes the
prompt back often contains the code by accident). Replacement characters are
counted because they betray a broken detokenizer even when the code survives.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from servekit.vocabulary import StrictModel

MAX_ANSWER_CHARS = 200
REPLACEMENT_CHAR = "\ufffd"
_SPACES = re.compile(r"\s+")


class Judgement(StrictModel):
    """Why an answer passed or failed, as data."""

    passed: bool
    reason: str
    answer_chars: int
    replacement_chars: int
    echoed: tuple[str, ...] = ()


def _normalise(text: str) -> str:
    return _SPACES.sub(" ", text).strip().casefold()


def echoed_phrases(answer: str, phrases: Iterable[str]) -> tuple[str, ...]:
    """The instruction phrases that appear in ``answer`` (case and spacing ignored)."""
    flat = _normalise(answer)
    return tuple(p for p in phrases if _normalise(p) and _normalise(p) in flat)


def judge_answer(
    answer: str,
    expected: str,
    *,
    instructions: Iterable[str] = (),
    other_codes: Iterable[str] = (),
) -> Judgement:
    """Judge one answer; the first rule broken is the reason."""
    chars = len(answer)
    bad = answer.count(REPLACEMENT_CHAR)
    echoed = echoed_phrases(answer, instructions)

    def verdict(passed: bool, reason: str) -> Judgement:
        return Judgement(
            passed=passed, reason=reason, answer_chars=chars, replacement_chars=bad, echoed=echoed
        )

    if echoed:
        return verdict(False, f"answer echoes the prompt's instruction {echoed[0]!r}")
    if chars > MAX_ANSWER_CHARS:
        return verdict(False, f"answer is {chars} characters, over {MAX_ANSWER_CHARS}")
    if expected not in answer:
        return verdict(False, f"expected code {expected} not in answer {answer[:60]!r}")
    wrong = [c for c in other_codes if c != expected and c in answer]
    if wrong:
        return verdict(False, f"answer also names another needle's code {wrong[0]}")
    return verdict(True, f"answer names {expected} ({chars} characters)")
