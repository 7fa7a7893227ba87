"""A scripted OpenAI-compatible engine: the acceptance suite's own test double.

``servekit accept --selfcheck`` points the judge at it with answers known to be
right or wrong, so a judge that lets a wrong code, a prompt echo or an
over-long answer through is caught before it vouches for a release. Its
answers are a pure function of the prompt (needle questions answered from the
prompt, as the simulator does; other prompts continued with seeded words), and
its faults make each invariant fail on purpose.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import random
import re
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, Literal

import aiohttp
from aiohttp import web
from pydantic import BaseModel, ConfigDict

from servekit.guard import guard_error_body, guard_rejects

AnswerMode = Literal["right", "wrong_code", "echo", "overlong"]
Role = Literal["mixed", "prefill", "decode", "proxy", "reference"]
TOKEN = re.compile(r"\s*(?:\w+|[^\w\s])")
NEEDLE = re.compile(r"The secret code for needle ([A-D]) is ([A-Z0-9]{4}-[0-9]{4})\.")
ASKED = re.compile(r"What is the secret code for needle ([A-D])\?")
REPEAT = re.compile(r"Repeat the code ([A-Z0-9]{4}-[0-9]{4})")
WORDS = (
    "river",
    "town",
    "bell",
    "lamp",
    "ferry",
    "mill",
    "bridge",
    "letter",
    "winter",
    "market",
    "road",
    "sheep",
    "oak",
    "clerk",
)
BLOCK = 16


class ScriptedConfig(BaseModel):
    """How the scripted engine answers, and which faults it has."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str = "scripted"
    max_model_len: int = 8192
    role: Role = "mixed"
    answer_mode: AnswerMode = "right"
    guard: bool = True
    unguarded_incident: bool = False
    proxy_counts: tuple[int, int] = (0, 0)
    disagree_salt: str = ""
    stream_mismatch: bool = False
    stream_no_done: bool = False
    crowd_drift: bool = False
    no_prefix_cache: bool = False
    usage_off_by_one: bool = False
    ignore_stop: bool = False
    no_kv_handoff: bool = False
    offers_responses: bool = True
    unhealthy: bool = False
    error_log: Path | None = None
    forward_to: str | None = None
    mirror_to: str | None = None
    delay_s: float = 0.005
    per_token_s: float = 0.00002


def tokens(text: str) -> list[str]:
    """The scripted tokenizer: words and punctuation, each with its leading spaces."""
    return TOKEN.findall(text)


def render_chat(messages: list[dict[str, Any]]) -> str:
    """The scripted chat template."""
    parts = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):
            content = " ".join(
                str(c.get("text", "<image>")) for c in content if isinstance(c, dict)
            )
        parts.append(f"<|{m.get('role')}|>{content}\n")
    return "".join(parts) + "<|assistant|>"


def _wrong(code: str) -> str:
    digits = "".join(str((int(d) + 1) % 10) for d in code[5:])
    return code[:5] + digits


def _continuation(prompt: str, salt: str) -> str:
    rng = random.Random(hashlib.sha256((salt + prompt).encode()).hexdigest())
    return " " + " ".join(rng.choice(WORDS) for _ in range(80)) + "."


