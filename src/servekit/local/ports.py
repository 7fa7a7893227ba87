"""Local ports: map a Plan's planned ports to free ones, or prove the planned ones free.

Free ports are found by binding port 0 on loopback and keeping every probe socket
open until the whole set is chosen, so one call never hands out the same port
twice. A planned port that something else holds is bad input: one line naming
the port and which process wanted it.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterable

from servekit.errors import UsageError

LOOPBACK = "127.0.0.1"


def port_is_free(port: int, host: str = LOOPBACK, *, reuse: bool = False) -> bool:
    """True when a TCP listener could bind ``host:port`` right now (``reuse``: one that
    sets SO_REUSEADDR, as the servers do, so a port in TIME_WAIT counts as free)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        if reuse:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def free_ports(count: int, host: str = LOOPBACK) -> list[int]:
    """``count`` distinct ports that are free now (no two the same)."""
    with contextlib.ExitStack() as stack:
        ports: list[int] = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind((host, 0))
            ports.append(int(sock.getsockname()[1]))
        return ports


def map_to_free(planned: Iterable[tuple[int, int]]) -> dict[str, int]:
    """A Plan port map ``'node:planned' -> free port`` for every planned (node, port)."""
    keys = sorted({f"{node}:{port}" for node, port in planned})
    return dict(zip(keys, free_ports(len(keys)), strict=True))


def require_free(wanted: dict[int, str], host: str = LOOPBACK) -> None:
    """Raise a one-line UsageError for the first planned port already taken."""
    for port in sorted(wanted):
        if not port_is_free(port, host):
            raise UsageError(
                f"port {port} ({wanted[port]}) is already in use; stop what holds it "
                "or run with --free-ports to map every planned port to a free one"
            )
