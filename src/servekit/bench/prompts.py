"""Prompts of an exact token length, each with a unique ``[req-NNNNN]`` prefix.

The seeds' method needs prompts of exactly N tokens that defeat prefix caching.
A prompt is the request's unique prefix followed by common English words and
single-token pads; its length is checked against the target's own
``/tokenize`` and adjusted until the count is exact.
"""

from __future__ import annotations

import asyncio
import itertools

from servekit.client import OpenAIClient
from servekit.errors import UsageError

_WORD_TEXT = (
    "the of and to in is was for on that with as by at from it be this are or "
    "an not but his had have they which one you were her all she there would "
    "their we him been has when who will more no if out so said what up its "
    "about into than them can only other new some could time these two may"
)
WORDS = tuple(_WORD_TEXT.split())
MAX_ROUNDS = 8
PADS = (" the", " a", ",")


def filler(n_words: int) -> str:
    """``n_words`` words cycling through a fixed list (deterministic)."""
    return " ".join(itertools.islice(itertools.cycle(WORDS), max(n_words, 0)))


class PromptBuilder:
    """Builds exact-length prompts against one target's tokenizer.

    Request ids come from one counter per builder, so every prompt of a run has
    its own prefix and no two requests share a cached prefix block. ``tag``
    (``[req-TAG-NNNNN]``) keeps the prompts of different builders apart: a
    second benchmark against the same server must not hit the cache of the first.
    """

    def __init__(self, client: OpenAIClient, start_id: int = 0, tag: str = "") -> None:
        self._client = client
        self._ids = itertools.count(start_id)
        self._tag = f"{tag}-" if tag else ""
        self._words_for: dict[tuple[int, bool], int] = {}

    def next_prefix(self) -> str:
        """A fresh ``[req-NNNNN]`` (or ``[req-TAG-NNNNN]``) prefix."""
        return f"[req-{self._tag}{next(self._ids):05d}]"

    async def build(self, n_tokens: int) -> str:
        """One prompt of exactly ``n_tokens`` tokens with a fresh prefix."""
        return await self.fit(self.next_prefix(), n_tokens)

    async def fit(
        self,
        prefix: str,
        n_tokens: int,
        *,
        special: bool = True,
        hint: str = "choose a larger --isl",
    ) -> str:
        """``prefix`` and filler of exactly ``n_tokens`` tokens as the target counts them.

        Words bring the count to at most ``n_tokens`` (some words are several
        tokens, so word counts can skip a length); single-token pads (" the",
        else " a", ",") then close the gap exactly. ``special`` counts the
        tokens the server adds (BOS) too, as a whole prompt is counted; a piece
        of a prompt (a trace's block) is counted without them.
        """
        words = self._words_for.get((n_tokens, special), n_tokens)
        text, count = await self._fit_words(prefix, words, n_tokens, special)
        for pad in PADS:
            padded, got = await self._pad(text, count, pad, n_tokens, special)
            if got == n_tokens:
                return padded
        raise UsageError(
            f"prompt length {n_tokens}: the target's tokenizer cannot reach it exactly "
            f"(prefix {prefix!r} alone may be longer); {hint}"
        )

    async def count(self, text: str, *, special: bool = True) -> int:
        """Tokens of ``text`` by the target's own /tokenize."""
        return (await self._client.tokenize(text, add_special_tokens=special)).count

    async def _fit_words(
        self, prefix: str, words: int, n_tokens: int, special: bool
    ) -> tuple[str, int]:
        """Prefix plus words with a count at most ``n_tokens`` (as close as found)."""
        for _ in range(MAX_ROUNDS):
            text = f"{prefix} {filler(words)}" if words > 0 else prefix
            count = await self.count(text, special=special)
            if count <= n_tokens or words == 0:
                self._words_for[(n_tokens, special)] = words
                return text, count
            words = max(0, words - (count - n_tokens))
        return prefix, await self.count(prefix, special=special)

    async def _pad(
        self, text: str, count: int, pad: str, n_tokens: int, special: bool
    ) -> tuple[str, int]:
        """Append ``pad`` until the count is exact; the closest try otherwise."""
        k = n_tokens - count
        for _ in range(MAX_ROUNDS):
            if k < 0:
                break
            padded = text + pad * k
            got = await self.count(padded, special=special) if k else count
            if got == n_tokens:
                return padded, got
            k += n_tokens - got
        return text, count

    async def build_many(self, n_tokens: int, count: int) -> list[str]:
        """``count`` prompts of ``n_tokens``; the first calibrates the rest."""
        if count <= 0:
            return []
        first = await self.build(n_tokens)
        rest = await asyncio.gather(*(self.build(n_tokens) for _ in range(count - 1)))
        return [first, *rest]
