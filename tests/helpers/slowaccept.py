"""A loopback front to an engine whose new connections can be held before they are made.

What a loaded decoder does to the proxy: the TCP connection to it takes a while.
The front listens with a backlog of 0 and, when held, keeps one idle connection
of its own in the accept queue: the kernel then drops every new SYN, so a
client's ``connect`` waits (retransmitting) until the front is released. Held
this way, a connection is not made at all, so nothing the client writes on it
reaches anyone. Connections already relayed are closed on ``hold``, so a client's
pool has none left to reuse. Released, it accepts and relays bytes both ways.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
from collections.abc import Iterator


class SlowAcceptFront:
    """Relays 127.0.0.1:``port`` to ``upstream_port``; ``hold()`` stalls new connections."""

    def __init__(self, upstream_port: int) -> None:
        self._upstream = upstream_port
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(0)
        self.port = int(self._listener.getsockname()[1])
        self._lock = threading.Lock()  # held around "not held? accept" and by hold()
        self._held = False
        self._filler: socket.socket | None = None
        self._open: list[socket.socket] = []
        self._closed = threading.Event()
        self.accepted = 0  # relayed connections (the filler not counted)
        self._thread = threading.Thread(target=self._accept_loop, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def hold(self) -> None:
        """From now, new connections wait; the relayed ones are closed."""
        with self._lock:
            self._held = True
            self._filler = socket.create_connection(("127.0.0.1", self.port), timeout=5)
            for sock in self._open:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            self._open.clear()

    def release(self) -> None:
        """Accept again: the waiting connections are made at their next retransmission."""
        with self._lock:
            self._held = False

    def close(self) -> None:
        self._closed.set()
        self._thread.join(timeout=5)
        with self._lock:
            for sock in [*self._open, self._listener, *([self._filler] if self._filler else [])]:
                sock.close()

    def _accept_loop(self) -> None:
        while not self._closed.is_set():
            readable, _, _ = select.select([self._listener], [], [], 0.05)
            with self._lock:
                if self._held or not readable:
                    continue
                conn, peer = self._listener.accept()
                if self._filler is not None and peer == self._filler.getsockname():
                    conn.close()  # the front's own placeholder
                    self._filler.close()
                    self._filler = None
                    continue
                up = socket.create_connection(("127.0.0.1", self._upstream), timeout=10)
                up.settimeout(None)
                self._open += [conn, up]
                self.accepted += 1
            for src, dst in ((conn, up), (up, conn)):
                threading.Thread(target=_pipe, args=(src, dst), daemon=True).start()


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := src.recv(65536):
            dst.sendall(data)
    with contextlib.suppress(OSError):
        dst.shutdown(socket.SHUT_WR)


@contextlib.contextmanager
def slow_accept_front(upstream_port: int) -> Iterator[SlowAcceptFront]:
    front = SlowAcceptFront(upstream_port)
    try:
        yield front
    finally:
        front.close()
