"""Client connections: a header timeout, a cap on open connections, who goes at the cap.

aiohttp bounds an idle keep-alive connection (``keepalive_timeout``) but not the
time a client takes to send its request line and headers: 3,000 sockets that
sent ``GET /hea`` and stopped were held as long as they stayed open, before any
key was checked, and about 20,000 of them used up the fd limit, after which
``/health`` went dark.

Every accepted socket's protocol is a :class:`Conn` around aiohttp's own
request handler (which still parses, answers and keeps alive). It adds:

- the **header timeout**: a request head (line and headers) that is not
  complete ``header_timeout_s`` after the connection opened, or after the first
  byte of a later request on it, is answered 408 (RFC 9110 15.5.9) and the
  connection closed, as nginx's ``client_header_timeout`` does;
- the **cap**: at most ``cap`` connections are open. At the cap a new
  connection evicts the one that has waited longest *without a request in
  progress* (idle keep-alive or a head still arriving), since a real client
  sends its head in microseconds and a flood of slow sockets must not lock it
  out; when every open connection is serving a request, the newcomer gets 503
  and is closed. Connections shed this way are counted and logged rate-limited;
- the **send deadline**: a write to the client that makes no progress for
  ``send_timeout_s`` (the transport paused writing and its buffer did not shrink)
  aborts the connection. A client that never reads its answer held it in memory
  and its connection for ever (four such clients, +343 to 429 MB, and the
  stream's idle timeout never fired since the relay waited on the client); the
  abort cancels the handler (``handler_cancellation``), which closes the engine's
  request. Whatever the handler (streamed or unstreamed, any route).

:class:`ConnectionSite` listens with these protocols (aiohttp's ``TCPSite``, with
the protocol factory wrapped); :func:`track` is the middleware that tells a
:class:`Conn` when a request's handler runs.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.typedefs import Middleware

from servekit.proxy.failures import ProxyError
from servekit.proxy.ratelog import RateLimited
from servekit.vocabulary import url_for

log = logging.getLogger("servekit.proxy")
CLOSE_GRACE_S = 1.0  # a peer that does not take the short answer is then reset


def _answer(status: str, message: str) -> bytes:
    code = status.split(" ", 1)[1].lower().replace(" ", "_")
    body = ProxyError(code, "proxy", message).body()
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nConnection: close\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    return head + body


TIMED_OUT = _answer("408 Request Timeout", "request line and headers not received in time")
BUSY = _answer("503 Service Unavailable", "too many open connections")


class Connections:
    """The open client connections of one proxy, and the rules that bound them."""

    def __init__(
        self, cap: int, header_timeout_s: float, shed_log: RateLimited, send_timeout_s: float = 60.0
    ) -> None:
        self.cap = cap
        self.header_timeout_s = header_timeout_s
        self.send_timeout_s = send_timeout_s
        self.shed_log = shed_log
        self.open: dict[asyncio.BaseTransport, Conn] = {}
        self.waiting: dict[Conn, None] = {}  # no request in progress, longest-waiting first
        self.closed: Counter[str] = Counter()  # header_timeout, send_timeout, evicted, refused

    def of(self, transport: asyncio.BaseTransport | None) -> Conn | None:
        return None if transport is None else self.open.get(transport)

    def admit(self, conn: Conn) -> bool:
        """Room for ``conn`` (evicting the longest-waiting idle one at the cap), or False."""
        if len(self.open) >= self.cap:
            victim = next(iter(self.waiting), None)
            if victim is None:
                self._shed("refused", "every connection is serving a request")
                return False
            self._shed("evicted", "closed the longest-waiting idle or slow connection")
            victim.close_with(BUSY)
        self.open[conn.transport] = conn
        self.waiting[conn] = None
        return True

    def _shed(self, reason: str, what: str) -> None:
        self.closed[reason] += 1
        self.shed_log.log(logging.WARNING, "connection cap %d reached: %s", self.cap, what)

    def forget(self, conn: Conn) -> None:
        self.open.pop(conn.transport, None)
        self.waiting.pop(conn, None)

    def set_waiting(self, conn: Conn, waiting: bool) -> None:
        self.waiting.pop(conn, None)
        if waiting and conn.transport in self.open:
            self.waiting[conn] = None  # now the most recent


class Conn(asyncio.Protocol):
    """One client connection: aiohttp's handler inside, the header timer and the cap outside."""

    def __init__(self, table: Connections, make_handler: Callable[[], web.RequestHandler]) -> None:
        self.table = table
        self.make_handler = make_handler
        self.inner: web.RequestHandler | None = None
        self.transport: asyncio.Transport = None  # type: ignore[assignment]  # set on connect
        self.in_request = False
        self.lost = False
        self._timer: asyncio.TimerHandle | None = None
        self._send_timer: asyncio.TimerHandle | None = None
        self._send_mark = 0  # the write buffer's size when last seen progressing

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        if not self.table.admit(self):
            self.close_with(BUSY)
            return
        self.inner = self.make_handler()
        self.inner.connection_made(transport)
        self._arm()

    def _arm(self) -> None:
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(self.table.header_timeout_s, self._head_late)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _head_late(self) -> None:
        self._timer = None
        if not self.in_request and not self.lost:
            self.table.closed["header_timeout"] += 1
            self.close_with(TIMED_OUT)

    def close_with(self, answer: bytes) -> None:
        """Send a short answer, close, and reset the peer if it will not take it."""
        self.table.forget(self)
        self._disarm()
        if self.lost or self.transport.is_closing():
            return
        self.transport.write(answer)
        self.transport.close()
        asyncio.get_running_loop().call_later(CLOSE_GRACE_S, self._reset)

    def _reset(self) -> None:
        if not self.lost:
            self.transport.abort()

    def data_received(self, data: bytes) -> None:
        if self.inner is None:
            return
        if not self.in_request and self._timer is None:
            self._arm()  # the first byte of a keep-alive request: its head is timed from here
        self.inner.data_received(data)

    def eof_received(self) -> None:
        if self.inner is not None:
            self.inner.eof_received()

    def pause_writing(self) -> None:
        self._send_mark = self.transport.get_write_buffer_size()
        self._arm_send()
        if self.inner is not None:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        self._disarm_send()
        if self.inner is not None:
            self.inner.resume_writing()

    def _arm_send(self) -> None:
        self._disarm_send()
        loop = asyncio.get_running_loop()
        self._send_timer = loop.call_later(self.table.send_timeout_s, self._send_late)

    def _disarm_send(self) -> None:
        if self._send_timer is not None:
            self._send_timer.cancel()
            self._send_timer = None

    def _send_late(self) -> None:
        """The client took nothing for the send deadline: abort (the handler is cancelled)."""
        self._send_timer = None
        if self.lost:
            return
        size = self.transport.get_write_buffer_size()
        if size < self._send_mark:  # it reads, slowly: progress, so a new deadline
            self._send_mark = size
            self._arm_send()
            return
        self.table.closed["send_timeout"] += 1
        self.table.shed_log.log(
            logging.WARNING, "closed a connection whose client took none of its answer "
            "for %g s (--send-timeout)", self.table.send_timeout_s,
        )  # fmt: skip
        self.table.forget(self)
        self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.table.forget(self)
        self._disarm()
        self._disarm_send()
        if self.inner is not None:
            self.inner.connection_lost(exc)

    def begin_request(self) -> None:
        """The request's head is complete and its handler runs: no header timer, not evictable."""
        self.in_request = True
        self._disarm()
        self.table.set_waiting(self, False)

    def end_request(self) -> None:
        """Back to waiting (aiohttp's keep-alive timeout bounds the idle time)."""
        self.in_request = False
        self.table.set_waiting(self, True)


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def track(table: Connections) -> Middleware:
    """The middleware that marks a connection busy while its request's handler runs."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        conn = table.of(request.transport)
        if conn is not None:
            conn.begin_request()
        try:
            return await handler(request)
        finally:
            if conn is not None:
                conn.end_request()

    return middleware


class ConnectionSite(web.BaseSite):
    """aiohttp's TCP site with every accepted socket wrapped in a :class:`Conn`."""

    __slots__ = ("_host", "_port", "_reuse_port", "_table")

    def __init__(
        self, runner: web.BaseRunner, table: Connections, host: str, port: int, *,
        backlog: int, reuse_port: bool = False,
    ) -> None:  # fmt: skip
        super().__init__(runner, backlog=backlog)
        self._table = table
        self._host = host
        self._port = port
        self._reuse_port = reuse_port  # --workers: the processes share the port

    @property
    def name(self) -> str:
        return url_for(self._host, self._port)

    async def start(self) -> None:
        await super().start()
        server = self._runner.server
        assert server is not None
        table = self._table
        self._server = await asyncio.get_running_loop().create_server(
            lambda: Conn(table, server), self._host, self._port, backlog=self._backlog,
            reuse_port=self._reuse_port or None,
        )  # fmt: skip
