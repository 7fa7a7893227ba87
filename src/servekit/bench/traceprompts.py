"""Prompts for a trace: exact input lengths, shared prefixes where ``hash_ids`` repeat.

A trace request of L tokens is cut into blocks of ``block_size`` tokens (the
last one partial), block i carrying ``hash_ids[i]``. Each block is a text of
exactly its size as the target's ``/tokenize`` counts it (without BOS),
starting `` [blk-TAG-ID]`` so that two ids never share content; the same id at
the same size is the same text, so requests that share leading ids share a
token prefix, which is what a prefix cache sees. Blocks the trace gives no id
get a fresh one. A block starts with a space and ``[`` so the tokenizer never
merges it with the end of the block before it (byte-level BPE pre-splits
there); each whole prompt is still counted by ``/tokenize`` once and must equal
L exactly, with the tokens the server adds (BOS) taken from the first block.
A partial last block too short for its tag is plain filler: nothing follows
it, and the unique blocks before it keep the prefix apart.
"""

from __future__ import annotations

import itertools

from servekit.bench.prompts import PromptBuilder
from servekit.bench.trace import TraceRequest
from servekit.errors import UsageError


class TracePrompts:
    """Builds and caches block texts for one replay (one tag: nothing shared across runs)."""

    def __init__(self, builder: PromptBuilder, block_size: int, tag: str) -> None:
        self._builder = builder
        self._block = block_size
        self._tag = tag
        self._texts: dict[tuple[int | str, int], str] = {}
        self._fresh = itertools.count()
        self._added: int | None = None

    async def added_tokens(self) -> int:
        """Tokens the server adds to a whole prompt (BOS), from /tokenize with and without."""
        if self._added is None:
            with_special = await self._builder.count("x", special=True)
            self._added = max(0, with_special - await self._builder.count("x", special=False))
        return self._added

    def sizes(self, input_tokens: int, added: int) -> list[int]:
        """Block sizes of an input: full blocks, then the remainder; BOS off the first."""
        sizes = [self._block] * (input_tokens // self._block)
        if input_tokens % self._block:
            sizes.append(input_tokens % self._block)
        sizes[0] -= added
        return sizes

    async def build(self, req: TraceRequest) -> str:
        """The prompt of one trace request, checked against /tokenize."""
        added = await self.added_tokens()
        sizes = self.sizes(req.input_tokens, added)
        if sizes[0] < 1:
            raise UsageError(
                f"--trace line {req.line}: input_length {req.input_tokens}: shorter than the "
                f"{added} token(s) the server adds"
            )
        parts = []
        for i, size in enumerate(sizes):
            key: int | str = req.hash_ids[i] if i < len(req.hash_ids) else f"u{next(self._fresh)}"
            parts.append(await self._text(key, size, last=i == len(sizes) - 1))
        prompt = "".join(parts)
        got = await self._builder.count(prompt, special=True)
        if got != req.input_tokens:
            raise UsageError(
                f"--trace line {req.line}: input_length {req.input_tokens}: the blocks count "
                f"{got} tokens together on this target's tokenizer; report this as a bug"
            )
        return prompt

    async def _text(self, key: int | str, size: int, *, last: bool) -> str:
        cached = self._texts.get((key, size))
        if cached is not None:
            return cached
        prefix = f" [blk-{self._tag}-{key}]"
        try:
            text = await self._builder.fit(prefix, size, special=False, hint="")
        except UsageError:
            if not last:
                raise UsageError(
                    f"--trace: block size {size} is too short for a block's tag {prefix!r}; "
                    "replay with a larger block size"
                ) from None
            text = await self._builder.fit("", size, special=False, hint="")
        self._texts[(key, size)] = text
        return text
