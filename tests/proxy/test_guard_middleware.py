"""The ASGI guard: run against a tiny recording app, no server in between.

Properties: a request the rule refuses gets 400 with the guard's code and never
reaches the app; every other request reaches the app with exactly the messages
the server sent (same bodies, same chunking), and the app's answer comes back
untouched. Non-HTTP scopes and non-guarded requests get the very same
receive/send callables.
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
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servekit.guard import GUARD_ERROR_CODE, is_guarded_path
from servekit.proxy.guard_middleware import DecodeGuardMiddleware

from .guard_spec import METHODS, PATHS, bodies, oracle

Message = dict[str, Any]
RELAXED = settings(suppress_health_check=[HealthCheck.too_slow], deadline=None, max_examples=150)


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


@RELAXED
@given(METHODS, PATHS, bodies(), st.lists(st.integers(0, 200), max_size=4))
def test_middleware_holds_the_rule_exactly(
    method: str, path: str, body: bytes, cuts: list[int]
) -> None:
    app = RecordingApp()
    incoming = chunked(body, cuts)
    sent, receive = asyncio.run(
        call(DecodeGuardMiddleware(app), http_scope(method, path), incoming)
    )
    if oracle(method, path, body):
        assert app.calls == []
        assert sent[0]["status"] == 400
        doc = json.loads(b"".join(m.get("body", b"") for m in sent[1:]))
        assert doc["error"]["code"] == GUARD_ERROR_CODE
        return
    (seen,) = app.calls
    assert seen["messages"] == incoming  # same bytes, same chunking
    assert seen["scope"] == http_scope(method, path)
    assert sent == [
        {"type": "http.response.start", "status": 200, "headers": [(b"x-app", b"1")]},
        {"type": "http.response.body", "body": b"from-app"},
    ]
    if not is_guarded_path(method, path):
        assert seen["receive"] is receive  # untouched: not even wrapped


@pytest.mark.parametrize("kind", ["websocket", "lifespan"])
def test_non_http_scopes_pass_through_with_the_same_callables(kind: str) -> None:
    app = RecordingApp()

    async def receive() -> Message:
        return {"type": f"{kind}.connect"}

    async def send(msg: Message) -> None:
        raise AssertionError("the app sent nothing")

    scope = {"type": kind, "path": "/v1/completions", "method": "POST"}
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


def test_environment_switch_turns_the_guard_off(monkeypatch: pytest.MonkeyPatch) -> None:
    incident = [{"type": "http.request", "body": b'{"prompt": "hi", "max_tokens": 128}'}]
    scope = http_scope("POST", "/v1/completions")
    monkeypatch.setenv("SERVEKIT_DECODE_GUARD", "off")
    app = RecordingApp()
    sent, _ = asyncio.run(call(DecodeGuardMiddleware(app), scope, incident))
    assert sent[0]["status"] == 200 and len(app.calls) == 1
    monkeypatch.delenv("SERVEKIT_DECODE_GUARD")
    sent, _ = asyncio.run(call(DecodeGuardMiddleware(RecordingApp()), scope, incident))
    assert sent[0]["status"] == 400


def test_refusal_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    incident = [{"type": "http.request", "body": b'{"prompt": "hi"}'}]
    with caplog.at_level("WARNING", logger="servekit.guard"):
        asyncio.run(
            call(
                DecodeGuardMiddleware(RecordingApp()),
                http_scope("POST", "/v1/completions"),
                incident,
            )
        )
    assert "decode guard: refused POST /v1/completions from 1.2.3.4:5" in caplog.text


def test_module_imports_only_the_standard_library_and_servekit_guard() -> None:
    code = (
        "import sys, servekit.proxy.guard_middleware;"
        "print(sorted({m.split('.')[0] for m in sys.modules} & "
        "{'aiohttp', 'starlette', 'fastapi', 'pydantic', 'prometheus_client', 'typer'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_works_as_a_starlette_middleware_class_like_vllm_adds_it() -> None:
    """vLLM calls app.add_middleware(cls) for a class given to --middleware."""
    fastapi = pytest.importorskip("fastapi", reason="FastAPI comes with the vLLM extra")
    testclient = pytest.importorskip("fastapi.testclient")
    app = fastapi.FastAPI()

    @app.post("/v1/completions")
    async def completions(doc: dict[str, Any]) -> dict[str, Any]:
        return {"got": doc}

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {}

    app.add_middleware(DecodeGuardMiddleware)
    with testclient.TestClient(app) as client:
        refused = client.post("/v1/completions", json={"prompt": "hi"})
        assert refused.status_code == 400 and refused.json()["error"]["code"] == GUARD_ERROR_CODE
        kv = {"prompt": "hi", "kv_transfer_params": {"remote_engine_id": "e"}}
        ok = client.post("/v1/completions", json=kv)
        assert ok.status_code == 200 and ok.json() == {"got": kv}
        assert client.get("/health").status_code == 200
