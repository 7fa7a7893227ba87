"""Carrying on an answer: a prompt that ends with part of its own answer gets the rest.

A real model is autoregressive: fed its prompt plus the first k tokens it
generated (greedy), it generates token k+1 onwards, which is what request
migration relies on (the proxy resends prompt + tokens so far as token ids to
another decoder). The simulator's answer is a pure function of the whole prompt,
so without help a resent prompt would get a different answer. This keeps, per
process (every endpoint of one simulator shares it, as replicas share weights),
the text of the prompts it answered, keyed by their token ids; a token-id prompt
that is such a prompt followed by the start of its planned answer is answered
with the rest of that plan. Bounded: the last :data:`CAPACITY` prompts.

What the prompt held (thinking asked, tools offered) carries over; what acts at
sampling time on the tokens generated so far does not: a continuation under
structured outputs starts a new grammar, and frequency or presence penalties
count only its own output, so a real engine would not write the rest of the
first answer there and neither does the simulator (it answers afresh).
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from dataclasses import dataclass

from servekit.sim.openai import GenRequest
from servekit.textcontract import piece_ids

CAPACITY = 65_536
_HEAD = 16  # prompts are indexed by their first tokens and their length


@dataclass(frozen=True, slots=True)
class _Seen:
    length: int
    digest: int
    prompt_text: str
    question_text: str | None
    thinking: bool  # the template asked for thinking (part of the prompt)
    tool: str | None  # the tools the template offered, as the function called


class Transcripts:
    """Prompts answered, so a continuation of one can be recognised."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        self._capacity = capacity
        self._seen: OrderedDict[tuple[tuple[int, ...], int], _Seen] = OrderedDict()

    def record(self, req: GenRequest, digest: int) -> None:
        """Remember a text prompt (token-id prompts have no text to remember)."""
        if req.prompt_text is None or not req.prompt_ids:
            return
        key = (tuple(req.prompt_ids[:_HEAD]), len(req.prompt_ids))
        self._seen[key] = _Seen(
            len(req.prompt_ids), digest, req.prompt_text, req.question_text, req.thinking, req.tool
        )
        self._seen.move_to_end(key)
        while len(self._seen) > self._capacity:
            self._seen.popitem(last=False)

    def origin(self, req: GenRequest) -> tuple[GenRequest, int, list[int]] | None:
        """For a token-id prompt: the remembered request it continues, its digest and
        the tokens after that prompt; None when it continues nothing remembered."""
        ids = req.prompt_ids
        if req.prompt_text is not None or len(ids) < 2:
            return None
        head = tuple(ids[:_HEAD])
        for length in range(len(ids) - 1, 0, -1):
            seen = self._seen.get((head if length >= _HEAD else tuple(ids[:length]), length))
            if seen is None or hash(tuple(ids[:length])) != seen.digest:
                continue
            base = dataclasses.replace(
                req,
                prompt_text=seen.prompt_text,
                question_text=seen.question_text,
                prompt_ids=ids[:length],
                thinking=seen.thinking,
                tool=seen.tool,
            )
            return base, seen.digest, ids[length:]
        return None


def continues(plan: list[str], done: list[int]) -> bool:
    """Whether ``plan`` (pieces) starts with the token ids ``done``."""
    return len(plan) >= len(done) and piece_ids(plan[: len(done)]) == done


TRANSCRIPTS = Transcripts()
