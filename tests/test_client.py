"""The shared client against small real aiohttp servers on loopback."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from aiohttp import web
from hypothesis import given, strategies as st

import servekit.client as client_pkg
from servekit.client import (
    EndpointError,
    OpenAIClient,
    RequestRecord,
    SSEDecoder,
    merge_snapshots,
    parse_metrics,
)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
SEEN = web.AppKey("seen", list[tuple[dict[str, str], dict[str, Any]]])

METRICS_TEXT = """\
# HELP vllm:num_requests_running Running.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 1.0
vllm:num_requests_running{engine="1",model_name="m"} 2.0
# HELP vllm:generation_tokens_total Generated.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="m"} 10.0
vllm:generation_tokens_total{engine="1",model_name="m"} 5.0
# HELP vllm:generation_tokens_created Created.
# TYPE vllm:generation_tokens_created gauge
vllm:generation_tokens_created{engine="0",model_name="m"} 1.7e9
# HELP vllm:cache_config_info Cache config.
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="100"} 1.0
# HELP vllm:iteration_tokens_total Iteration tokens.
# TYPE vllm:iteration_tokens_total histogram
vllm:iteration_tokens_total_bucket{engine="0",le="1.0"} 2.0
vllm:iteration_tokens_total_bucket{engine="0",le="+Inf"} 3.0
vllm:iteration_tokens_total_count{engine="0"} 3.0
vllm:iteration_tokens_total_sum{engine="0"} 9.0
vllm:iteration_tokens_total_bucket{engine="1",le="1.0"} 1.0
vllm:iteration_tokens_total_bucket{engine="1",le="+Inf"} 1.0
vllm:iteration_tokens_total_count{engine="1"} 1.0
vllm:iteration_tokens_total_sum{engine="1"} 1.0
"""


def _frame(obj: Any) -> bytes:
    return f"data: {json.dumps(obj)}\n\n".encode()


async def _stream_completion(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    n = int(body["max_tokens"])
    for i in range(n):
        finish = "length" if i == n - 1 else None
        raw = _frame({"choices": [{"index": 0, "text": f"t{i} ", "finish_reason": finish}]})
        # Split every frame across two writes so the decoder must reassemble it.
        await resp.write(raw[:7])
        await asyncio.sleep(0.001)
        await resp.write(raw[7:])
    usage = {"prompt_tokens": 3, "completion_tokens": n, "total_tokens": 3 + n}
    await resp.write(_frame({"choices": [], "usage": usage}))
    await resp.write(b"data: [DONE]\n\n")
    return resp


async def _completion(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    request.app[SEEN].append((dict(request.headers), body))
    if body.get("stream"):
        return await _stream_completion(request)
    return web.json_response(
        {
            "choices": [{"index": 0, "text": "hello", "finish_reason": "stop"}],
            "usage": {
                "prompt_tokens": 4,
                "completion_tokens": 1,
                "total_tokens": 5,
                "prompt_tokens_details": {"cached_tokens": 2},
            },
        }
    )


async def _chat(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    if not body.get("stream"):
        return web.json_response(
            {
                "choices": [
                    {"message": {"role": "assistant", "content": "72"}, "finish_reason": "stop"}
                ]
            }
        )
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    await resp.write(b": ping\n\n")
    await resp.write(_frame({"choices": [{"delta": {"role": "assistant", "content": ""}}]}))
    await resp.write(_frame({"choices": [{"delta": {"content": "7"}}]}))
    await resp.write(_frame({"choices": [{"delta": {"content": "2"}, "finish_reason": "stop"}]}))
    await resp.write(b"data: [DONE]\n\n")
    return resp


async def _empty_stream(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    await resp.write(b"data: [DONE]\n\n")
    return resp


async def _error_stream(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    await resp.write(_frame({"choices": [{"text": "a"}]}))
    await resp.write(_frame({"error": {"message": "engine dead", "code": 500}}))
    return resp


async def _stall(request: web.Request) -> web.StreamResponse:
    await asyncio.sleep(1)
    return web.json_response({})


async def _refuse(request: web.Request) -> web.StreamResponse:
    return web.json_response({"error": {"code": "missing_kv_transfer_params"}}, status=400)


async def _tokenize(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    text = body.get("prompt") or " ".join(m["content"] for m in body["messages"])
    tokens = [len(w) for w in text.split()]
    return web.json_response({"count": len(tokens), "tokens": tokens, "max_model_len": 4096})


async def _models(request: web.Request) -> web.StreamResponse:
    return web.json_response({"object": "list", "data": [{"id": "tiny"}, {"id": "other"}]})


async def _metrics(request: web.Request) -> web.StreamResponse:
    return web.Response(text=METRICS_TEXT, content_type="text/plain")


async def _health(request: web.Request) -> web.StreamResponse:
    return web.Response(text="")


def _app() -> web.Application:
    app = web.Application()
    app[SEEN] = []
    app.router.add_post("/v1/completions", _completion)
    app.router.add_post("/v1/chat/completions", _chat)
    app.router.add_post("/empty/v1/completions", _empty_stream)
    app.router.add_post("/error/v1/completions", _error_stream)
    app.router.add_post("/stall/v1/completions", _stall)
    app.router.add_post("/refuse/v1/completions", _refuse)
    app.router.add_post("/tokenize", _tokenize)
    app.router.add_get("/v1/models", _models)
    app.router.add_get("/metrics", _metrics)
    app.router.add_get("/health", _health)
    return app


@asynccontextmanager
async def _server() -> AsyncIterator[tuple[str, web.Application]]:
    app = _app()
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}", app
    finally:
        await runner.cleanup()


def _run(coro: Awaitable[Any]) -> Any:
    async def main() -> Any:
        return await coro

    return asyncio.run(main())


async def _one(path: str, body: dict[str, Any], **kw: Any) -> RequestRecord:
    async with _server() as (url, _), OpenAIClient(url + path, **kw) as c:
        return await c.completion(body)


def test_public_api_is_pinned() -> None:
    assert client_pkg.__all__ == sorted(client_pkg.__all__)
    assert {"OpenAIClient", "RequestRecord", "MetricsSnapshot", "parse_metrics"} <= set(
        client_pkg.__all__
    )


def test_streamed_completion_records_every_token_frame_in_order() -> None:
    body = {"prompt": "x", "max_tokens": 5, "stream": True}
    rec = _run(_one("", body, model="tiny"))
    assert rec.ok, rec.error
    assert rec.status == 200 and rec.stream and rec.done
    assert len(rec.token_times_ns) == 5
    assert list(rec.token_times_ns) == sorted(rec.token_times_ns)
    assert rec.t_headers_ns is not None and rec.t_first_byte_ns is not None
    assert rec.t_start_ns <= rec.t_headers_ns <= rec.t_first_byte_ns <= rec.token_times_ns[0]
    assert rec.token_times_ns[-1] <= rec.t_end_ns
    assert rec.text == "t0 t1 t2 t3 t4 "
    assert rec.finish_reason == "length"
    assert rec.usage is not None and rec.usage.completion_tokens == 5
    assert rec.output_tokens == 5
    assert len(rec.itl_ns) == 4 and all(g >= 0 for g in rec.itl_ns)
    assert rec.ttft_ns == rec.token_times_ns[0] - rec.t_start_ns
    assert rec.latency_ns == rec.token_times_ns[-1] - rec.t_start_ns
    # Frames: 5 tokens + usage + [DONE], each the exact payload sent.
    assert [f.data for f in rec.frames][-1] == "[DONE]"
    assert len(rec.frames) == 7
    assert json.loads(rec.request_body or "")["model"] == "tiny"
    assert rec.response_body is not None and rec.response_body.count("data:") == 7


def test_light_records_drop_frames_and_body_but_keep_timings() -> None:
    body = {"prompt": "x", "max_tokens": 3, "stream": True}
    rec = _run(_one("", body, keep_frames=False, keep_body=False))
    assert rec.ok and rec.frames == () and rec.response_body is None
    assert len(rec.token_times_ns) == 3


def test_non_stream_completion_reads_text_usage_and_cached_tokens() -> None:
    rec = _run(_one("", {"prompt": "x", "max_tokens": 1}))
    assert rec.ok and not rec.stream
    assert rec.text == "hello" and rec.finish_reason == "stop"
    assert rec.usage is not None and rec.usage.cached_tokens == 2
    assert rec.ttft_ns is None and rec.latency_ns == rec.t_end_ns - rec.t_start_ns
    assert rec.json_body()["usage"]["total_tokens"] == 5


def test_chat_stream_skips_comments_and_counts_role_frame_like_vllm() -> None:
    async def go() -> tuple[RequestRecord, RequestRecord]:
        async with _server() as (url, _), OpenAIClient(url) as c:
            body: dict[str, Any] = {"messages": [{"role": "user", "content": "8*9"}]}
            return await c.chat({**body, "stream": True}), await c.chat(body)

    streamed, whole = _run(go())
    assert streamed.ok and streamed.text == "72" and streamed.finish_reason == "stop"
    assert len(streamed.token_times_ns) == 3
    assert whole.ok and whole.text == "72"


def test_http_error_is_data_with_body_kept() -> None:
    rec = _run(_one("/refuse", {"prompt": "x", "stream": True}))
    assert not rec.ok and rec.error_kind == "http" and rec.status == 400
    assert "missing_kv_transfer_params" in (rec.response_body or "")
    assert "missing_kv_transfer_params" in (rec.error or "")


def test_stream_without_tokens_is_an_error() -> None:
    rec = _run(_one("/empty", {"prompt": "x", "stream": True}))
    assert rec.error_kind == "no_token" and rec.done


def test_error_frame_mid_stream_is_an_error() -> None:
    rec = _run(_one("/error", {"prompt": "x", "stream": True}))
    assert rec.error_kind == "stream" and "engine dead" in (rec.error or "")
    assert len(rec.token_times_ns) == 1


def test_read_timeout_is_data() -> None:
    rec = _run(_one("/stall", {"prompt": "x"}, timeout_s=0.2))
    assert rec.error_kind == "timeout" and not rec.ok


def test_refused_connection_is_data() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]

    async def go() -> RequestRecord:
        async with OpenAIClient(f"http://127.0.0.1:{port}") as c:
            return await c.completion({"prompt": "x", "stream": True})

    rec = _run(go())
    assert rec.error_kind == "connect" and rec.status is None


def test_api_key_is_sent_as_bearer_and_v1_suffix_is_dropped() -> None:
    async def go() -> list[tuple[dict[str, str], dict[str, Any]]]:
        async with _server() as (url, app), OpenAIClient(url + "/v1/", api_key="sk-1") as c:
            await c.completion({"prompt": "x", "max_tokens": 1})
            seen: list[tuple[dict[str, str], dict[str, Any]]] = app[SEEN]
            return seen

    seen = _run(go())
    assert seen[0][0]["Authorization"] == "Bearer sk-1"


def test_setup_helpers_tokenize_models_health_metrics() -> None:
    async def go() -> dict[str, Any]:
        async with _server() as (url, _), OpenAIClient(url) as c:
            return {
                "model": await c.resolve_model(),
                "tok": await c.tokenize("aa bbb c"),
                "chat": await c.tokenize(messages=[{"role": "user", "content": "dd e"}]),
                "health": await c.health(),
                "metrics": await c.metrics(),
            }

    out = _run(go())
    assert out["model"] == "tiny"
    assert out["tok"].count == 3 and out["tok"].tokens == (2, 3, 1)
    assert out["tok"].max_model_len == 4096
    assert out["chat"].count == 2
    assert out["health"].ok and out["health"].status == 200
    snap = out["metrics"]
    assert snap.gauge("vllm:num_requests_running") == 3.0
    assert snap.counter("vllm:generation_tokens_total") == 15.0
    assert snap.counter("vllm:generation_tokens") == 15.0


def test_setup_helper_failure_raises_with_record() -> None:
    async def go() -> EndpointError:
        async with _server() as (url, _), OpenAIClient(url + "/nowhere") as c:
            try:
                await c.models()
            except EndpointError as exc:
                return exc
        raise AssertionError("no error")

    exc = _run(go())
    assert exc.record is not None and exc.record.status == 404


def test_parse_metrics_sums_labels_and_drops_created() -> None:
    snap = parse_metrics(METRICS_TEXT, t_ns=1)
    hist = snap.histogram("vllm:iteration_tokens_total")
    assert hist is not None and hist.count == 4.0 and hist.sum == 10.0
    assert hist.buckets == ((1.0, 3.0), (float("inf"), 4.0))
    assert not any(k.endswith("_created") for k in snap.gauges)
    assert snap.has("vllm:generation_tokens_total") and not snap.has("vllm:nothing")
    assert snap.info["vllm:cache_config_info"][0]["num_gpu_blocks"] == "100"


def test_untyped_series_are_read_by_name() -> None:
    snap = parse_metrics("vllm:spec_decode_num_drafts_total 7\nsome_gauge 3\n", t_ns=1)
    assert snap.counter("vllm:spec_decode_num_drafts") == 7.0
    assert snap.gauge("some_gauge") == 3.0


def test_sse_decoder_reassembles_split_events_crlf_and_multiline_data() -> None:
    dec = SSEDecoder()
    assert dec.feed(b'data: {"a"', 1) == []
    assert dec.feed(b": 1}\r\n\r\n: comment\n\ndata: x\ndata: y\n\ndata: tail", 2) == [
        (2, '{"a": 1}'),
        (2, "x\ny"),
    ]
    assert dec.flush(3) == [(3, "tail")]
    # A multi-byte character split across chunks survives.
    snow = "data: \u2603\n\n".encode()
    assert dec.feed(snow[:7], 4) == [] and dec.feed(snow[7:], 5) == [(5, "\u2603")]


def test_merge_snapshots_sums_engines() -> None:
    a = parse_metrics(METRICS_TEXT, t_ns=1)
    b = parse_metrics(METRICS_TEXT, t_ns=2)
    merged = merge_snapshots([a, b])
    assert merged.t_ns == 2
    assert merged.gauge("vllm:num_requests_running") == 6.0
    assert merged.counter("vllm:generation_tokens") == 30.0
    hist = merged.histogram("vllm:iteration_tokens_total")
    assert hist is not None and hist.count == 8.0
    assert len(merged.info["vllm:cache_config_info"]) == 2


def test_derived_client_shares_the_session_and_headers() -> None:
    async def go() -> tuple[bool, str]:
        async with _server() as (url, app), OpenAIClient(url, api_key="sk-2") as c:
            other = c.derive(url)
            await other.completion({"prompt": "x", "max_tokens": 1})
            await other.close()  # must not close the shared session
            rec = await c.completion({"prompt": "y", "max_tokens": 1})
            return rec.ok, app[SEEN][0][0]["Authorization"]

    ok, auth = _run(go())
    assert ok and auth == "Bearer sk-2"


@given(
    payloads=st.lists(
        st.text(
            alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n"),
            max_size=20,
        ),
        max_size=8,
    ),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=10),
)
def test_sse_decoder_gives_the_same_events_however_the_bytes_are_split(
    payloads: list[str], cuts: list[int]
) -> None:
    raw = "".join(f"data: {p}\n\n" for p in payloads).encode()
    points = sorted({c for c in cuts if c < len(raw)})
    pieces = [raw[a:b] for a, b in zip([0, *points], [*points, len(raw)], strict=True)]
    dec = SSEDecoder()
    events = [d for i, piece in enumerate(pieces) for _, d in dec.feed(piece, i)]
    events += [d for _, d in dec.flush(99)]
    assert events == payloads
