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

Standard library only: the engine's image has Python, not servekit.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any

MAX_ANSWER_BYTES = 4 << 20
SLACK_S = 5.0  # beyond --wait: the answer's own way back


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


def leave(address: str, body: dict[str, Any], key: str | None, wait_s: float) -> bool:
    """POST the leave to one proxy; True when it answered that the engine is drained."""
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    request = urllib.request.Request(
        f"http://{address}/admin/instances/leave", data=json.dumps(body).encode(),
        headers=headers, method="POST",
    )  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=wait_s + SLACK_S) as resp:
            doc = json.loads(resp.read(MAX_ANSWER_BYTES))
    except (urllib.error.URLError, OSError, ValueError) as exc:
        print(f"prestop: {address}: {exc}", file=sys.stderr)
        return False
    drained = isinstance(doc, dict) and doc.get("drained") is True
    print(f"prestop: {address}: {'drained' if drained else 'not drained'}", file=sys.stderr)
    return drained


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="servekit.proxy.prestop", description=__doc__.split("\n")[0])
    p.add_argument("--proxies", nargs="+", required=True, metavar="NAME",
                   help="host names or addresses of the proxies (a headless Service's name)")  # fmt: skip
    p.add_argument("--port", type=int, required=True, help="the proxies' port")
    who = p.add_mutually_exclusive_group(required=True)
    who.add_argument("--pod", help="this pod's name (the proxies discovered it)")
    who.add_argument("--urls", nargs="+", metavar="URL", help="this engine's API URLs")
    p.add_argument("--wait", type=float, default=60.0, help="seconds each proxy may take")
    p.add_argument("--key-env", metavar="NAME", help="environment variable holding the admin key")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    key = os.environ.get(args.key_env, "").strip() if args.key_env else None
    body: dict[str, Any] = {"wait_s": args.wait}
    body.update({"pod": args.pod} if args.pod else {"urls": args.urls})
    found = addresses(args.proxies, args.port)
    if not found:
        return 1
    with ThreadPoolExecutor(max_workers=min(32, len(found))) as pool:
        results = list(pool.map(lambda a: leave(a, body, key, args.wait), found))
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
