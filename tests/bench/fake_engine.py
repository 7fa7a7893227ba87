"""A small OpenAI-compatible engine on loopback for the bench tests.

It serves /v1/completions (stream or not) with a fixed TTFT and ITL, /tokenize
(a word is one token, a word longer than six characters two), /v1/models,
/health and /metrics (running/waiting gauges, spec-decode counters when
``tokens_per_step`` > 1, the cache config info gauge, and optionally the
request decode-time histogram). It runs in a thread with
its own event loop so synchronous code (run_bench, the CLI) can drive it.
"""

from __future__ import annotations

import asyncio
import json
import threading
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web


@dataclass
class EngineConfig:
    ttft_s: float = 0.005
    itl_s: float = 0.002
    tokens_per_step: int = 1
    fail_every: int = 0  # every k-th completion answers 500 (0: never)
    phantom_on: frozenset[int] = frozenset()  # completion indices seen with +1 running
    phantom_ttft_s: float = 0.6  # long enough for the 0.25 s sampler to see it
    busy: bool = False  # the running gauge never drops to 0 (someone else's load)
    ghost_on: frozenset[int] = frozenset()  # a foreign request finishes unseen by the gauges
    num_gpu_blocks: int = 64
    block_size: int = 16
    metrics: bool = True
    tokenize: bool = True  # a PD proxy offers no /tokenize
    burst: bool = False  # every frame in one write, as a starved API server sends them
    decode_time: bool = False  # expose vllm:request_decode_time_seconds (first to last token)
    finish_late_s: float = 0.0  # count a finished request this long after its last frame


@dataclass
class EngineState:
    completions: int = 0
    running: int = 0
    phantom: int = 0
    max_running: int = 0
    finished: int = 0
    decode_s: float = 0.0
    decoded: int = 0
    drafts: int = 0
    accepted: int = 0
    tokenize_calls: int = 0
    metrics_calls: int = 0
    prompts: list[str] = field(default_factory=list)
    prompt_tokens: list[int] = field(default_factory=list)


# Like a real BPE vocabulary, some common words take several tokens, so word
# counts skip lengths and the prompt builder must pad to hit them exactly.
MULTI = {"his": 2, "would": 2, "said": 3, "could": 2}


def count_tokens(text: str) -> int:
    return sum(MULTI.get(w, 2 if len(w) > 6 else 1) for w in text.split())


