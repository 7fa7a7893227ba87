"""A new engine's first words: wait until it answers ``/health``, then join every proxy.

What an instance beyond the rendered ones (a plain-nodes rendering's
``scale/<group>/run.sh``) runs once its processes are started::

    PYTHONPATH=servekit-proxy.pyz python3 -m servekit.proxy.join \\
        --proxies 10.0.0.1 --port 8080 --role decode --urls http://10.0.0.9:7100 \\
        --kv-events http://10.0.0.9:7100=tcp://10.0.0.9:5558 \\
        --key-env SERVEKIT_ADMIN_KEY --wait 1800 --pids 4242

Each URL's ``/health`` is polled until it answers 200 (a real engine loads for
minutes); if one of ``--pids`` (the engine's processes) is gone meanwhile the
engine will never answer, and it stops at once (exit 3). Then every address the
``--proxies`` names resolve to gets ``POST /admin/instances/add`` with the role,
the URLs, each one's KV-event publisher (``--kv-events URL=tcp://HOST:PORT``) and,
in bootstrap mode, its engine id and bootstrap server (``--bootstrap
URL=ENGINE_ID=http://HOST:PORT``), the admin key as Bearer; a proxy that cannot be
reached (or answers 5xx) is asked again until ``--wait`` passed, one that refuses
the body (4xx) is not. Exit 0 when every proxy took the engine, 1 when one did not
(the last lines say which and why), 2 for bad flags, 3 when the engine exited first.

The proxy then probes the engine itself and routes to it once it answers; the
engine's :mod:`~servekit.proxy.prestop` (``--urls``) is its way out.

Standard library only (and the modules the zipapp carries): the engine machine
has Python, not servekit.
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from servekit.errors import UsageError
from servekit.proxy.prestop import (
    MAX_ANSWER_BYTES,
    OPENER,
    addresses,
    admin_key,
    admin_request,
)
from servekit.vocabulary import (
    PROXY_POOLS,
    build_parser,
    check_fields,
    check_url,
    dataclass_options,
    option as opt,
    parse_values,
)

POLL_S = 1.0
PROBE_TIMEOUT_S = 5.0
MAX_URLS = 256


def _pairs(items: tuple[str, ...], flag: str, urls: tuple[str, ...]) -> dict[str, str]:
    """``URL=VALUE`` items as URL -> VALUE, each URL one of ``--urls``."""
    out: dict[str, str] = {}
    for item in items:
        url, sep, value = item.partition("=")
        if not sep or not value or url not in urls:
            raise UsageError(f"{flag} {item[:200]!r}: give URL=VALUE, URL one of --urls")
        out[url] = value
    return out


@dataclass(frozen=True)
class JoinOptions:
    """The join's flags (one field each, as every standalone parser of servekit)."""

    proxies: tuple[str, ...] = opt((), "host names or addresses of the proxies", metavar="NAME",
                                   nargs="+")  # fmt: skip
    port: int = opt(8000, "the proxies' port", ge=1, le=65535)
    role: str = opt("decode", "the pool the engine joins", choices=PROXY_POOLS)
    urls: tuple[str, ...] = opt((), "this engine's API URLs", metavar="URL", nargs="+")
    kv_events: tuple[str, ...] = opt((), "URL=tcp://HOST:PORT[,tcp://HOST:REPLAY_PORT]: an "
                                     "API's KV-event publisher", metavar="PAIR",
                                     nargs="+")  # fmt: skip
    bootstrap: tuple[str, ...] = opt((), "URL=ENGINE_ID=http://HOST:PORT: a prefill API's "
                                     "engine id and bootstrap server (bootstrap mode)",
                                     metavar="PAIR", nargs="+")  # fmt: skip
    wait: float = opt(1800.0, "seconds the engine may take to answer /health, and the proxies "
                      "to take it", ge=0, le=86400)  # fmt: skip
    pids: tuple[str, ...] = opt((), "the engine's processes: stop waiting when one is gone",
                                metavar="PID", nargs="+")  # fmt: skip
    key_env: str | None = opt(None, "environment variable holding the admin key", metavar="NAME")
    key_file: str | None = opt(None, "file whose first line is the admin key", metavar="PATH")

    def __post_init__(self) -> None:
        check_fields(self)
        if not self.proxies:
            raise UsageError("--proxies: name the proxies")
        if not self.urls or len(self.urls) > MAX_URLS:
            raise UsageError(f"--urls: give this engine's API URLs (1 to {MAX_URLS})")
        for url in self.urls:
            check_url(url, "--urls")
        if self.key_env and self.key_file:
            raise UsageError("--key-env, --key-file: give one of them")
        if not all(p.isdigit() and 0 < len(p) <= 10 for p in self.pids):
            raise UsageError("--pids: give process ids (digits)")
        _pairs(self.kv_events, "--kv-events", self.urls)
        _pairs(self.bootstrap, "--bootstrap", self.urls)

    def body(self) -> dict[str, Any]:
        """The ``add`` body the admin API takes."""
        doc: dict[str, Any] = {"role": self.role, "urls": list(self.urls)}
        if self.kv_events:
            doc["kv_events"] = _pairs(self.kv_events, "--kv-events", self.urls)
        if self.bootstrap:
            doc["bootstrap"] = _pairs(self.bootstrap, "--bootstrap", self.urls)
        return doc


