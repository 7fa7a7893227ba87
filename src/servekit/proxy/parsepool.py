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
the same size are checked to be JSON in a worker too (:func:`is_json`).

The pool starts with the first big body (spawned processes: the loop's threads
are not forked) and stops with the proxy. A worker that dies (killed, out of
memory) fails the bodies it had with a 503 ``worker_failed``, and the next big
body starts a new pool. The worker runs the proxy's own modules and the
standard library (orjson when installed), so the zipapp has it too.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import signal
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextvars import ContextVar
from typing import Any, NamedTuple, TypeVar

from servekit.proxy import jsoncodec
from servekit.proxy.failures import ProxyError
from servekit.proxy.migration import CARRIED
from servekit.proxy.requests import make_ticket
from servekit.proxy.validation import BY_ROUTE, COMMON, check_request

T = TypeVar("T")
RAW_ABOVE = 16 << 10
REST = "\x00members"  # the key of the body's Members (never a key the proxy sets)
# What the proxy reads from a body on the loop (migration's carried fields, the
# checked ones, the prompt) and every field a stage payload sets.
KEPT = frozenset(
    {*COMMON, *CARRIED, "prompt", "messages", "input", "instructions", "return_token_ids"}
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


def parse_request(route: str, raw: bytes, prefix_chars: int, decoded: bool) -> Summary | Refusal:
    """In a worker: what the loop does with a request body, in the same order and with the
    same refusals (``decoded``: every value decoded, for the kv-events policy)."""
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
    shipped, size = (body, 0) if decoded else travelling(body)
    return Summary(
        shipped, ticket.prompt_tokens, ticket.prefix_key, ticket.stream, ticket.prompts, size
    )


def is_json(raw: bytes) -> bool:
    """``raw`` is UTF-8 JSON (an engine's answer)."""
    try:
        json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return False
    return True


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


class Workers:
    """The parse processes of one proxy: started with the first big body, replaced when
    one dies."""

    def __init__(self, count: int, inline_bytes: int) -> None:
        self.count = count
        self.inline_bytes = inline_bytes
        self.failures = 0  # pools lost to a dead worker
        self._pool: ProcessPoolExecutor | None = None

    def wanted(self, size: int) -> bool:
        """A body of ``size`` bytes is parsed off the loop."""
        return self.count > 0 and size > self.inline_bytes

    def pids(self) -> list[int]:
        """The running workers' process ids (for tests and benchmarks)."""
        pool = self._pool
        return [] if pool is None else list(pool._processes or ())

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in a worker; a 503 ``worker_failed`` when the worker died."""
        pool = self._pool
        if pool is None:
            context = multiprocessing.get_context("spawn")
            pool = ProcessPoolExecutor(self.count, context, _ignore_interrupts)
            self._pool = pool
        try:
            future = pool.submit(fn, *args)
        except RuntimeError:  # broken already, or shut down: BrokenProcessPool is one
            raise self._lost(pool) from None
        try:
            return await asyncio.wrap_future(future)
        except BrokenProcessPool:
            raise self._lost(pool) from None

    def _lost(self, pool: ProcessPoolExecutor) -> ProxyError:
        """Drop a pool whose worker died (the next big body starts another)."""
        if self._pool is pool:
            self.failures += 1
            self._pool = None
            pool.shutdown(wait=False, cancel_futures=True)
        msg = "the proxy's parse worker process died (killed, or out of memory); retry"
        return ProxyError("worker_failed", "proxy", msg)

    async def close(self) -> None:
        """Stop the workers (a parse under way finishes first)."""
        pool, self._pool = self._pool, None
        if pool is not None:
            await asyncio.to_thread(pool.shutdown, True, cancel_futures=True)


CURRENT: ContextVar[Workers | None] = ContextVar("servekit_proxy_workers", default=None)
