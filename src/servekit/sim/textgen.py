"""What the simulated model says: a pure function of the prompt and the sampling.

Retrieval follows the contract with the acceptance checks
(:mod:`servekit.textcontract`): a needle question is answered with the code the
prompt holds, ``Repeat the code CODE`` with ``CODE``; the colour question about
images (:mod:`servekit.visioncontract`) with the colours seen. Anything else gets
seeded pseudo-text. The same inputs give the same tokens whether the request streams,
runs hot or cold, alone or in a batch, through PD or not; ``disagree_seed``
changes the pseudo-text (and the codes) to prove invariant checks can fail, and
``misbehave`` makes retrieval answers wrong to prove the judge can fail.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from functools import cache

from servekit.sim.faults import Misbehave
from servekit.textcontract import pieces, retrieve
from servekit.visioncontract import colour_answer

_WORDS = (
    "the",
    "engine",
    "serves",
    "tokens",
    "while",
    "cache",
    "keeps",
    "blocks",
    "and",
    "proxy",
    "routes",
    "each",
    "request",
    "to",
    "a",
    "decoder",
    "that",
    "streams",
    "text",
    "back",
    "client",
    "over",
    "quiet",
    "network",
    "under",
    "steady",
    "load",
    "with",
    "many",
    "short",
    "prompts",
    "few",
    "long",
    "ones",
    "in",
    "every",
    "batch",
)
_LONG_ANSWER_WORDS = 60
_TEXT_PIECES = 1 << 16


@dataclass(frozen=True, slots=True, repr=False)
class Sampling:
    """The sampling parameters that change what is generated."""

    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    penalty: float = 0.0  # frequency + presence: counts of the tokens generated so far
    repetition: float = 1.0  # the repetition penalty: prompt and output tokens alike

    def __repr__(self) -> str:
        """Part of every answer's seed: the penalties appear only when set, so the
        answers of requests without them stay what they always were."""
        base = (
            f"Sampling(temperature={self.temperature!r}, top_p={self.top_p!r}, seed={self.seed!r}"
        )
        if (self.penalty, self.repetition) != (0.0, 1.0):
            base += f", penalty={self.penalty!r}, repetition={self.repetition!r}"
        return base + ")"


@dataclass(frozen=True, slots=True)
class Voice:
    """Per-endpoint behaviour that changes the output."""

    disagree_seed: int | None = None
    misbehave: Misbehave = "none"
    retrieval: bool = True


def answer_pieces(
    prompt_text: str | None,
    question_text: str | None,
    prompt_digest: int,
    *,
    sampling: Sampling,
    voice: Voice,
    natural: tuple[int, int],
) -> list[str]:
    """The natural answer (up to its end of sequence) as token pieces."""
    seed = stable_seed(prompt_digest, sampling, voice.disagree_seed)
    if voice.retrieval and prompt_text is not None:
        code = retrieve(prompt_text, question_text or None)
        if code is not None:
            return _deliver(code, prompt_text, question_text, voice, seed)
        colours = colour_answer(question_text or prompt_text)
        if colours is not None:
            return pieces(colours)
    lo, hi = natural
    out = pseudo_pieces(seed, lo + seed % (hi - lo + 1))
    if out[-1] != ".":
        out.append(".")
    return out


def continuation(prompt_digest: int, sampling: Sampling, voice: Voice, count: int) -> list[str]:
    """Text after the natural answer, for ``ignore_eos`` and ``min_tokens``."""
    return pseudo_pieces(stable_seed(prompt_digest, sampling, voice.disagree_seed, "eos"), count)


def stable_seed(*parts: object) -> int:
    """A seed from plain values that is the same in every process (unlike ``hash``)."""
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def pseudo_pieces(seed: int, count: int) -> list[str]:
    """``count`` pieces of pseudo-text from a seed: a slice of one fixed seeded text.

    Slicing a precomputed text is far cheaper than seeding a generator per
    request, and just as much a pure function of the seed.
    """
    text = _text()
    at = seed % len(text)
    out = list(text[at : at + count])
    while len(out) < count:
        out.extend(text[: count - len(out)])
    return out


@cache
def _text() -> tuple[str, ...]:
    rng = random.Random(20261129)
    out: list[str] = []
    while len(out) < _TEXT_PIECES:
        out.extend(" " + _WORDS[rng.randrange(len(_WORDS))] for _ in range(rng.randint(5, 12)))
        out.append(".")
    return tuple(out)


def _deliver(
    code: str, prompt_text: str, question_text: str | None, voice: Voice, seed: int
) -> list[str]:
    if voice.disagree_seed is not None:
        code = _garble(code, voice.disagree_seed)
    if voice.misbehave == "wrong_code":
        return pieces(_garble(code, 1))
    if voice.misbehave == "echo_prompt":
        # The request's last two lines echoed back, with the code in it by accident.
        tail = " ".join((question_text or prompt_text).strip().splitlines()[-2:])
        return pieces(f"{tail} {code}")
    if voice.misbehave == "long_answer":
        return pieces(code) + pseudo_pieces(seed, _LONG_ANSWER_WORDS)
    return pieces(code)


def _garble(code: str, salt: int) -> str:
    """A different code of the same shape (letters and digits rotated)."""
    out = []
    for ch in code:
        if ch.isdigit():
            out.append(str((int(ch) + 1 + salt) % 10))
        elif ch.isalpha():
            base = ord("A") if ch.isupper() else ord("a")
            out.append(chr(base + (ord(ch) - base + 1 + salt) % 26))
        else:
            out.append(ch)
    return "".join(out)