def join_flag(name: str) -> str:
    """A join option's flag, spelled by its field table (the rendering that writes a join
    command spells none)."""
    return next(spec.flag for spec in dataclass_options(JoinOptions) if spec.name == name)


def parse(argv: list[str]) -> JoinOptions:
    parser = build_parser(dataclass_options(JoinOptions), prog="servekit.proxy.join",
                          who="join", description=__doc__.split("\n")[0])  # fmt: skip
    return JoinOptions(**parse_values(parser, argv))


def _say(text: str) -> None:
    print(f"join: {text}", file=sys.stderr, flush=True)


def healthy(url: str) -> bool:
    try:
        with OPENER.open(url.rstrip("/") + "/health", timeout=PROBE_TIMEOUT_S) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _alive(pid: str) -> bool:
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


EXITED = 3


def wait_healthy(
    urls: tuple[str, ...], pids: tuple[str, ...], deadline: float
) -> tuple[int, str] | None:
    """None once every URL answers /health 200; else the exit code and why it stopped."""
    pending = list(urls)
    while pending:
        pending = [u for u in pending if not healthy(u)]
        if not pending:
            return None
        gone = [p for p in pids if not _alive(p)]
        if gone:
            return EXITED, f"process {gone[0]} of the engine exited before {pending[0]} was healthy"
        if time.monotonic() >= deadline:
            return 1, f"{pending[0]} did not answer /health 200 in time"
        time.sleep(POLL_S)
    return None


def add(address: str, body: dict[str, Any], key: str | None) -> tuple[bool, bool, str]:
    """POST the add to one proxy: (taken, worth asking again, what it said)."""
    request = admin_request(address, "add", body, key)
    try:
        with OPENER.open(request, timeout=PROBE_TIMEOUT_S * 6) as resp:
            resp.read(MAX_ANSWER_BYTES)
            return True, False, "joined"
    except urllib.error.HTTPError as exc:
        text = exc.read(4096).decode("utf-8", "replace")
        try:
            said = json.loads(text)["error"]["message"]
        except (ValueError, KeyError, TypeError):
            said = text[:200]
        return False, exc.code >= 500, f"HTTP {exc.code}: {said}"
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return False, True, str(exc)


def join_all(found: list[str], body: dict[str, Any], key: str | None, deadline: float) -> bool:
    """Ask every proxy until it took the engine, refused it, or the deadline passed."""
    pending = list(found)
    ok = True
    while pending:
        again = []
        for address in pending:
            taken, retry, said = add(address, body, key)
            if taken:
                _say(f"{address}: {said}")
            elif retry and time.monotonic() < deadline:
                again.append(address)
            else:
                _say(f"{address}: not joined ({said})")
                ok = False
        pending = again
        if pending:
            time.sleep(POLL_S)
    return ok


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse(sys.argv[1:] if argv is None else argv)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    deadline = time.monotonic() + args.wait
    stopped = wait_healthy(args.urls, args.pids, deadline)
    if stopped is not None:
        _say(stopped[1])
        return stopped[0]
    _say(f"{len(args.urls)} API(s) healthy: {' '.join(args.urls)}")
    found = addresses(list(args.proxies), args.port)
    if not found:
        return 1
    return (
        0 if join_all(found, args.body(), admin_key(args.key_env, args.key_file), deadline) else 1
    )


if __name__ == "__main__":
    sys.exit(main())
