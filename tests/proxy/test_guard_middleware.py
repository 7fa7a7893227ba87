"""The ASGI guard: against a tiny recording app, and inside a FastAPI app shaped like vLLM's.

Properties: a request the rule refuses gets 400 with the guard's code and never
reaches the app; every other request reaches the app with exactly the messages
the server sent (same bodies, same chunking), and the app's answer comes back
untouched. Routes are read from the app's router: every POST or websocket
route is guarded but the allow-listed ones, and ``GET /health`` says which.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from servekit.guard import GUARD_ERROR_CODE, DecodeGuardMiddleware, is_guarded_path

from .guard_spec import METHODS, PATHS, RELAXED, bodies, oracle_body, oracle_path_guarded

Message = dict[str, Any]
ROUTED = {
    "do_remote_prefill": True, "remote_block_ids": [[1]], "remote_engine_id": "e",
    "remote_request_id": "r", "remote_host": "h", "remote_port": 1,
}  # fmt: skip


@dataclass
class RecordingApp:
    """Reads the whole request, remembers it, answers 200 with a marker."""

    calls: list[dict[str, Any]] = field(default_factory=list)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        messages = []
        if scope["type"] == "http":
            while True:
                msg = await receive()
                messages.append(msg)
                if msg["type"] != "http.request" or not msg.get("more_body"):
                    break
        self.calls.append({"scope": scope, "receive": receive, "send": send, "messages": messages})
        if scope["type"] == "http":
            await send(
                {"type": "http.response.start", "status": 200, "headers": [(b"x-app", b"1")]}
            )
            await send({"type": "http.response.body", "body": b"from-app"})


def chunked(body: bytes, cuts: list[int]) -> list[Message]:
    edges = sorted({c % (len(body) + 1) for c in cuts} | {0, len(body)})
    parts = [body[a:b] for a, b in itertools.pairwise(edges)] or [b""]
    return [
        {"type": "http.request", "body": p, "more_body": i < len(parts) - 1}
        for i, p in enumerate(parts)
    ]


async def call(
    mw: DecodeGuardMiddleware, scope: dict[str, Any], incoming: list[Message]
) -> tuple[list[Message], Any]:
    queue = list(incoming)
    sent: list[Message] = []

    async def receive() -> Message:
        if queue:
            return queue.pop(0)
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")

    async def send(msg: Message) -> None:
        sent.append(msg)

    await mw(scope, receive, send)
    return sent, receive


def http_scope(method: str, path: str) -> dict[str, Any]:
    return {"type": "http", "method": method, "path": path, "headers": [], "client": ("1.2.3.4", 5)}


@settings(RELAXED, max_examples=150)
@given(METHODS, PATHS, bodies(), st.lists(st.integers(0, 200), max_size=4))
def test_middleware_without_a_router_holds_the_rule_exactly(
    method: str, path: str, body: bytes, cuts: list[int]
) -> None:
    app = RecordingApp()
    incoming = chunked(body, cuts)
    mw = DecodeGuardMiddleware(app, state="on")
    sent, receive = asyncio.run(call(mw, http_scope(method, path), incoming))
    if oracle_path_guarded(method, path) and not oracle_body(body):
        assert app.calls == []
        assert sent[0]["status"] == 400
        doc = json.loads(b"".join(m.get("body", b"") for m in sent[1:]))
        assert doc["error"]["code"] == GUARD_ERROR_CODE
        return
    (seen,) = app.calls
    assert seen["messages"] == incoming  # same bytes, same chunking
    assert seen["scope"] == http_scope(method, path)
    assert sent[1] == {"type": "http.response.body", "body": b"from-app"}
    if not is_guarded_path(method, path):
        assert seen["receive"] is receive  # untouched: not even wrapped


def test_other_scopes_pass_through_with_the_same_callables() -> None:
    app = RecordingApp()

    async def receive() -> Message:
        return {"type": "lifespan.startup"}

    async def send(msg: Message) -> None:
        raise AssertionError("the app sent nothing")

    scope = {"type": "lifespan"}
    asyncio.run(DecodeGuardMiddleware(app)(scope, receive, send))
    (seen,) = app.calls
    assert seen["scope"] is scope and seen["receive"] is receive and seen["send"] is send


def test_disconnect_while_buffering_is_replayed_to_the_app() -> None:
    app = RecordingApp()
    incoming = [
        {"type": "http.request", "body": b'{"prompt":', "more_body": True},
        {"type": "http.disconnect"},
    ]
    sent, _ = asyncio.run(
        call(DecodeGuardMiddleware(app), http_scope("POST", "/v1/completions"), incoming)
    )
    assert app.calls[0]["messages"] == incoming
    assert sent[0]["status"] == 200


def test_environment_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    scope = http_scope("POST", "/v1/completions")
    plain = [{"type": "http.request", "body": b'{"prompt": "hi", "max_tokens": 128}'}]
    marked = [
        {"type": "http.request", "body": b'{"kv_transfer_params": {"servekit_prompt_keyed": true}}'}
    ]
    # issue 23 item 1: unset, on, strict and unknown values refuse the marker; only
    # prompt-keyed (set by the Plan for ExampleConnector decoders) takes it
    cases = {
        "off": (200, 200), "on": (400, 400), "strict": (400, 400), "": (400, 400),
        "prompt-keyed": (400, 200), "typo": (400, 400),
    }  # fmt: skip
    for value, (want_plain, want_marked) in cases.items():
        monkeypatch.setenv("SERVEKIT_DECODE_GUARD", value)
        for incoming, want in ((plain, want_plain), (marked, want_marked)):
            sent, _ = asyncio.run(call(DecodeGuardMiddleware(RecordingApp()), scope, incoming))
            assert sent[0]["status"] == want, (value, incoming)


def test_refusal_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    incident = [{"type": "http.request", "body": b'{"prompt": "hi"}'}]
    with caplog.at_level("WARNING", logger="servekit.guard"):
        mw = DecodeGuardMiddleware(RecordingApp(), state="on")
        asyncio.run(call(mw, http_scope("POST", "/v1/completions"), incident))
    assert "decode guard: refused POST /v1/completions from 1.2.3.4:5" in caplog.text


def test_module_imports_only_the_standard_library() -> None:
    code = (
        "import sys, servekit.guard, servekit.proxy.guard_middleware;"
        "print(sorted({m.split('.')[0] for m in sys.modules} & "
        "{'aiohttp', 'starlette', 'fastapi', 'pydantic', 'prometheus_client', 'typer'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# -- inside a FastAPI app shaped like vLLM's (vLLM adds the class with add_middleware) --


def vllm_like_app() -> Any:
    fastapi = pytest.importorskip("fastapi", reason="FastAPI comes with the vLLM extra")
    from starlette.responses import Response
    from starlette.routing import Mount

    app = fastapi.FastAPI()

    async def generate(request: Any) -> dict[str, Any]:
        return {"got": await request.json()}

    generate.__annotations__["request"] = fastapi.Request  # resolved here, not as a string

    for path in ("/v1/completions", "/v1/chat/completions", "/v1/messages", "/invocations",
                 "/tokenize", "/v1/responses/{response_id}/cancel"):  # fmt: skip
        app.add_api_route(path, generate, methods=["POST"])

    @app.get("/health")
    async def health() -> Response:
        return Response(status_code=200)

    async def realtime(ws: Any) -> None:
        await ws.accept()
        await ws.send_text("hello")
        await ws.close()

    realtime.__annotations__["ws"] = fastapi.WebSocket
    app.add_api_websocket_route("/v1/realtime", realtime)

    async def metrics_app(scope: Any, receive: Any, send: Any) -> None:
        await Response(b"m 1\n")(scope, receive, send)

    app.router.routes.append(Mount("/metrics", app=metrics_app))
    app.add_middleware(DecodeGuardMiddleware)
    return app


def test_routes_come_from_the_router_and_health_names_them() -> None:
    testclient = pytest.importorskip("fastapi.testclient")
    with testclient.TestClient(vllm_like_app()) as client:
        health = client.get("/health")
        assert health.status_code == 200
        assert health.headers["x-servekit-decode-guard"] == "strict"
        report = health.json()["decode_guard"]
        assert report["routes_from"] == "router"
        assert set(report["guarded"]) == {
            "POST /v1/completions", "POST /v1/chat/completions", "POST /v1/messages",
            "POST /invocations", "WS /v1/realtime",
        }  # fmt: skip
        assert health.headers["x-servekit-guarded-routes"].split() == [
            r.split()[1] for r in report["guarded"]
        ]
        for path in ("/v1/completions", "/v1/messages", "/invocations"):
            refused = client.post(path, json={"prompt": "hi"})
            assert (
                refused.status_code == 400 and refused.json()["error"]["code"] == GUARD_ERROR_CODE
            )
            ok = client.post(path, json={"prompt": "hi", "kv_transfer_params": ROUTED})
            assert ok.status_code == 200 and ok.json()["got"]["kv_transfer_params"] == ROUTED
        assert client.post("/tokenize", json={"prompt": "hi"}).status_code == 200
        assert client.post("/v1/responses/resp_9/cancel", json={}).status_code == 200
        assert client.post("/metrics", content=b"").status_code == 200
        assert client.post("/v1/nowhere", json={}).status_code == 404  # no route, no engine


def test_websocket_routes_are_refused_before_accept() -> None:
    testclient = pytest.importorskip("fastapi.testclient")
    from starlette.websockets import WebSocketDisconnect

    with testclient.TestClient(vllm_like_app()) as client:
        with pytest.raises(WebSocketDisconnect) as info, client.websocket_connect("/v1/realtime"):
            pass
        assert info.value.code == 1008
