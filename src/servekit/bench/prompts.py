"""Prompts of an exact token length, each with a unique ``[req-NNNNN]`` prefix.

The seeds' method needs prompts of exactly N tokens that defeat prefix caching.
A prompt is the request's unique prefix followed by common English words, each
a single token in most tokenizers; its length is checked against the target's
own ``/tokenize`` and the filler adjusted until the count is exact.
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


def filler(n_words: int) -> str:
    """``n_words`` words cycling through a fixed list (deterministic)."""
    return " ".join(itertools.islice(itertools.cycle(WORDS), max(n_words, 0)))


class PromptBuilder:
    """Builds exact-length prompts against one target's tokenizer.

    Request ids come from one counter per builder, so every prompt of a run has
    its own prefix and no two requests share a cached prefix block.
    """

    def __init__(self, client: OpenAIClient, start_id: int = 0) -> None:
        self._client = client
        self._ids = itertools.count(start_id)
        self._words_for: dict[int, int] = {}

    def next_prefix(self) -> str:
        """A fresh ``[req-NNNNN]`` prefix."""
        return f"[req-{next(self._ids):05d}]"

    async def build(self, n_tokens: int) -> str:
        """One prompt of exactly ``n_tokens`` tokens with a fresh prefix."""
        prefix = self.next_prefix()
        words = self._words_for.get(n_tokens, n_tokens)
        for _ in range(MAX_ROUNDS):
            text = f"{prefix} {filler(words)}" if words > 0 else prefix
            count = (await self._client.tokenize(text)).count
            if count == n_tokens:
                self._words_for[n_tokens] = words
                return text
            step = n_tokens - count
            if words + step < 0:
                break
            words += step
        raise UsageError(
            f"prompt length {n_tokens}: the target's tokenizer cannot reach it exactly "
            f"(prefix {prefix!r} alone may be longer); choose a larger --isl"
        )

    async def build_many(self, n_tokens: int, count: int) -> list[str]:
        """``count`` prompts of ``n_tokens``; the first calibrates the rest."""
        if count <= 0:
            return []
        first = await self.build(n_tokens)
        rest = await asyncio.gather(*(self.build(n_tokens) for _ in range(count - 1)))
        return [first, *rest]