class FakeEngine:
    def __init__(self, config: EngineConfig | None = None) -> None:
        self.config = config or EngineConfig()
        self.state = EngineState()
        self.url = ""
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None

    def __enter__(self) -> FakeEngine:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_post("/tokenize", self._tokenize)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/health", self._health)
        app.router.add_get("/version", self._version)
        app.router.add_get("/metrics", self._metrics)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"

    async def _stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _tokenize(self, request: web.Request) -> web.StreamResponse:
        if not self.config.tokenize:
            return web.json_response({"error": "no /tokenize here"}, status=404)
        self.state.tokenize_calls += 1
        body = await request.json()
        n = count_tokens(body["prompt"])
        return web.json_response({"count": n, "tokens": list(range(n)), "max_model_len": 8192})

    async def _models(self, request: web.Request) -> web.StreamResponse:
        return web.json_response({"data": [{"id": "fake-model"}]})

    async def _version(self, request: web.Request) -> web.StreamResponse:
        return web.json_response({"version": "0.0-fake"})

    async def _health(self, request: web.Request) -> web.StreamResponse:
        return web.Response()

    async def _metrics(self, request: web.Request) -> web.StreamResponse:
        if not self.config.metrics:
            return web.Response(status=404)
        self.state.metrics_calls += 1
        s, c = self.state, self.config
        text = (
            "# TYPE vllm:num_requests_running gauge\n"
            f"vllm:num_requests_running {s.running + s.phantom + int(c.busy)}\n"
            "# TYPE vllm:num_requests_waiting gauge\n"
            "vllm:num_requests_waiting 0\n"
            "# TYPE vllm:request_success_total counter\n"
            f"vllm:request_success_total {s.finished}\n"
            "# TYPE vllm:cache_config_info gauge\n"
            f'vllm:cache_config_info{{block_size="{c.block_size}",'
            f'num_gpu_blocks="{c.num_gpu_blocks}"}} 1.0\n'
        )
        if c.decode_time:
            text += (
                "# TYPE vllm:request_decode_time_seconds histogram\n"
                f'vllm:request_decode_time_seconds_bucket{{le="+Inf"}} {s.decoded}\n'
                f"vllm:request_decode_time_seconds_sum {s.decode_s}\n"
                f"vllm:request_decode_time_seconds_count {s.decoded}\n"
            )
        if c.tokens_per_step > 1:
            text += (
                "# TYPE vllm:spec_decode_num_drafts_total counter\n"
                f"vllm:spec_decode_num_drafts_total {s.drafts}\n"
                "# TYPE vllm:spec_decode_num_accepted_tokens_total counter\n"
                f"vllm:spec_decode_num_accepted_tokens_total {s.accepted}\n"
            )
        return web.Response(text=text, content_type="text/plain")

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        s, c = self.state, self.config
        s.completions += 1
        index = s.completions
        if c.fail_every and index % c.fail_every == 0:
            return web.json_response({"error": {"message": "injected"}}, status=500)
        phantom = 1 if index in c.phantom_on else 0
        s.phantom += phantom
        s.running += 1
        s.max_running = max(s.max_running, s.running)
        s.prompts.append(body["prompt"])
        n_prompt = count_tokens(body["prompt"])
        s.prompt_tokens.append(n_prompt)
        try:
            if phantom:
                await asyncio.sleep(c.phantom_ttft_s)
            return await self._generate(request, body, n_prompt)
        finally:
            s.running -= 1
            s.phantom -= phantom
            finished = 2 if index in c.ghost_on else 1
            if c.finish_late_s:
                asyncio.get_running_loop().call_later(c.finish_late_s, self._finish, finished)
            else:
                self._finish(finished)

    def _finish(self, n: int) -> None:
        self.state.finished += n

    async def _generate(
        self, request: web.Request, body: dict[str, Any], n_prompt: int
    ) -> web.StreamResponse:
        c = self.config
        n = int(body.get("max_tokens", 16))
        usage = {"prompt_tokens": n_prompt, "completion_tokens": n, "total_tokens": n_prompt + n}
        await asyncio.sleep(c.ttft_s)
        if not body.get("stream"):
            choice = {"text": "x" * n, "finish_reason": "length"}
            return web.json_response({"choices": [choice], "usage": usage})
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        if c.burst:
            # The engine decodes step by step; the client gets it all at once.
            decode_s = (n - 1) * c.itl_s
            await asyncio.sleep(decode_s)
            self.state.decode_s += decode_s
            self.state.decoded += 1
            frames = [
                {"choices": [{"index": 0, "text": "x", "finish_reason": None}]} for _ in range(n)
            ]
            data = "".join(f"data: {json.dumps(f)}\n\n" for f in frames)
            await resp.write(f"{data}data: [DONE]\n\n".encode())
            return resp
        sent = steps = 0
        while sent < n:
            k = 1 if sent == 0 else min(c.tokens_per_step, n - sent)
            if sent > 0:
                steps += 1
                await asyncio.sleep(c.itl_s)
                self.state.drafts += 1
                self.state.accepted += k - 1
            sent += k
            finish = "length" if sent >= n else None
            frame = {"choices": [{"index": 0, "text": "x" * k, "finish_reason": finish}]}
            await resp.write(f"data: {json.dumps(frame)}\n\n".encode())
        self.state.decode_s += steps * c.itl_s
        self.state.decoded += 1
        await resp.write(f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n".encode())
        await resp.write(b"data: [DONE]\n\n")
        return resp
