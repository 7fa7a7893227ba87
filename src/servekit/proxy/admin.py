"""Admin endpoints: list, add, drain, undrain and remove instances at run time.

Removal drains first: the instance takes no new work and leaves the pool when
its in-flight requests complete. The example proxy's ``/instances/add`` and
``/instances/remove`` (``{"type": ..., "instances": ["host:port", ...]}``) are
accepted too, so existing scripts keep working.
"""

from __future__ import annotations

from typing import Any, Literal

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from servekit.errors import UsageError
from servekit.proxy.config import check_url
from servekit.proxy.instances import Instance, State
from servekit.proxy.router import Router


class Change(BaseModel):
    """Body of the admin POSTs (schema built on first use: keeps start-up short)."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    role: Literal["prefill", "decode", "replica"] | None = None
    urls: tuple[str, ...] = Field(min_length=1)


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
            router.probe_soon(router.pools[change.role].add(check_url("urls", url)))
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


async def _change(request: web.Request, router: Router, action: str, doc: Any) -> web.Response:
    try:
        _apply(router, action, Change.model_validate(doc))
    except ValidationError as exc:
        err = exc.errors()[0]
        return _bad(f"{'.'.join(map(str, err['loc'])) or 'body'}: {err['msg']}")
    except UsageError as exc:
        return _bad(exc.message)
    return _listing(router, action=action)


async def _json(request: web.Request) -> Any:
    try:
        return await request.json()
    except ValueError:
        return None


def add_routes(app: web.Application, key: web.AppKey[Router]) -> None:
    """Register the admin routes on ``app``; ``key`` finds the router."""

    async def listing(request: web.Request) -> web.Response:
        return _listing(request.app[key])

    def action_handler(action: str) -> Any:
        async def handle(request: web.Request) -> web.Response:
            return await _change(request, request.app[key], action, await _json(request))

        return handle

    def legacy_handler(action: str) -> Any:
        async def handle(request: web.Request) -> web.Response:
            doc = await _json(request)
            if not isinstance(doc, dict):
                return _bad('body: expected {"type": ROLE, "instances": ["host:port"]}')
            items = doc.get("instances", [])
            items = [items] if isinstance(items, str) else items
            urls = [u if "://" in u else f"http://{u}" for u in items if isinstance(u, str)]
            new = {"role": doc.get("type"), "urls": urls}
            return await _change(request, request.app[key], action, new)

        return handle

    app.router.add_get("/admin/instances", listing)
    for action in ("add", "remove", "drain", "undrain"):
        app.router.add_post(f"/admin/instances/{action}", action_handler(action))
    for action in ("add", "remove"):
        app.router.add_post(f"/instances/{action}", legacy_handler(action))
