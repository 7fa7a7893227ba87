"""An engine's last words: tell every proxy it is leaving, and wait until they let it go.

What a rendered engine pod's preStop hook (or a SIGTERM trap on plain nodes)
runs before its engine stops::

    PYTHONPATH=servekit-proxy.pyz python3 -m servekit.proxy.prestop \\
        --proxies sk-proxy-peers --port 8000 --pod "$POD_NAME" --wait 120 \\
        --key-env SERVEKIT_ADMIN_KEY

Every address the ``--proxies`` names resolve to (a headless Service of the
proxy Deployment answers with every proxy pod) gets ``POST /admin/instances/leave``
with ``{"pod": NAME}`` (or ``{"urls": [...]}``) and ``wait_s``, the admin key as
Bearer, all at once; each proxy answers when its streams on the engine have
ended or migrated and no decoder still has to pull the engine's KV, or when
``--wait`` passed. Then the hook returns and the kubelet sends SIGTERM. The hook
never fails the pod's termination: an unreachable proxy is reported and the
others are still waited for; the exit code says whether every proxy answered
drained (0) or not (1), which the kubelet only logs.

Standard library only (and the modules the zipapp carries): the engine's image has
Python, not servekit.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from servekit.errors import UsageError
from servekit.vocabulary import (
    build_parser,
    check_fields,
    dataclass_options,
    option as opt,
    parse_values,
)

MAX_ANSWER_BYTES = 4 << 20
MAX_KEY_BYTES = 64 << 10
SLACK_S = 5.0  # beyond --wait: the answer's own way back
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))
"""Straight to the proxies: an engine machine's ``http_proxy`` (a site's web proxy) is
not the way to a proxy on the cluster's own network."""


def admin_key(env: str | None, path: str | None) -> str | None:
    """The admin key named by ``--key-env`` or ``--key-file`` (its first line), stripped;
    None when neither gives one (the proxy then answers loopback clients only)."""
    if env:
        return os.environ.get(env, "").strip() or None
    if not path:
        return None
    try:
        with open(path, "rb") as fh:
            head = fh.read(MAX_KEY_BYTES)
    except OSError as exc:
        print(f"prestop: --key-file {path}: {exc.strerror}", file=sys.stderr)
        return None
    first = head.decode("utf-8", "replace").partition("\n")[0].strip()
    return first or None


def addresses(names: list[str], port: int) -> list[str]:
    """``host:port`` of every address each name resolves to (IPv6 bracketed), once each."""
    found: list[str] = []
    for name in names:
        try:
            infos = socket.getaddrinfo(name, port, type=socket.SOCK_STREAM)
        except socket.gaierror as exc:
            print(f"prestop: {name}: cannot resolve ({exc.strerror})", file=sys.stderr)
            continue
        for info in infos:
            host = str(info[4][0])
            addr = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
            if addr not in found:
                found.append(addr)
    return found


def admin_request(
    address: str, action: str, body: dict[str, Any], key: str | None
) -> urllib.request.Request:
    """``POST /admin/instances/<action>`` to one proxy: the body as JSON, the admin key
    as Bearer (the one way the leave and the join speak to it)."""
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    return urllib.request.Request(
        f"http://{address}/admin/instances/{action}", data=json.dumps(body).encode(),
        headers=headers, method="POST",
    )  # fmt: skip


def leave(address: str, body: dict[str, Any], key: str | None, wait_s: float) -> bool:
    """POST the leave to one proxy; True when it answered that the engine is drained."""
    request = admin_request(address, "leave", body, key)
    try:
        with OPENER.open(request, timeout=wait_s + SLACK_S) as resp:
            doc = json.loads(resp.read(MAX_ANSWER_BYTES))
    except (urllib.error.URLError, OSError, ValueError) as exc:
        print(f"prestop: {address}: {exc}", file=sys.stderr)
        return False
    drained = isinstance(doc, dict) and doc.get("drained") is True
    print(f"prestop: {address}: {'drained' if drained else 'not drained'}", file=sys.stderr)
    return drained


@dataclass(frozen=True)
class PrestopOptions:
    """The hook's flags (one field each, as every standalone parser of servekit)."""

    proxies: tuple[str, ...] = opt((), "host names or addresses of the proxies (a headless "
                                   "Service's name: every proxy pod)", metavar="NAME",
                                   nargs="+")  # fmt: skip
    port: int = opt(8000, "the proxies' port", ge=1, le=65535)
    pod: str | None = opt(None, "this pod's name (the proxies discovered it)", metavar="NAME")
    urls: tuple[str, ...] = opt((), "this engine's API URLs (instead of --pod)", metavar="URL",
                                nargs="+")  # fmt: skip
    wait: float = opt(60.0, "seconds each proxy may take to drain the engine", ge=0, le=3600)
    key_env: str | None = opt(None, "environment variable holding the admin key", metavar="NAME")
    key_file: str | None = opt(None, "file whose first line is the admin key", metavar="PATH")

    def __post_init__(self) -> None:
        check_fields(self)
        if self.key_env and self.key_file:
            raise UsageError("--key-env, --key-file: give one of them")
        if not self.proxies:
            raise UsageError("--proxies: name the proxies (a headless Service's name)")
        if (self.pod is None) == (not self.urls):
            raise UsageError("--pod, --urls: give one of them")


def parse(argv: list[str]) -> PrestopOptions:
    parser = build_parser(dataclass_options(PrestopOptions), prog="servekit.proxy.prestop",
                          who="prestop", description=__doc__.split("\n")[0])  # fmt: skip
    return PrestopOptions(**parse_values(parser, argv))


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse(sys.argv[1:] if argv is None else argv)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    key = admin_key(args.key_env, args.key_file)
    body: dict[str, Any] = {"wait_s": args.wait}
    body.update({"pod": args.pod} if args.pod else {"urls": list(args.urls)})
    found = addresses(list(args.proxies), args.port)
    if not found:
        return 1
    with ThreadPoolExecutor(max_workers=min(32, len(found))) as pool:
        results = list(pool.map(lambda a: leave(a, body, key, args.wait), found))
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
