"""Loopback fronts to an engine that cut one stream mid-answer, as a decoder dying would.

Each front relays 127.0.0.1:PORT to the engine's port both ways. A :class:`Cutter`
shared by several fronts is armed for one cut: the first relayed answer that
carries ``events`` SSE events is cut there (shut down and closed), after the bytes
read so far were relayed, so the client holds the answer up to a point that may
fall inside an event. Every other connection (probes, the streams after
the cut, all of them while disarmed) is relayed whole.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
from collections.abc import Iterator


class Cutter:
    """One cut, after ``events`` SSE events of the first answer that has them."""

    def __init__(self, events: int) -> None:
        self.events = events
        self.armed = False
        self.cuts = 0
        self.posts: list[str] = []  # the paths of the requests relayed, in order, by any front
        self._lock = threading.Lock()

    def take(self) -> bool:
        """The caller's connection is the one to cut (once per arming)."""
        with self._lock:
            if not self.armed:
                return False
            self.armed = False
            self.cuts += 1
            return True


class CutFront:
    """Relays 127.0.0.1:``port`` to ``upstream_port``, cutting as ``cutter`` says."""

    def __init__(self, upstream_port: int, cutter: Cutter) -> None:
        self._upstream = upstream_port
        self._cutter = cutter
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.port = int(self._listener.getsockname()[1])
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._accept_loop, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        self._closed.set()
        self._thread.join(timeout=5)
        self._listener.close()

    def _accept_loop(self) -> None:
        while not self._closed.is_set():
            readable, _, _ = select.select([self._listener], [], [], 0.05)
            if not readable:
                continue
            conn, _ = self._listener.accept()
            up = socket.create_connection(("127.0.0.1", self._upstream), timeout=10)
            up.settimeout(None)
            threading.Thread(target=self._requests, args=(conn, up), daemon=True).start()
            threading.Thread(target=self._answer, args=(up, conn), daemon=True).start()

    def _answer(self, up: socket.socket, conn: socket.socket) -> None:
        """The engine's answers to the client; the chosen one is reset mid-answer."""
        seen = 0
        chosen: bool | None = None
        with contextlib.suppress(OSError):
            while data := up.recv(65536):
                if data.startswith(b"HTTP/1."):  # the next answer on a kept-alive connection
                    seen, chosen = 0, None
                before, seen = seen, seen + data.count(b"data: ")
                if chosen is None and seen >= self._cutter.events:
                    chosen = self._cutter.take()
                    if chosen:
                        # up to the start of the event after the chosen one: one read may
                        # hold the rest of the answer, [DONE] too, on a loaded machine
                        conn.sendall(data[: _event_start(data, self._cutter.events - before)])
                        _reset(conn)
                        _reset(up)
                        return
                conn.sendall(data)
        with contextlib.suppress(OSError):
            conn.shutdown(socket.SHUT_WR)

    def _requests(self, conn: socket.socket, up: socket.socket) -> None:
        """The client's requests to the engine, their paths noted."""
        with contextlib.suppress(OSError):
            while data := conn.recv(65536):
                if data.startswith(b"POST "):
                    self._cutter.posts.append(data.split(b" ", 2)[1].decode(errors="replace"))
                up.sendall(data)
        with contextlib.suppress(OSError):
            up.shutdown(socket.SHUT_WR)


def _event_start(data: bytes, n: int) -> int:
    """Where the event after the ``n``-th of ``data`` starts (its end when there is none)."""
    at = -1
    for _ in range(n + 1):
        at = data.find(b"data: ", at + 1)
        if at < 0:
            return len(data)
    return at


def _reset(sock: socket.socket) -> None:
    """Close as a dying process's kernel does; the shutdown wakes the other thread's recv
    on it (a close alone would wait for that recv), and sends what was relayed before
    the FIN (an abortive close could drop it unread)."""
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()


@contextlib.contextmanager
def cut_fronts(upstream_port: int, cutter: Cutter, count: int = 2) -> Iterator[list[CutFront]]:
    fronts = [CutFront(upstream_port, cutter) for _ in range(count)]
    try:
        yield fronts
    finally:
        for front in fronts:
            front.close()
