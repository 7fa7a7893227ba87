"""Small aiohttp backends that behave like vLLM API servers, one fault at a time.

Each :class:`FakeEngine` serves the generation routes, /health and /v1/models on
an ephemeral loopback port and records every request it saw, so tests assert on
what actually crossed the wire. ``fault`` picks the misbehaviour a test needs.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from multidict import CIMultiDict

GEN_ROUTES = ("/v1/completions", "/v1/chat/completions", "/v1/responses")


@dataclass
class Seen:
    """One request as the backend received it."""

    path: str
    body: dict[str, Any]
    headers: CIMultiDict[str]


def sse_frames(n: int, text: str = "tok") -> bytes:
    """A vLLM-shaped completion stream: n token frames, usage, [DONE]."""
    frames = [
        {"id": "cmpl-1", "choices": [{"index": 0, "text": f"{text}{i}", "finish_reason": None}]}
        for i in range(n)
    ]
    frames[-1]["choices"][0]["finish_reason"] = "length"
    frames.append({"id": "cmpl-1", "choices": [], "usage": {"prompt_tokens": 7,
                   "completion_tokens": n, "total_tokens": 7 + n}})  # fmt: skip
    body = b"".join(b"data: " + json.dumps(f).encode() + b"\n\n" for f in frames)
    return body + b"data: [DONE]\n\n"


@dataclass
class FakeEngine:
    """A vLLM-like backend; set ``fault`` to misbehave.

    Faults: "" (fine), "status" (answer ``fault_status``), "no_kv" (prefill
    answer without kv_transfer_params), "empty" (200 with no body), "reset"
    (stream two frames then drop the connection), "reset_before" (drop the
    connection before answering), "hang" (never answer), "slow_stream" (one
    frame every ``frame_delay`` seconds).
    """

    name: str
    fault: str = ""
    fault_status: int = 400
    health_status: int = 200
    health_delay: float = 0.0
    tokens: int = 4
    frame_delay: float = 0.05
    seen: list[Seen] = field(default_factory=list)
    cancelled: int = 0
    resets: int = 0
    in_handler: int = 0
    runner: web.AppRunner | None = None
    url: str = ""

    async def start(self) -> FakeEngine:
        app = web.Application()
        for path in GEN_ROUTES:
            app.router.add_post(path, self.generate)
        app.router.add_get("/health", self.health)
        app.router.add_get("/v1/models", self.models)
        app.router.add_post("/tokenize", self.tokenize)
        app.router.add_post("/reset_prefix_cache", self.reset_cache)
        self.runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self.runner.addresses[0][1]}"
        return self

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()

    def stream_bytes(self) -> bytes:
        return sse_frames(self.tokens, self.name)

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "id": "cmpl-1",
            "choices": [{"index": 0, "text": f"{self.name}-out", "finish_reason": "length"}],
            "usage": {"prompt_tokens": 7, "completion_tokens": self.tokens},
            "kv_transfer_params": None,
            "echo_kv": body.get("kv_transfer_params"),
        }
        kv = body.get("kv_transfer_params") or {}
        if kv.get("do_remote_decode") and self.fault != "no_kv":
            doc["kv_transfer_params"] = {
                "do_remote_prefill": True,
                "do_remote_decode": False,
                "remote_engine_id": self.name,
                "remote_block_ids": [1, 2, 3],
                "remote_host": "10.0.0.1",
                "remote_port": 5600,
            }
        return doc

    async def generate(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.seen.append(Seen(request.path, body, CIMultiDict(request.headers)))
        self.in_handler += 1
        try:
            return await self._respond(request, body)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        finally:
            self.in_handler -= 1

    async def _respond(self, request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        if self.fault == "status":
            err = {"error": {"message": f"{self.name} says no", "code": self.fault_status}}
            return web.json_response(err, status=self.fault_status)
        if self.fault == "hang":
            await asyncio.sleep(3600)
        if self.fault == "reset_before":
            assert request.transport is not None
            request.transport.close()
            await asyncio.sleep(3600)
        if self.fault == "empty":
            return web.Response(status=200, body=b"", content_type="application/json")
        if not body.get("stream"):
            return web.json_response(self.answer(body))
        return await self._stream(request)

    async def _stream(self, request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8"})
        await resp.prepare(request)
        frames = self.stream_bytes().split(b"\n\n")[:-1]
        for i, frame in enumerate(frames):
            await resp.write(frame + b"\n\n")
            if self.fault == "reset" and i == 1:
                assert request.transport is not None
                request.transport.abort()
                await asyncio.sleep(3600)
            if self.fault == "slow_stream":
                await asyncio.sleep(self.frame_delay)
        await resp.write_eof()
        return resp

    async def health(self, request: web.Request) -> web.Response:
        if self.health_delay:
            await asyncio.sleep(self.health_delay)
        return web.Response(status=self.health_status)

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response(
            {"object": "list", "data": [{"id": "tiny", "owned_by": self.name}]}
        )

    async def tokenize(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.seen.append(Seen(request.path, body, CIMultiDict(request.headers)))
        tokens = [ord(c) for c in body.get("prompt", "")]
        return web.json_response({"tokens": tokens, "count": len(tokens), "by": self.name})

    async def reset_cache(self, request: web.Request) -> web.Response:
        self.resets += 1
        return web.Response(status=500 if self.fault == "status" else 200)

    def gen_requests(self) -> list[Seen]:
        return [s for s in self.seen if s.path in GEN_ROUTES]
