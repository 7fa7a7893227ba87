"""Admin endpoints: list, add, drain, undrain and remove instances at run time.

Off unless ``--admin``: a foreign decoder added from anywhere could drain the
real ones. When on, every admin request needs ``Authorization: Bearer <admin
key>`` if a key is configured (compared in constant time), and otherwise comes
from a loopback address or gets 403.

Every change goes through :class:`~servekit.proxy.membership.Membership`, as
discovery's do. ``add`` may name each engine's KV-event publisher
(``kv_events``: the kv-events policy subscribes to it) and, in bootstrap mode,
its engine id and bootstrap server (``bootstrap``). Removal drains first
(:mod:`servekit.proxy.drain`): the instance takes no new work and leaves the pool
when its in-flight requests and held KV are done; its streams migrate at
``--drain-grace``'s end. ``leave`` is the call an engine makes of itself as it
goes (a preStop hook, a SIGTERM trap): a removal that answers once drained, or
after ``wait_s``, naming the engine by its URLs or, with discovery, by its pod.
The example proxy's ``/instances/add`` and ``/instances/remove`` (``{"type":
..., "instances": ["host:port", ...]}``) are accepted too, so existing scripts
keep working.
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import json
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from servekit.errors import UsageError
from servekit.proxy.bodies import read_request
from servekit.proxy.config import parse_bootstrap
from servekit.proxy.drain import Drain
from servekit.proxy.failures import ProxyError, error_response
from servekit.proxy.instances import Instance
from servekit.proxy.membership import Member, Publisher
from servekit.proxy.router import Router
from servekit.vocabulary import PROXY_POOLS, check_url

ADMIN_PREFIXES = ("/admin/", "/instances/")
ACTIONS = ("add", "remove", "drain", "undrain", "leave")
WAITING = ("remove", "drain", "leave")  # they may wait_s for the drains they start


MAX_WAIT_S = 3600.0
FIELDS = ("role", "urls", "pod", "kv_events", "bootstrap", "wait_s")


def _text_map(doc: dict[str, Any], key: str) -> dict[str, str]:
    value = doc.get(key, {})
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise UsageError(f"{key}: give an object URL -> text")
    return value


@dataclass(frozen=True)
class Change:
    """Body of the admin POSTs: ``{"role": ROLE (optional), "urls": [URL, ...]}``, or
    ``{"pod": NAME}`` (discovered engines); ``add`` may carry ``kv_events`` and
    ``bootstrap`` (URL -> value), ``remove``, ``drain`` and ``leave`` ``wait_s``."""

    role: str | None
    urls: tuple[str, ...]
    pod: str | None = None
    publishers: tuple[tuple[str, Publisher], ...] = ()
    bootstraps: tuple[tuple[str, tuple[str, str]], ...] = ()
    wait_s: float = 0.0

    @classmethod
    def parse(cls, doc: Any) -> Change:
        """Validate a decoded body; UsageError naming the field otherwise."""
        if not isinstance(doc, dict):
            raise UsageError('body: expected {"role": ROLE, "urls": [URL, ...]}')
        extra = sorted(set(doc) - set(FIELDS))
        if extra:
            raise UsageError(f"{extra[0]}: unknown field; give {', '.join(FIELDS)} only")
        role, urls, pod = doc.get("role"), doc.get("urls"), doc.get("pod")
        if role is not None and role not in PROXY_POOLS:
            raise UsageError(f"role: pick one of {', '.join(PROXY_POOLS)} (got {role!r})")
        if pod is not None and (not isinstance(pod, str) or not 0 < len(pod) <= 253):
            raise UsageError("pod: give the pod's name")
        if pod is not None and urls is None:
            urls = []
        elif not isinstance(urls, list) or not urls or not all(isinstance(u, str) for u in urls):
            raise UsageError("urls: give a non-empty list of http://HOST:PORT")
        wait = doc.get("wait_s", 0.0)
        if (
            isinstance(wait, bool)
            or not isinstance(wait, int | float)
            or not 0 <= wait <= MAX_WAIT_S
        ):
            raise UsageError(f"wait_s: give seconds, 0 to {MAX_WAIT_S:.0f}")
        publishers = tuple(
            (_listed(url, urls, "kv_events"), Publisher.parse(value, f"kv_events[{url!r}]"))
            for url, value in _text_map(doc, "kv_events").items()
        )
        bootstraps = tuple(
            (_listed(url, urls, "bootstrap"), _bootstrap(url, value))
            for url, value in _text_map(doc, "bootstrap").items()
        )
        return cls(role, tuple(urls), pod, publishers, bootstraps, float(wait))


def _listed(url: str, urls: list[str], key: str) -> str:
    if url not in urls:
        raise UsageError(f"{key}: {url[:200]!r} is not one of urls")
    return url


def _bootstrap(url: str, value: str) -> tuple[str, str]:
    try:
        return parse_bootstrap(value)
    except UsageError:
        msg = f"bootstrap[{url[:200]!r}]: {value[:200]!r}: expected ENGINE_ID=http://HOST:PORT"
        raise UsageError(msg) from None


def is_admin_path(path: str) -> bool:
    return path.startswith(ADMIN_PREFIXES)


def _loopback(remote: str | None) -> bool:
    try:
        return remote is not None and ipaddress.ip_address(remote).is_loopback
    except ValueError:
        return False


def authorization(request: web.Request) -> str | None:
    """The one ``Authorization`` header, or None; sent twice, it is a 400.

    RFC 9110 allows one credential per request; taking the first of two (as
    before) let a request carry a second, unchecked one to whatever reads the
    last.
    """
    values = request.headers.getall("Authorization", [])
    if len(values) > 1:
        msg = f"Authorization: sent {len(values)} times; send one"
        raise ProxyError("bad_request", "proxy", msg)
    return values[0] if values else None


def bearer_matches(header: str | None, key: str) -> bool:
    """``Authorization: Bearer <key>``: the scheme in any case (RFC 9110 11.1), the key
    compared in constant time."""
    scheme, _, token = (header or "").partition(" ")
    given = token.lstrip(" ").encode("utf-8", "surrogateescape")
    same = hmac.compare_digest(given, key.encode("utf-8", "surrogateescape"))
    return same and scheme.lower() == "bearer"


def admin_refusal(request: web.Request, admin_key: str | None) -> web.Response | None:
    """None when the request may use the admin API, else the 400/401/403 to answer."""
    if admin_key is not None:
        try:
            header = authorization(request)
        except ProxyError as err:
            return error_response(err)
        if bearer_matches(header, admin_key):
            return None
        return _error(401, "unauthorized", "admin endpoints need the admin key as Bearer")
    if _loopback(request.remote):
        return None
    return _error(403, "forbidden", "admin endpoints answer loopback clients unless a key is set")


def _error(status: int, code: str, message: str) -> web.Response:
    return web.json_response(ProxyError(code, "proxy", message).payload(), status=status)


def _bad_doc(message: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": "invalid_request_error", "code": "bad_request"}}


def _bad(message: str) -> web.Response:
    return web.json_response(_bad_doc(message), status=400)


def _listing(router: Router, **extra: Any) -> web.Response:
    return web.json_response({**extra, "instances": [i.snapshot() for i in router.instances()]})


def _find(router: Router, change: Change, strict: bool = True) -> list[Instance]:
    """The instances ``change`` names; UsageError for a name not known (unless not
    ``strict``: an engine that left already has nothing to wait for)."""
    found = [
        i for i in router.instances()
        if i.url in change.urls or (change.pod is not None and i.pod == change.pod)
    ]  # fmt: skip
    if change.role:
        found = [i for i in found if i.role == change.role]
    missing = set(change.urls) - {i.url for i in found}
    if strict and missing:
        raise UsageError(f"urls: not in the pools: {sorted(missing)}")
    if strict and change.pod is not None and not found:
        raise UsageError(f"pod: no engine of pod {change.pod} is known here")
    return found


def _add(router: Router, change: Change) -> None:
    if change.role not in router.pools:
        raise UsageError(f"role: give one of {sorted(router.pools)} to add instances")
    publishers, bootstraps = dict(change.publishers), dict(change.bootstraps)
    if publishers and router.kv is None:
        raise UsageError("kv_events: this proxy runs no kv-events policy; drop it")
    members = [
        Member(change.role, check_url(url, "urls"), publishers.get(url), bootstraps.get(url))
        for url in change.urls
    ]
    for member in members:
        router.members.join(member, "admin")


def _apply(router: Router, action: str, change: Change) -> list[Drain]:
    """Apply ``change``; the drains it started or joined (for ``wait_s``)."""
    if action == "add":
        _add(router, change)
        return []
    drains = []
    for inst in _find(router, change, strict=action != "leave"):
        if action == "undrain":
            router.members.undrain(inst)
        elif action == "drain":
            drains.append(router.members.drain(inst, "admin-drain"))
        else:
            reason = "leave" if action == "leave" else "admin-remove"
            drains.append(router.members.leave(inst, reason))
    return drains


async def wait_drained(drains: list[Drain], wait_s: float) -> bool:
    """Wait up to ``wait_s`` for every drain to be done; True when they are."""
    pending = [asyncio.ensure_future(d.done.wait()) for d in drains if not d.done.is_set()]
    if pending and wait_s > 0:
        _, late = await asyncio.wait(pending, timeout=wait_s)
        for task in late:
            task.cancel()
    else:
        for task in pending:
            task.cancel()
    return all(d.done.is_set() for d in drains)


async def _json(request: web.Request, router: Router) -> Any:
    """The decoded body, or None when it is not JSON; 413/408 as for any body."""
    cfg = router.config
    raw = await read_request(request, cfg.max_body_bytes, cfg.body_timeout_s)
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        return None


async def perform(router: Router, action: str, doc: Any) -> tuple[int, dict[str, Any]]:
    """Apply one admin change here (and wait, ``wait_s``): the status and the answer."""
    try:
        change = Change.parse(doc)
        drains = _apply(router, action, change)
    except UsageError as exc:
        return 400, _bad_doc(exc.message)
    drained = await wait_drained(drains, change.wait_s)
    out: dict[str, Any] = {"action": action}
    if action in WAITING:
        out.update(drained=drained, drains=[d.status() for d in drains])
    out["instances"] = [i.snapshot() for i in router.instances()]
    return 200, out


async def _everywhere(router: Router, action: str, doc: Any) -> tuple[int, dict[str, Any]]:
    """:func:`perform` here, then on every sibling worker (``--workers``): one answer, whose
    ``drained`` holds only when every worker's drains are done."""
    status, out = await perform(router, action, doc)
    if status != 200 or router.siblings is None:
        return status, out
    wait_s = doc.get("wait_s", 0.0) if isinstance(doc, dict) else 0.0
    others = await router.siblings.fan_out(action, doc, float(wait_s))
    out["workers"] = {"answered": len(others), "of": router.siblings.plan.count - 1}
    if "drained" in out:
        out["drained"] = out["drained"] and all(
            isinstance(o, dict) and o.get("drained") is True for o in others.values()
        )
        for other in others.values():
            if isinstance(other, dict) and isinstance(other.get("drains"), list):
                out["drains"] += other["drains"]
    return status, out


def add_routes(app: web.Application, key: web.AppKey[Router]) -> None:
    """Register the admin routes on ``app``; ``key`` finds the router."""

    async def listing(request: web.Request) -> web.Response:
        return _listing(request.app[key])

    def action_handler(action: str, legacy: bool = False) -> Any:
        async def handle(request: web.Request) -> web.Response:
            router = request.app[key]
            try:
                doc = await _json(request, router)
            except ProxyError as err:
                return error_response(err)
            if legacy:  # the example proxy's body, as a Change body
                if not isinstance(doc, dict):
                    return _bad('body: expected {"type": ROLE, "instances": ["host:port"]}')
                items = doc.get("instances", [])
                items = [items] if isinstance(items, str) else items
                urls = [u if "://" in u else f"http://{u}" for u in items if isinstance(u, str)]
                doc = {"role": doc.get("type"), "urls": urls}
            status, out = await _everywhere(router, action, doc)
            return web.json_response(out, status=status)

        return handle

    app.router.add_get("/admin/instances", listing)
    for action in ACTIONS:
        app.router.add_post(f"/admin/instances/{action}", action_handler(action))
    for action in ("add", "remove"):
        app.router.add_post(f"/instances/{action}", action_handler(action, legacy=True))
