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

Where each engine is a process of its own (``servekit sim serve``: the fake
clusters run one per pod), a continuation goes to a decoder process that never
saw the prompt; from the token ids alone (CRCs of pieces) it cannot tell what the
prompt said, so it would answer afresh: a changed answer, which the proxy
refuses where the client's part overlaps it ("the new decoder's token ids differ
from what the client has"). Such processes share their transcripts through a
folder (:data:`SHARED_ENV`, :meth:`Transcripts.share`), one small JSON file per
prompt, written whole (temp file, then rename), read back on a miss, as replicas
share weights. The folder lives as long as the deployment that made it (the fake
cluster's own temporary root).

What the prompt held (thinking asked, tools offered) carries over; what acts at
sampling time on the tokens generated so far does not: a continuation under
structured outputs starts a new grammar, and frequency or presence penalties
count only its own output, so a real engine would not write the rest of the
first answer there and neither does the simulator (it answers afresh).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servekit.sim.openai import GenRequest
from servekit.textcontract import piece_ids
from servekit.vocabulary import atomic_write_text

CAPACITY = 65_536
_HEAD = 16  # prompts are indexed by their first tokens and their length
SHARED_ENV = "SERVEKIT_SIM_TRANSCRIPTS"  # the folder the simulator processes share
MAX_SHARED_BYTES = 64 * 1024 * 1024  # a transcript file larger than this is not read
SHARED_BUDGET = 512 * 1024 * 1024
"""Bytes one process writes to the shared folder at most; past them it shares no more
(a continuation of a later prompt on another process is answered afresh, which the
proxy refuses visibly): a long campaign cannot fill the disk through it."""


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

    def __init__(
        self, capacity: int = CAPACITY, shared: Path | None = None, budget: int = SHARED_BUDGET
    ) -> None:
        self._capacity = capacity
        self._seen: OrderedDict[tuple[tuple[int, ...], int], _Seen] = OrderedDict()
        self.shared = shared
        self.budget = budget
        self.shared_bytes = 0  # written to the shared folder by this process

    def share(self, folder: Path | None) -> None:
        """Share transcripts with the other simulator processes using ``folder``."""
        if folder is not None:
            folder.mkdir(parents=True, exist_ok=True)
        self.shared = folder

    def forget(self) -> None:
        """Drop what this process remembers (what it shared stays shared)."""
        self._seen.clear()

    def record(self, req: GenRequest, digest: int) -> None:
        """Remember a text prompt (token-id prompts have no text to remember)."""
        if req.prompt_text is None or not req.prompt_ids:
            return
        ids = req.prompt_ids
        seen = _Seen(len(ids), digest, req.prompt_text, req.question_text, req.thinking, req.tool)
        self._remember(ids, seen)
        if self.shared is not None and self.shared_bytes < self.budget:
            self.shared_bytes += _write_shared(self.shared, ids, seen)

    def _remember(self, ids: list[int], seen: _Seen) -> None:
        """Keep ``seen`` (the last CAPACITY)."""
        key = (tuple(ids[:_HEAD]), len(ids))
        self._seen[key] = seen
        self._seen.move_to_end(key)
        while len(self._seen) > self._capacity:
            self._seen.popitem(last=False)

    def origin(self, req: GenRequest) -> tuple[GenRequest, int, list[int]] | None:
        """For a token-id prompt: the remembered request it continues, its digest and
        the tokens after that prompt; None when it continues nothing remembered."""
        ids = req.prompt_ids
        if req.prompt_text is not None or len(ids) < 2:
            return None
        seen = self._find(ids)
        if seen is None and self.shared is not None:
            seen = _read_shared(self.shared, ids)
            if seen is not None:
                self._remember(ids[: seen.length], seen)
        if seen is None:
            return None
        length = seen.length
        base = dataclasses.replace(
            req,
            prompt_text=seen.prompt_text,
            question_text=seen.question_text,
            prompt_ids=ids[:length],
            thinking=seen.thinking,
            tool=seen.tool,
        )
        return base, seen.digest, ids[length:]

    def _find(self, ids: list[int]) -> _Seen | None:
        """The longest remembered prompt that ``ids`` continues."""
        head = tuple(ids[:_HEAD])
        for length in range(len(ids) - 1, 0, -1):
            seen = self._seen.get((head if length >= _HEAD else tuple(ids[:length]), length))
            if seen is not None and hash(tuple(ids[:length])) == seen.digest:
                return seen
        return None


def _folder(root: Path, head: list[int]) -> Path:
    """Where the prompts that start with ``head`` (their first _HEAD ids, or all) are kept."""
    return root / hashlib.blake2b(repr(tuple(head)).encode(), digest_size=10).hexdigest()


def _write_shared(root: Path, ids: list[int], seen: _Seen) -> int:
    """``seen`` as ``<folder of its head>/<length>_<digest>.json``, written whole (temp,
    rename): a process reading it meanwhile sees it whole or not at all. The bytes
    written (0: there already, or not written)."""
    folder = _folder(root, ids[:_HEAD])
    path = folder / _name(seen.length, seen.digest)
    if path.exists():  # another engine (or this one) answered this prompt before
        return 0
    doc = {"digest": seen.digest, "prompt_text": seen.prompt_text,
           "question_text": seen.question_text, "thinking": seen.thinking,
           "tool": seen.tool}  # fmt: skip
    text = json.dumps(doc)
    try:
        atomic_write_text(path, text)
    except OSError:
        return 0  # a full or removed folder: this prompt is not shared (answers stay whole)
    return len(text.encode())


def _read_shared(root: Path, ids: list[int]) -> _Seen | None:
    """The longest prompt another process shared that ``ids`` continues."""
    folder = _folder(root, ids[:_HEAD])
    try:
        names = os.listdir(folder)
    except OSError:
        names = []
    found = {n.partition("_")[0] for n in names if n.endswith(".json")}
    lengths = sorted((int(n) for n in found if n.isdigit()), reverse=True)
    tried = [(folder, n) for n in lengths if _HEAD <= n < len(ids)]
    tried += [(_folder(root, ids[:n]), n) for n in range(min(_HEAD, len(ids)) - 1, 0, -1)]
    for where, length in tried:
        digest = hash(tuple(ids[:length]))
        seen = _load(where / _name(length, digest), length)
        if seen is not None and seen.digest == digest:
            return seen
    return None


def _name(length: int, digest: int) -> str:
    """A prompt's file: its length, then its digest (prompts alike in head and length
    differ there)."""
    return f"{length}_{digest}.json"


def _load(path: Path, length: int) -> _Seen | None:
    """One shared transcript, or None (absent, too large or not one)."""
    try:
        with path.open("rb") as f:
            data = f.read(MAX_SHARED_BYTES + 1)
        doc: Any = json.loads(data) if len(data) <= MAX_SHARED_BYTES else None
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict):
        return None
    digest, text, question = doc.get("digest"), doc.get("prompt_text"), doc.get("question_text")
    thinking, tool = doc.get("thinking"), doc.get("tool")
    if not (
        isinstance(digest, int)
        and isinstance(text, str)
        and (question is None or isinstance(question, str))
        and isinstance(thinking, bool)
        and (tool is None or isinstance(tool, str))
    ):
        return None
    return _Seen(length, digest, text, question, thinking, tool)


def continues(plan: list[str], done: list[int]) -> bool:
    """Whether ``plan`` (pieces) starts with the token ids ``done``."""
    return len(plan) >= len(done) and piece_ids(plan[: len(done)]) == done


TRANSCRIPTS = Transcripts()
