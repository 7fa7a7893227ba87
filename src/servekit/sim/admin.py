"""The admin server: every endpoint's faults and state, one at a time or by group.

Per endpoint: ``/sim/endpoints/{name}/faults|kill|restart|state``. By group:
``POST /sim/group/faults|kill|restart`` with ``{"select": {"names": [...],
"role": ..., "engine_id": ..., "node": ...}, ...}``, e.g. kill every DP rank of
engine 3 at once, or lose node 2 (``faults: {"unreachable": true}``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from aiohttp import web

from servekit.sim.endpoint import SimEndpoint
from servekit.sim.faults import patch_faults
from servekit.sim.http import add_admin_routes, admin_handler, json_response, slow_start
from servekit.sim.openai import ApiError, load_json

SELECT_KEYS = frozenset({"names", "role", "engine_id", "node"})
GroupAction = Callable[[list[SimEndpoint], dict[str, Any]], None]


def build_admin_app(endpoints: Mapping[str, SimEndpoint]) -> web.Application:
    """The admin application over ``endpoints`` (by name)."""
    app = web.Application()

    def pick(request: web.Request) -> SimEndpoint:
        name = request.match_info["name"]
        if name not in endpoints:
            known = ", ".join(endpoints)
            raise ApiError(404, f"no endpoint named {name}; known: {known}", "NotFoundError")
        return endpoints[name]

    async def listing(request: web.Request) -> web.Response:
        return json_response([ep.state() for ep in endpoints.values()])

    async def health(request: web.Request) -> web.Response:
        return web.Response(status=200)

    def group(action: GroupAction) -> Callable[[web.Request], Any]:
        async def answer(request: web.Request) -> list[dict[str, Any]]:
            doc = load_json(await request.read())
            chosen = select(endpoints, doc.get("select"))
            action(chosen, doc)
            return [ep.state() for ep in chosen]

        return admin_handler(answer)

    app.router.add_get("/health", health)
    app.router.add_get("/sim/endpoints", listing)
    add_admin_routes(app.router, "/sim/endpoints/{name}", pick)
    app.router.add_post("/sim/group/faults", group(_group_faults))
    app.router.add_post("/sim/group/kill", group(_group_kill))
    app.router.add_post("/sim/group/restart", group(_group_restart))
    return app


def select(endpoints: Mapping[str, SimEndpoint], sel: Any) -> list[SimEndpoint]:
    """Endpoints matching every given key of ``sel``; 400/404 when it is wrong or empty."""
    if not isinstance(sel, dict) or not sel or set(sel) - SELECT_KEYS:
        raise ApiError(400, "select: expected an object with names, role, engine_id and/or node")
    names = sel.get("names")
    if names is not None and not (
        isinstance(names, list) and all(isinstance(n, str) for n in names)
    ):
        raise ApiError(400, "select.names: expected a list of endpoint names")
    role, engine, node = sel.get("role"), sel.get("engine_id"), sel.get("node")
    chosen = [
        ep
        for ep in endpoints.values()
        if (names is None or ep.spec.name in names)
        and (role is None or ep.spec.role == role)
        and (engine is None or ep.spec.engine == str(engine))
        and (node is None or ep.spec.node == str(node))
    ]
    if not chosen:
        raise ApiError(404, f"select {sel}: matched no endpoint", "NotFoundError")
    return chosen


def _group_faults(chosen: list[SimEndpoint], doc: dict[str, Any]) -> None:
    patch = doc.get("faults")
    if not isinstance(patch, dict):
        raise ApiError(400, "faults: expected an object of fault fields")
    faults_only = {k: v for k, v in patch.items() if k != "disagree_seed"}
    for ep in chosen:  # validate for all before changing any
        patch_faults(ep.faults, faults_only)
    for ep in chosen:
        ep.set_faults(patch)


def _group_kill(chosen: list[SimEndpoint], doc: dict[str, Any]) -> None:
    for ep in chosen:
        ep.kill("killed through the admin API (group)")


def _group_restart(chosen: list[SimEndpoint], doc: dict[str, Any]) -> None:
    slow = slow_start(doc)
    for ep in chosen:
        ep.restart(slow)
