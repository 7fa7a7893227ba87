"""The ModelArts rank-table reader, shipped beside the rendered scripts as one stdlib file.

The platform writes ``global_rank_table.json`` on every node; the rendered
``run.sh`` (POSIX sh) runs this file with the table's path as an argument, so no
value from the table ever reaches a shell command line, and every address and
pod name is validated before the shell reads the plain lines this prints::

    python3 servekit_rank_table.py status  TABLE           -> one line: the status
    python3 servekit_rank_table.py servers TABLE POD IP    -> five lines (below)

``servers`` prints the node count, this node's rank (by pod name, else by
address), the size of group 0, the addresses and the pod names (``-`` for none),
space-separated. Exit status: 0 done; 1 with one line on stderr when the file is
not usable yet or not usable as a rank table (the entry keeps waiting, or stops,
depending on the mode); 3 with one line when the file can never become one (too
large, not UTF-8, too deep); 2 for a wrong command line.

Standard library only, and syntax an older platform image's python3 reads
(3.8): the engine image is the only interpreter a node has.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import sys
from collections.abc import Sequence
from typing import Any

MAX_BYTES = 16 << 20
USABLE_LATER = 1  # exit status: not (yet) usable; the line says why
NEVER = 3  # exit status: this file can never be a rank table
USAGE = "usage: servekit_rank_table.py status TABLE | servers TABLE POD_NAME IP"
STATUS_CHARS = 64
_SCOPE = re.compile(r"[A-Za-z0-9_.-]{1,15}")
_POD = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}")


class Refused(Exception):
    """The table cannot be used; ``status`` is the exit status, the message one line."""

    def __init__(self, why: str, status: int = USABLE_LATER) -> None:
        # a value it quotes (this node's address, from the environment) stays on the line
        why = "".join(c if c.isprintable() else repr(c)[1:-1] for c in why)
        super().__init__(why)
        self.why = why
        self.status = status


def read_table(path: str) -> dict[str, Any]:
    """The table as a JSON object, or :class:`Refused` saying why it is not one."""
    try:
        if os.path.getsize(path) > MAX_BYTES:
            raise Refused("the rank table is larger than 16 MiB", NEVER)
        with open(path, "rb") as f:
            raw = f.read(MAX_BYTES)
    except OSError as exc:
        raise Refused(f"the rank table is not readable ({type(exc).__name__})") from None
    if b"\x00" in raw:
        raise Refused(
            "the rank table is not readable JSON (NUL bytes: UTF-16?); the platform writes UTF-8",
            NEVER,
        )
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, RecursionError) as exc:
        raise Refused(
            f"the rank table is not readable JSON ({type(exc).__name__})", NEVER
        ) from None
    except ValueError as exc:
        # Truncated or half-written: the platform may still be writing it.
        raise Refused(f"the rank table is not readable JSON ({type(exc).__name__})") from None
    if not isinstance(data, dict):
        raise Refused("the rank table is not a JSON object", NEVER)
    return data


def status_of(data: dict[str, Any]) -> str:
    """The table's status as one short line (``completed`` once the platform is done)."""
    # Any line break a reader may split on (\r, \v, \x85, \u2028, ...) or other
    # control character becomes a space: the status is one line whatever the file says.
    text = str(data.get("status", ""))[:STATUS_CHARS]
    return "".join(c if c.isprintable() else " " for c in text)


def _groups(data: dict[str, Any]) -> list[list[Any]]:
    """Each group's server list (a malformed group counts as empty)."""
    groups = data.get("server_group_list") or []
    if not isinstance(groups, list):
        raise Refused("server_group_list is not a list")
    servers = []
    for g in groups:
        entries = g.get("server_list") if isinstance(g, dict) else None
        servers.append(entries if isinstance(entries, list) else [])
    return servers


def _address(i: int, server: dict[str, Any]) -> str:
    """Server ``i``'s address, normalised; an IPv6 scope id only if it names an interface."""
    addr, pct, scope = str(server.get("server_ip", "")).partition("%")
    try:
        ip = ipaddress.ip_address(addr)
    except ValueError:
        raise Refused(f"server {i}: server_ip is not an IP address") from None
    if pct and (ip.version != 6 or not _SCOPE.fullmatch(scope)):
        raise Refused(f"server {i}: server_ip has a scope id that is not an interface name")
    return str(ip) + pct + scope


def _pod(i: int, server: dict[str, Any]) -> str:
    pod = str(server.get("pod_name", "") or "")
    if pod and not _POD.fullmatch(pod):
        raise Refused(f"server {i}: pod_name has characters a pod name cannot have")
    return pod or "-"


def server_lines(data: dict[str, Any], me_pod: str, me_ip: str) -> list[str]:
    """The five lines the entry reads: count, this node's rank, group 0's size, IPs, pods."""
    servers = _groups(data)
    flat = [s for g in servers for s in g]
    if not flat:
        raise Refused("the rank table lists no servers")
    ips, pods = [], []
    for i, s in enumerate(flat):
        if not isinstance(s, dict):
            raise Refused(f"server {i} is not an object")
        ips.append(_address(i, s))
        pods.append(_pod(i, s))
    by_pod = [i for i in range(len(flat)) if me_pod and pods[i] == me_pod]
    by_ip = [i for i in range(len(flat)) if ips[i] == me_ip]
    found = by_pod or by_ip
    if not found:
        raise Refused(
            f"this node (pod {me_pod or '?'}, address {me_ip or '?'}) is not in the rank table; "
            "set NODE_POD_NAME"
        )
    return [str(len(flat)), str(found[0]), str(len(servers[0])), " ".join(ips), " ".join(pods)]


def run(argv: Sequence[str]) -> list[str]:
    """The lines to print for ``argv`` (without the program name), or :class:`Refused`."""
    mode = argv[0] if argv else ""
    if not (mode == "status" and len(argv) == 2) and not (mode == "servers" and len(argv) == 4):
        raise Refused(USAGE, 2)
    data = read_table(argv[1])
    if mode == "status":
        return [status_of(data)]
    return server_lines(data, argv[2], argv[3])


def main(argv: Sequence[str] | None = None) -> int:
    """Print the answer, or one line on stderr; the exit status says which (module doc)."""
    try:
        lines = run(sys.argv[1:] if argv is None else argv)
    except Refused as exc:
        sys.stderr.write(exc.why + "\n")
        return exc.status
    sys.stdout.write("".join(line + "\n" for line in lines))
    return 0


def source_bytes() -> bytes:
    """This file's bytes (what the renderer writes beside the scripts)."""
    with open(__file__, "rb") as f:
        return f.read()


if __name__ == "__main__":
    sys.exit(main())
