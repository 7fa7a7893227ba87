"""Local ports: map a Plan's planned ports to free ones, or prove the planned ones free.

Free ports are chosen below the kernel's ephemeral range (``ip_local_port_range``)
and each is bound on loopback, the probe sockets kept open until the whole set is
chosen, so one call never hands out the same port twice. An engine binds some of
its ports half a minute after it starts (vLLM's KV-event publisher), and a port
from the ephemeral range may by then be any process's outgoing or auto-bound port
(CI: a Mooncake engine starting beside it took the decoder's publisher port,
``Address already in use``); the kernel never hands out a port below the range.
Where the range leaves no room below it, ports come from binding port 0.
A planned port that something else holds is bad input: one line naming the port
and which process wanted it.
"""

from __future__ import annotations

import contextlib
import random
import socket
from collections.abc import Iterable
from pathlib import Path

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


LOWEST_FREE_PORT = 10000
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def ephemeral_floor(path: Path = EPHEMERAL_RANGE) -> int:
    """The lowest port the kernel hands out by itself (32768 where it cannot be read)."""
    try:
        return int(path.read_text(errors="replace")[:64].split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_ports(count: int, host: str = LOOPBACK) -> list[int]:
    """``count`` distinct ports that are free now (no two the same), below the
    ephemeral range where it leaves room: no auto-bound port can take them later."""
    top = ephemeral_floor()
    candidates = list(range(LOWEST_FREE_PORT, top))
    random.shuffle(candidates)  # two callers at once rarely try the same ports
    with contextlib.ExitStack() as stack:
        ports: list[int] = []
        for port in candidates:
            if len(ports) == count:
                break
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                sock.bind((host, port))
            except OSError:
                sock.close()  # taken: nothing held for it
                continue
            stack.enter_context(sock)
            ports.append(port)
        while len(ports) < count:  # no room below the range: the kernel's choice
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind((host, 0))
            ports.append(int(sock.getsockname()[1]))
        return ports


def map_to_free(planned: Iterable[tuple[int, int]]) -> dict[tuple[int, int], int]:
    """A Plan port map ``(node, planned) -> free port`` for every planned (node, port)."""
    keys = sorted(set(planned))
    return dict(zip(keys, free_ports(len(keys)), strict=True))


def require_free(wanted: dict[int, str], host: str = LOOPBACK) -> None:
    """Raise a one-line UsageError for the first planned port already taken."""
    for port in sorted(wanted):
        if not port_is_free(port, host):
            raise UsageError(
                f"port {port} ({wanted[port]}) is already in use; stop what holds it "
                "or run with --free-ports to map every planned port to a free one"
            )
