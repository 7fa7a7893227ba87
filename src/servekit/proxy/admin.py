"""Admin endpoints: list, add, drain, undrain and remove instances at run time.

Off unless ``--admin``: a foreign decoder added from anywhere could drain the
real ones. When on, every admin request needs ``Authorization: Bearer <admin
key>`` if a key is configured (compared in constant time), and otherwise comes
from a loopback address or gets 403.

Removal drains first: the instance takes no new work and leaves the pool when
its in-flight requests complete. The example proxy's ``/instances/add`` and
``/instances/remove`` (``{"type": ..., "instances": ["host:port", ...]}``) are
accepted too, so existing scripts keep working.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from servekit.errors import UsageError
from servekit.proxy.bodies import read_request
from servekit.proxy.failures import ProxyError, error_response
from servekit.proxy.instances import Instance, State
from servekit.proxy.router import Router
from servekit.vocabulary import PROXY_POOLS, check_url

ADMIN_PREFIXES = ("/admin/", "/instances/")


@dataclass(frozen=True)
class Change:
    """Body of the admin POSTs: ``{"role": ROLE (optional), "urls": [URL, ...]}``."""

    role: str | None
    urls: tuple[str, ...]

    @classmethod
    def parse(cls, doc: Any) -> Change:
        """Validate a decoded body; UsageError naming the field otherwise."""
        if not isinstance(doc, dict):
            raise UsageError('body: expected {"role": ROLE, "urls": [URL, ...]}')
        extra = sorted(set(doc) - {"role", "urls"})
        if extra:
            raise UsageError(f"{extra[0]}: unknown field; give role and urls only")
        role, urls = doc.get("role"), doc.get("urls")
        if role is not None and role not in PROXY_POOLS:
            raise UsageError(f"role: pick one of {', '.join(PROXY_POOLS)} (got {role!r})")
        if not isinstance(urls, list) or not urls or not all(isinstance(u, str) for u in urls):
            raise UsageError("urls: give a non-empty list of http://HOST:PORT")
        return cls(role, tuple(urls))


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


def _bad(message: str) -> web.Response:
    doc = {"error": {"message": message, "type": "invalid_request_error", "code": "bad_request"}}
    return web.json_response(doc, status=400)


def _listing(router: Router, **extra: Any) -> web.Response:
    return web.json_response({**extra, "instances": [i.snapshot() for i in router.instances()]})


def _find(router: Router, change: Change) -> list[Instance]:
    found = [i for i in router.instances() if i.url in change.urls]
    if change.role:
        found = [i for i in found if i.role == change.role]
    missing = set(change.urls) - {i.url for i in found}
    if missing:
        raise UsageError(f"urls: not in the pools: {sorted(missing)}")
    return found


def _apply(router: Router, action: str, change: Change) -> None:
    if action == "add":
        if change.role not in router.pools:
            raise UsageError(f"role: give one of {sorted(router.pools)} to add instances")
        for url in change.urls:
            router.probe_soon(router.pools[change.role].add(check_url(url, "urls")))
        return
    for inst in _find(router, change):
        if action == "undrain":
            inst.state, inst.remove_when_idle = State.UNKNOWN, False
            router.probe_soon(inst)
            continue
        inst.state = State.DRAINING
        if action == "remove":
            inst.remove_when_idle = True
            router.pools[inst.role].reap()


async def _json(request: web.Request, router: Router) -> Any:
    """The decoded body, or None when it is not JSON; 413/408 as for any body."""
    cfg = router.config
    raw = await read_request(request, cfg.max_body_bytes, cfg.body_timeout_s)
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        return None


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
            try:
                _apply(router, action, Change.parse(doc))
            except UsageError as exc:
                return _bad(exc.message)
            return _listing(router, action=action)

        return handle

    app.router.add_get("/admin/instances", listing)
    for action in ("add", "remove", "drain", "undrain"):
        app.router.add_post(f"/admin/instances/{action}", action_handler(action))
    for action in ("add", "remove"):
        app.router.add_post(f"/instances/{action}", action_handler(action, legacy=True))