class ScriptedEngine:
    """The server's state: prefix cache, counters, in-flight requests, death."""

    def __init__(self, config: ScriptedConfig) -> None:
        self.config = config
        self.seen: set[str] = set()
        self.hits = 0
        self.queries = 0
        self.external_hits = 0
        self.in_flight = 0
        self.dead = False

    # -- answers -----------------------------------------------------------------
    def answer(self, prompt: str, last_user: str, salt: str) -> str:
        """The scripted reply to ``prompt`` (whose last user turn is ``last_user``)."""
        code = self._retrieved(prompt, last_user)
        if code is None:
            return _continuation(prompt, salt)
        mode = self.config.answer_mode
        if mode == "wrong_code":
            return _wrong(code)
        if mode == "echo":
            return " ".join(last_user.strip().splitlines()[-2:]) + f" {code}"
        if mode == "overlong":
            return code + " " + "because the document says so, " * 10
        return code

    @staticmethod
    def _retrieved(prompt: str, last_user: str) -> str | None:
        asked = ASKED.findall(last_user)
        if asked:
            found: dict[str, str] = dict(NEEDLE.findall(prompt))
            return found.get(asked[-1], "I do not know.")
        repeat = REPEAT.search(last_user)
        return repeat.group(1) if repeat else None

    # -- handlers ----------------------------------------------------------------
    def app(self) -> web.Application:
        app = web.Application(client_max_size=256 * 1024 * 1024)
        app.router.add_get("/health", self.health)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/metrics", self.metrics)
        app.router.add_post("/tokenize", self.tokenize)
        app.router.add_post("/v1/completions", self.generate)
        app.router.add_post("/v1/chat/completions", self.generate)
        app.router.add_post("/v1/responses", self.responses)
        return app

    async def health(self, request: web.Request) -> web.Response:
        if self.dead or self.config.unhealthy:
            return web.json_response({"status": "dead"}, status=500)
        if self.config.role == "proxy":
            p, d = self.config.proxy_counts
            return web.json_response(
                {"status": "ok", "prefill_instances": p, "decode_instances": d}
            )
        return web.Response(status=200)

    async def models(self, request: web.Request) -> web.Response:
        card = {
            "id": self.config.model,
            "object": "model",
            "max_model_len": self.config.max_model_len,
        }
        return web.json_response({"object": "list", "data": [card]})

    async def metrics(self, request: web.Request) -> web.Response:
        text = (
            f'vllm:prefix_cache_queries_total{{model_name="{self.config.model}"}} {self.queries}\n'
            f'vllm:prefix_cache_hits_total{{model_name="{self.config.model}"}} {self.hits}\n'
        )
        if self.config.role == "decode":
            text += (
                f'vllm:external_prefix_cache_hits_total{{model_name="{self.config.model}"}} '
                f"{self.external_hits}\n"
            )
        return web.Response(text=text, content_type="text/plain")

    async def tokenize(self, request: web.Request) -> web.Response:
        doc = await request.json()
        text = render_chat(doc["messages"]) if "messages" in doc else str(doc.get("prompt", ""))
        ids = [hash(t) % 50000 for t in tokens(text)]
        return web.json_response(
            {"count": len(ids), "max_model_len": self.config.max_model_len, "tokens": ids}
        )

    async def responses(self, request: web.Request) -> web.Response:
        if self.config.forward_to is not None:
            return await self._forward(request, await request.read(), self.config.forward_to)
        if not self.config.offers_responses:
            return web.json_response({"error": "not found"}, status=404)
        doc = await request.json()
        text = _continuation(str(doc.get("input")), self.config.disagree_salt)[:80]
        item = {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": text}],
        }
        return web.json_response({"object": "response", "status": "completed", "output": [item]})

    async def generate(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        if self.config.forward_to is not None:
            if self.config.mirror_to is not None:
                await self._mirror(request.path, raw, self.config.mirror_to)
            return await self._forward(request, raw, self.config.forward_to)
        if self.dead:
            return web.json_response({"error": "EngineDeadError"}, status=500)
        if self.config.role == "decode" and guard_rejects("POST", request.path, raw):
            if self.config.guard:
                return web.Response(
                    body=guard_error_body(request.path), status=400, content_type="application/json"
                )
            if self.config.unguarded_incident:
                self._die()
                return web.json_response({"error": "EngineDeadError"}, status=500)
        doc = json.loads(raw)
        self.in_flight += 1
        try:
            return await self._generate(request, doc)
        finally:
            self.in_flight -= 1

    @staticmethod
    async def _forward(request: web.Request, raw: bytes, base: str) -> web.Response:
        """A proxy's pass-through: the same body to ``base``, its answer returned whole."""
        headers = {"Content-Type": "application/json"}
        async with (
            aiohttp.ClientSession() as session,
            session.post(base + request.path, data=raw, headers=headers) as resp,
        ):
            body = await resp.read()
            return web.Response(body=body, status=resp.status, content_type=resp.content_type)

    @staticmethod
    async def _mirror(path: str, raw: bytes, base: str) -> None:
        """A proxy's decode stage in miniature: the request with kv_transfer_params to decode.

        Its answer is dropped (the prefill engine's is returned); it exists so the
        decode engine counts a KV handoff the way vLLM's external cache metrics do.
        """
        doc = json.loads(raw)
        doc.update(stream=False, kv_transfer_params={"servekit_prompt_keyed": True})  # routed mark
        async with aiohttp.ClientSession() as session, session.post(base + path, json=doc) as resp:
            await resp.read()

    def _die(self) -> None:
        self.dead = True
        self._log("EngineDeadError: EngineCore encountered an issue (scripted incident)")

    def _log(self, line: str) -> None:
        if self.config.error_log is not None:
            with self.config.error_log.open("a", encoding="utf-8") as fh:
                fh.write(line + "\n")

    async def _generate(self, request: web.Request, doc: dict[str, Any]) -> web.StreamResponse:
        chat = "messages" in doc
        prompt = render_chat(doc["messages"]) if chat else str(doc.get("prompt", ""))
        last_user = self._last_user(doc) if chat else prompt
        n_prompt = len(tokens(prompt))
        if n_prompt > self.config.max_model_len:
            return web.json_response({"error": {"message": "prompt too long"}}, status=400)
        cached = self._cache(prompt, n_prompt)
        if self.config.role == "decode" and doc.get("kv_transfer_params"):
            # KV "loaded" from prefill, as vLLM counts it; the fault re-prefills silently.
            self.external_hits += 0 if self.config.no_kv_handoff else n_prompt
        await asyncio.sleep(self.config.delay_s + self.config.per_token_s * n_prompt)
        salt = self.config.disagree_salt + (
            "crowd" if self.config.crowd_drift and self.in_flight > 1 else ""
        )
        text, finish = self._cut(self.answer(prompt, last_user, salt), doc)
        n_out = len(tokens(text))
        use = {
            "prompt_tokens": n_prompt + int(self.config.usage_off_by_one),
            "completion_tokens": n_out,
            "total_tokens": n_prompt + n_out + int(self.config.usage_off_by_one),
            "prompt_tokens_details": {"cached_tokens": cached},
        }
        if doc.get("stream"):
            return await self._stream(request, text, finish, chat, use)
        choice: dict[str, Any] = {"index": 0, "finish_reason": finish}
        if chat:
            choice["message"] = {"role": "assistant", "content": text}
        else:
            choice["text"] = text
        return web.json_response(
            {
                "id": "scripted",
                "object": "chat.completion" if chat else "text_completion",
                "created": int(time.time()),
                "model": self.config.model,
                "choices": [choice],
                "usage": use,
            }
        )

    @staticmethod
    def _last_user(doc: dict[str, Any]) -> str:
        users = [m for m in doc["messages"] if m.get("role") == "user"]
        content = users[-1].get("content") if users else ""
        return content if isinstance(content, str) else json.dumps(content)

    def _cache(self, prompt: str, n_prompt: int) -> int:
        key = hashlib.sha256(prompt.encode()).hexdigest()
        self.queries += n_prompt
        if key in self.seen and not self.config.no_prefix_cache:
            hit = n_prompt // BLOCK * BLOCK
            self.hits += hit
            return hit
        self.seen.add(key)
        return 0

    def _cut(self, text: str, doc: dict[str, Any]) -> tuple[str, str]:
        stops = doc.get("stop") or []
        if isinstance(stops, str):
            stops = [stops]
        if not self.config.ignore_stop:
            for stop in stops:
                at = text.find(stop)
                if at >= 0:
                    return text[:at], "stop"
        toks = tokens(text)
        limit = int(doc.get("max_tokens") or doc.get("max_output_tokens") or 16)
        if len(toks) > limit:
            return "".join(toks[:limit]), "length"
        return text, "stop"

    async def _stream(
        self, request: web.Request, text: str, finish: str, chat: bool, use: dict[str, Any]
    ) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        pieces = tokens(text) or [""]
        if self.config.stream_mismatch:
            pieces = [*pieces[:-1], "~"]
        for i, piece in enumerate(pieces):
            last = i == len(pieces) - 1
            delta: dict[str, Any] = {"content": piece} if chat else {}
            choice: dict[str, Any] = {"index": 0, "finish_reason": finish if last else None}
            if chat:
                choice["delta"] = delta
            else:
                choice["text"] = piece
            await resp.write(f"data: {json.dumps({'choices': [choice]})}\n\n".encode())
        await resp.write(f"data: {json.dumps({'choices': [], 'usage': use})}\n\n".encode())
        if not self.config.stream_no_done:
            await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp


@contextlib.asynccontextmanager
async def serve_scripted(config: ScriptedConfig) -> AsyncIterator[str]:
    """Serve a scripted engine on 127.0.0.1 (ephemeral port) in this loop; yield its URL."""
    runner = web.AppRunner(ScriptedEngine(config).app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = _bound_port(runner)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


def _bound_port(runner: web.AppRunner) -> int:
    """The ephemeral port the runner's only site listens on."""
    for address in runner.addresses:
        if isinstance(address, tuple):
            return int(address[1])
    raise RuntimeError("scripted engine is not listening")


@contextlib.contextmanager
def running_scripted(config: ScriptedConfig) -> Iterator[str]:
    """Serve a scripted engine from a background thread (for synchronous callers)."""
    loop = asyncio.new_event_loop()
    ready: asyncio.Future[str] = loop.create_future()
    stop = asyncio.Event()

    async def main() -> None:
        async with serve_scripted(config) as url:
            ready.set_result(url)
            await stop.wait()

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    url = asyncio.run_coroutine_threadsafe(_wait(ready), loop).result(timeout=30)
    try:
        yield url
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(timeout=30)
        loop.close()


async def _wait(future: asyncio.Future[str]) -> str:
    return await future
