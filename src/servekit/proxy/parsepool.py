"""Big bodies parsed in worker processes, so the event loop keeps serving meanwhile.

``json.loads`` keeps the GIL, so a thread does not free the loop (an 11 MiB
parse in a thread stalled it 0.28 of its 0.35 s). And the parse is not the
only cost: a 32 MiB chat request of a million small message objects held the
loop 0.7 s in ``json.loads``, 1.3 s more in the prompt estimate, and every
stage payload written from it took 0.4 s of ``json.dumps``.

A body larger than ``--parse-inline-bytes`` (1 MiB) goes to one of
``--parse-workers`` processes (1; 0: everything is parsed on the loop). The
worker parses it, checks it and estimates its prompt exactly as the loop does
for a small body (:mod:`servekit.proxy.validation`, :mod:`servekit.proxy.requests`)
and sends back only what the proxy reads, in a form that unpickles in time
proportional to its bytes, not to its values:

- the fields the proxy reads or writes (:data:`KEPT`) decoded, except a list or
  object whose JSON text passes :data:`RAW_ABOVE` (16 KiB), which comes as
  :class:`Raw`, that text;
- every other member of the body, together, as one :class:`Members` (their text).

:func:`encode_body` writes a stage payload built from such a body (a copy of
the client's body with a few fields set) by splicing those texts: the bytes
``json.dumps`` writes for the parsed body, at the cost of copying them. Replica
mode sends the client's bytes as they came. Engines' unstreamed answers above
the same size are parsed in a worker too, and only the members the proxy reads
come back (:func:`answer_fields`); with msgspec, only those members are even
built (an answer of many small values cost about 36x its size parsed whole).

A worker starts with the first big body it gets (spawned processes: the loop's
threads are not forked) and stops with the proxy. A worker that dies (killed,
out of memory) fails the bodies it had with a 503 ``worker_failed``, and the
next big body starts a new one; a worker whose memory passes
``--parse-worker-rss`` once idle is replaced (:class:`Workers`). The worker
runs the proxy's own modules and the standard library (orjson and msgspec when
installed), so the zipapp has it too.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import signal
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextvars import ContextVar
from typing import Any, NamedTuple, TypeVar

from servekit.proxy import jsoncodec
from servekit.proxy.carry import CARRIED
from servekit.proxy.failures import ProxyError
from servekit.proxy.kvindex import prompt_keys
from servekit.proxy.requests import make_ticket
from servekit.proxy.validation import BY_ROUTE, COMMON, check_request

T = TypeVar("T")
RAW_ABOVE = 16 << 10
RSS_CHECK_DELAY_S = 0.05  # after its last call, time for the worker to drop what it sent
REST = "\x00members"  # the key of the body's Members (never a key the proxy sets)
# What the kv-events policy sends an engine's /tokenize of a text or chat prompt.
TOKENIZE_KEYS = ("model", "prompt", "messages", "add_special_tokens", "add_generation_prompt",
                 "continue_final_message", "chat_template", "chat_template_kwargs", "tools",
                 "mm_processor_kwargs")  # fmt: skip
# What the proxy reads from a body on the loop (migration's carried fields, the
# checked ones, the prompt, what /tokenize is sent) and every field a stage payload sets.
KEPT = frozenset(
    {*COMMON, *CARRIED, *TOKENIZE_KEYS, "input", "instructions", "return_token_ids"}
    | {name for rules in BY_ROUTE.values() for name in rules}
)


class Raw:
    """A value, as the JSON text ``json.dumps`` writes for it."""

    __slots__ = ("text",)

    def __init__(self, text: bytes) -> None:
        self.text = text

    def __reduce__(self) -> tuple[type[Raw], tuple[bytes]]:
        return Raw, (self.text,)

    def __repr__(self) -> str:
        return f"Raw({len(self.text)} bytes)"


class Members(Raw):
    """Members of the body (``"key": value, ...``), as ``json.dumps`` writes them."""

    __slots__ = ()

    def __reduce__(self) -> tuple[type[Members], tuple[bytes]]:
        return Members, (self.text,)

    def __repr__(self) -> str:
        return f"Members({len(self.text)} bytes)"


class Summary(NamedTuple):
    """What the proxy needs of a request body: what :class:`~servekit.proxy.requests.Ticket`
    holds, the body in :class:`Raw`/:class:`Members` form, or the 4xx it is."""

    body: dict[str, Any]
    prompt_tokens: int
    prefix_key: bytes
    stream: bool
    prompts: int
    text_bytes: int  # bytes of Raw and Members texts in ``body``
    keys: dict[int, list[int]] | None = None  # kv-events: a token-id prompt's block keys


class Refusal(NamedTuple):
    kind: str
    message: str


def _dumps(value: Any) -> bytes:
    return json.dumps(value).encode()


def travelling(body: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """``body`` with big kept values as :class:`Raw` and the rest as one :class:`Members`;
    and the bytes of those texts."""
    out: dict[str, Any] = {}
    rest: list[bytes] = []
    size = 0
    for key, value in body.items():
        if key not in KEPT:
            if not rest:
                out[REST] = None  # the members keep the first one's place
            rest.append(_dumps(key) + b": " + _dumps(value))
            continue
        if isinstance(value, list | dict):
            text = _dumps(value)
            if len(text) > RAW_ABOVE:
                out[key] = Raw(text)
                size += len(text)
                continue
        out[key] = value
    if rest:
        out[REST] = Members(b", ".join(rest))
        size += len(out[REST].text)
    return out, size


def parse_request(
    route: str, raw: bytes, prefix_chars: int, key_sizes: tuple[int, ...] = ()
) -> Summary | Refusal:
    """In a worker: what the loop does with a request body, in the same order and with the
    same refusals; and, for the kv-events policy (``key_sizes``, the engines' block
    sizes), a token-id prompt's block keys (:func:`~servekit.proxy.kvindex.prompt_keys`),
    so neither its ids nor their hashing reach the loop."""
    try:
        body = jsoncodec.loads(raw)
    except (ValueError, RecursionError):
        return Refusal("bad_request", "request body is not valid JSON")
    if not isinstance(body, dict):
        return Refusal("bad_request", "request body must be a JSON object")
    try:
        check_request(route, body)
        ticket = make_ticket(route, body, prefix_chars)
    except ProxyError as err:
        return Refusal(err.kind, err.message)
    keys = None
    prompt = body.get("prompt")
    if key_sizes and isinstance(prompt, list) and prompt:
        keys = prompt_keys(prompt, key_sizes)
    shipped, size = travelling(body)
    return Summary(
        shipped, ticket.prompt_tokens, ticket.prefix_key, ticket.stream, ticket.prompts, size,
        keys,
    )  # fmt: skip


def answer_fields(raw: bytes, keys: tuple[str, ...]) -> dict[str, Any] | None:
    """An engine's answer checked to be UTF-8 JSON (None: it is not), and the members
    ``keys`` of its top-level object, decoded: all the proxy reads of it (the prefill's
    ``kv_transfer_params``, ``/tokenize``'s ``tokens``); the rest is never sent back,
    and with msgspec never even built (:func:`~servekit.proxy.jsoncodec.members`)."""
    return jsoncodec.members(raw, keys)


def _decoded(payload: dict[str, Any]) -> dict[str, Any]:
    """``payload`` parsed whole; a member of :class:`Members` that the payload also sets
    gives way to it."""
    out: dict[str, Any] = {}
    for key, value in payload.items():
        if isinstance(value, Members):
            members = json.loads(b"{" + value.text + b"}")
            out.update((k, v) for k, v in members.items() if k not in payload)
        else:
            out[key] = json.loads(value.text) if isinstance(value, Raw) else value
    return out


def encode_body(payload: dict[str, Any]) -> bytes:
    """``json.dumps(payload).encode()``, with :class:`Raw` and :class:`Members` texts spliced."""
    spliced = [v for v in payload.values() if isinstance(v, Raw)]
    if not spliced:
        return _dumps(payload)
    if any(isinstance(v, Members) for v in spliced) and not KEPT.issuperset(
        k for k, v in payload.items() if not isinstance(v, Members)
    ):  # a field set here that the body's members may hold too: never write it twice
        return _dumps(_decoded(payload))
    pieces: list[bytes] = []
    for key, value in payload.items():
        if pieces:
            pieces.append(b", ")
        if isinstance(value, Members):
            pieces.append(value.text)
            continue
        pieces.append(_dumps(key) + b": ")
        pieces.append(value.text if isinstance(value, Raw) else _dumps(value))
    return b"{" + b"".join(pieces) + b"}"


def _ignore_interrupts() -> None:
    """Ctrl-C reaches the whole process group; the proxy stops its workers itself."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def rss_bytes(pid: int) -> int | None:
    """A process's resident memory (``VmRSS``); None where ``/proc`` cannot say."""
    try:
        with open(f"/proc/{pid}/status", "rb") as status:
            for line in status:
                if line.startswith(b"VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


class _Slot:
    """One worker process (a pool of one, so it can be replaced alone) and its calls."""

    def __init__(self, context: Any) -> None:
        self.pool = ProcessPoolExecutor(1, context, _ignore_interrupts)
        self.calls = 0

    def pid(self) -> int | None:
        return next(iter(self.pool._processes or ()), None)


class Workers:
    """The parse processes of one proxy: started with the first big body, replaced when one
    dies, or when its memory passes ``max_rss`` once it is idle.

    CPython keeps much of the heap a big parse grew (a worker that parsed a 32 MiB
    body of long strings held 114 MB after, against 38 MB fresh), so a worker whose
    resident memory passes ``max_rss`` (``--parse-worker-rss``) when it has no call
    is retired and a fresh one started in its place; it holds no call then, so
    nothing in flight fails. Where ``/proc`` cannot say, the estimated cost of its
    last parse stands in for its memory.
    """

    def __init__(self, count: int, inline_bytes: int, max_rss: int = 0) -> None:
        self.count = count
        self.inline_bytes = inline_bytes
        self.max_rss = max_rss  # 0: never replaced for its memory
        self.failures = 0  # workers lost (killed, out of memory)
        self.recycled = 0  # workers replaced for their memory
        self._context = multiprocessing.get_context("spawn")
        self._slots: list[_Slot | None] = [None] * count

    def wanted(self, size: int) -> bool:
        """A body of ``size`` bytes is parsed off the loop."""
        return self.count > 0 and size > self.inline_bytes

    def pids(self) -> list[int]:
        """The running workers' process ids (for tests and benchmarks)."""
        return [pid for slot in self._slots if slot is not None and (pid := slot.pid())]

    def _calls(self, at: int) -> int:
        slot = self._slots[at]
        return 0 if slot is None else slot.calls

    def _pick(self) -> _Slot:
        """The worker with the fewest calls (started if need be)."""
        at = min(range(self.count), key=self._calls)
        slot = self._slots[at]
        if slot is None:
            slot = self._slots[at] = _Slot(self._context)
        return slot

    async def call(self, fn: Callable[..., T], *args: Any, cost: int = 0) -> T:
        """``fn(*args)`` in a worker; a 503 ``worker_failed`` when the worker died.

        ``cost``: about the memory the call takes there (its parse's estimate).
        """
        slot = self._pick()
        try:
            future = slot.pool.submit(fn, *args)
        except RuntimeError:  # broken already, or shut down: BrokenProcessPool is one
            raise self._lost(slot) from None
        slot.calls += 1
        try:
            return await asyncio.wrap_future(future)
        except BrokenProcessPool:
            raise self._lost(slot) from None
        finally:
            slot.calls -= 1
            if self.max_rss and slot.calls == 0 and slot in self._slots:
                loop = asyncio.get_running_loop()
                loop.call_later(RSS_CHECK_DELAY_S, self._check, slot, cost)

    def _check(self, slot: _Slot, cost: int) -> None:
        """Replace an idle worker whose memory passed ``max_rss``."""
        if slot.calls or slot not in self._slots:
            return
        pid = slot.pid()
        rss = None if pid is None else rss_bytes(pid)
        if (cost if rss is None else rss) <= self.max_rss:
            return
        fresh = _Slot(self._context)
        fresh.pool.submit(os.getpid)  # started now: the next big body does not wait for it
        self._slots[self._slots.index(slot)] = fresh
        self.recycled += 1
        slot.pool.shutdown(wait=False)

    def _lost(self, slot: _Slot) -> ProxyError:
        """Drop a worker that died (the next big body starts another)."""
        if slot in self._slots:
            self.failures += 1
            self._slots[self._slots.index(slot)] = None
            slot.pool.shutdown(wait=False, cancel_futures=True)
        msg = "the proxy's parse worker process died (killed, or out of memory); retry"
        return ProxyError("worker_failed", "proxy", msg)

    async def close(self) -> None:
        """Stop the workers (a parse under way finishes first)."""
        slots, self._slots = self._slots, [None] * self.count
        for slot in slots:
            if slot is not None:
                await asyncio.to_thread(slot.pool.shutdown, True, cancel_futures=True)


CURRENT: ContextVar[Workers | None] = ContextVar("servekit_proxy_workers", default=None)
