"""The OpenAI-compatible API of one endpoint, over real loopback HTTP."""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from servekit.sim.testing import RunningSim, running_sim

from .webclient import get, metric, post, request, sse_events, stream_text

MODEL = "sim-model"
NEEDLES = (
    "Filler before.\n\nThe secret code for needle A is ZQ7K-3341.\n\n"
    "The secret code for needle D is MN4P-9921.\n\nFiller after."
)
VLLM_METRICS = (
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
    "vllm:time_to_first_token_seconds_count",
    "vllm:inter_token_latency_seconds_count",
    "vllm:time_per_output_token_seconds_count",
    "vllm:e2e_request_latency_seconds_count",
    "vllm:prefix_cache_queries_total",
    "vllm:prefix_cache_hits_total",
    "vllm:kv_cache_usage_perc",
    "vllm:spec_decode_num_drafts_total",
    "vllm:spec_decode_num_draft_tokens_total",
    "vllm:spec_decode_num_accepted_tokens_total",
    "vllm:num_gpu_blocks",
    "vllm:request_queue_time_seconds_count",
    "vllm:request_prefill_time_seconds_count",
    "vllm:request_decode_time_seconds_count",
)


@pytest.fixture(scope="module")
def sim() -> Iterator[RunningSim]:
    spec = {"endpoints": [{"name": "m", "port": 0, "max_model_len": 4096}]}
    with running_sim(spec) as running:
        yield running


def _tokens(url: str, text: str) -> int:
    status, doc = post(f"{url}/tokenize", {"prompt": text})
    assert status == 200
    return int(doc["count"])


def test_completion_usage_matches_tokenize(sim: RunningSim) -> None:
    prompt = "Tell me about the weather in spring, please."
    status, doc = post(
        f"{sim.url}/v1/completions", {"model": MODEL, "prompt": prompt, "max_tokens": 200}
    )
    assert status == 200
    choice = doc["choices"][0]
    assert choice["finish_reason"] == "stop"
    usage = doc["usage"]
    assert usage["prompt_tokens"] == _tokens(sim.url, prompt)
    assert usage["completion_tokens"] == _tokens(sim.url, choice["text"])
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert usage["prompt_tokens_details"] == {"cached_tokens": 0}
    assert doc["object"] == "text_completion" and doc["model"] == MODEL


def test_max_tokens_and_ignore_eos_give_length(sim: RunningSim) -> None:
    prompt = "Write a long essay about block tables."
    _, short = post(f"{sim.url}/v1/completions", {"prompt": prompt, "max_tokens": 3})
    assert short["choices"][0]["finish_reason"] == "length"
    assert short["usage"]["completion_tokens"] == 3
    _, full = post(
        f"{sim.url}/v1/completions", {"prompt": prompt, "max_tokens": 300, "ignore_eos": True}
    )
    assert full["choices"][0]["finish_reason"] == "length"
    assert full["usage"]["completion_tokens"] == 300
    assert full["choices"][0]["text"].startswith(short["choices"][0]["text"])


@pytest.mark.parametrize("chat", [False, True])
def test_stream_equals_non_stream(sim: RunningSim, chat: bool) -> None:
    path = "/v1/chat/completions" if chat else "/v1/completions"
    body: dict[str, object] = {"max_tokens": 50, "temperature": 0}
    if chat:
        body["messages"] = [{"role": "user", "content": "Say something about queues."}]
    else:
        body["prompt"] = "Say something about queues."
    _, plain = post(f"{sim.url}{path}", body)
    status, raw = request(
        "POST",
        f"{sim.url}{path}",
        {**body, "stream": True, "stream_options": {"include_usage": True}},
    )
    assert status == 200
    events = sse_events(raw)
    assert events[-1] == "[DONE]"
    usage_event = events[-2]
    assert usage_event["choices"] == [] and usage_event["usage"] == plain["usage"]
    text = plain["choices"][0]["message"]["content"] if chat else plain["choices"][0]["text"]
    assert stream_text(events, chat) == text
    finishes = [e["choices"][0]["finish_reason"] for e in events[:-2]]
    assert finishes[-1] == plain["choices"][0]["finish_reason"]
    assert all(f is None for f in finishes[:-1])
    if chat:
        assert events[0]["choices"][0]["delta"]["role"] == "assistant"


def test_stream_without_include_usage_has_no_usage_chunk(sim: RunningSim) -> None:
    _, raw = request("POST", f"{sim.url}/v1/completions", {"prompt": "x", "stream": True})
    events = sse_events(raw)
    assert all("usage" not in e for e in events if e != "[DONE]")


def test_hot_equals_cold_and_reports_cached_tokens(sim: RunningSim) -> None:
    prompt = " ".join(f"word{i}" for i in range(300)) + "\nWhat next?"
    body = {"prompt": prompt, "max_tokens": 40, "temperature": 0}
    _, cold = post(f"{sim.url}/v1/completions", body)
    _, hot = post(f"{sim.url}/v1/completions", body)
    assert hot["choices"][0]["text"] == cold["choices"][0]["text"]
    assert cold["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    cached = hot["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cached > 0 and cached % 16 == 0 and cached < hot["usage"]["prompt_tokens"]


def test_concurrent_equals_serial(sim: RunningSim) -> None:
    prompts = [f"Question {i}: what is {i} plus {i}?" for i in range(24)]

    def one(p: str) -> str:
        _, doc = post(
            f"{sim.url}/v1/completions", {"prompt": p, "max_tokens": 64, "temperature": 0}
        )
        return str(doc["choices"][0]["text"])

    serial = [one(p) for p in prompts]
    with ThreadPoolExecutor(8) as pool:
        concurrent = list(pool.map(one, prompts))
    assert concurrent == serial
    assert len(set(serial)) > 1


def test_needle_retrieval_in_chat_multi_turn(sim: RunningSim) -> None:
    messages = [
        {"role": "system", "content": "You are a careful reader."},
        {
            "role": "user",
            "content": f"{NEEDLES}\n\nWhat is the secret code for needle D?\nAnswer with the code only.",
        },
    ]
    _, first = post(f"{sim.url}/v1/chat/completions", {"messages": messages, "max_tokens": 64})
    assert first["choices"][0]["message"]["content"] == "MN4P-9921"
    assert first["choices"][0]["finish_reason"] == "stop"
    messages += [
        {"role": "assistant", "content": "MN4P-9921"},
        {"role": "user", "content": "What is the secret code for needle A?"},
    ]
    _, second = post(f"{sim.url}/v1/chat/completions", {"messages": messages, "max_tokens": 64})
    assert second["choices"][0]["message"]["content"] == "ZQ7K-3341"


def test_tokenize_messages_matches_chat_usage(sim: RunningSim) -> None:
    messages = [{"role": "user", "content": "Count my tokens, please."}]
    _, tok = post(f"{sim.url}/tokenize", {"messages": messages})
    _, doc = post(f"{sim.url}/v1/chat/completions", {"messages": messages, "max_tokens": 5})
    assert tok["count"] == doc["usage"]["prompt_tokens"] == len(tok["tokens"])
    assert tok["max_model_len"] == 4096


def test_models_health_version(sim: RunningSim) -> None:
    status, body = get(f"{sim.url}/v1/models")
    card = json.loads(body)["data"][0]
    assert status == 200 and card["id"] == MODEL and card["max_model_len"] == 4096
    assert get(f"{sim.url}/health")[0] == 200
    assert get(f"{sim.url}/version")[0] == 200


def test_responses_minimal(sim: RunningSim) -> None:
    status, doc = post(
        f"{sim.url}/v1/responses",
        {"input": f"{NEEDLES}\n\nWhat is the secret code for needle A?", "max_output_tokens": 32},
    )
    assert status == 200 and doc["status"] == "completed"
    assert doc["output"][0]["content"][0]["text"] == "ZQ7K-3341"
    assert doc["usage"]["output_tokens"] == 3
    assert post(f"{sim.url}/v1/responses", {"input": "x", "stream": True})[0] == 400


@pytest.mark.parametrize(
    ("body", "status", "needle"),
    [
        ({"prompt": "x", "model": "other"}, 404, "does not exist"),
        ({"prompt": "x", "max_tokens": 5000}, 400, "maximum context length is 4096"),
        ({"prompt": "x", "max_tokens": 0}, 400, "max_tokens"),
        ({"prompt": "x", "n": 2}, 400, "n:"),
        ({"prompt": {"a": 1}}, 400, "prompt"),
        ({"prompt": "x", "temperature": "hot"}, 400, "temperature"),
    ],
)
def test_bad_requests_name_the_field(
    sim: RunningSim, body: dict[str, object], status: int, needle: str
) -> None:
    got, doc = post(f"{sim.url}/v1/completions", body)
    assert got == status
    assert needle in doc["error"]["message"]


def test_non_json_body_is_400(sim: RunningSim) -> None:
    status, body = request("POST", f"{sim.url}/v1/completions", raw=b"not json")
    assert status == 400 and b"not valid JSON" in body


def test_metrics_carry_vllm_names_and_count(sim: RunningSim) -> None:
    _, before = get(f"{sim.url}/metrics")
    gen0 = metric(before, "vllm:generation_tokens_total")
    status, _ = post(
        f"{sim.url}/v1/completions", {"prompt": "count me", "max_tokens": 7, "ignore_eos": True}
    )
    assert status == 200
    _, after = get(f"{sim.url}/metrics")
    for name in VLLM_METRICS:
        metric(after, name)
    assert metric(after, "vllm:generation_tokens_total") - gen0 == 7
    assert metric(after, "vllm:cache_config_info", block_size="16") == 1
    assert metric(after, "vllm:request_success_total", finished_reason="length") >= 1
    assert b'model_name="sim-model"' in after


def test_stop_strings_cut_the_text_where_they_start(sim: RunningSim) -> None:
    body = {"prompt": "Tell me about stop words.", "max_tokens": 200, "ignore_eos": True}
    _, full = post(f"{sim.url}/v1/completions", body)
    text = full["choices"][0]["text"]
    stop = text.strip()[len(text.strip()) // 2 :][:3]  # usually inside a token
    _, cut = post(f"{sim.url}/v1/completions", {**body, "stop": [stop, "zzz-never"]})
    assert cut["choices"][0]["finish_reason"] == "stop"
    assert cut["choices"][0]["text"] == text[: text.find(stop)]
    tokens = cut["usage"]["completion_tokens"]
    assert _tokens(sim.url, cut["choices"][0]["text"]) <= tokens < 200
    status, raw = request(
        "POST", f"{sim.url}/v1/completions", {**body, "stop": [stop], "stream": True}
    )
    assert status == 200
    assert stream_text(sse_events(raw), chat=False) == text[: text.find(stop)]
    assert post(f"{sim.url}/v1/completions", {**body, "stop": [""]})[0] == 400


def test_profile_without_prefix_caching_reports_no_cached_tokens() -> None:
    profile = {"name": "no-prefix", "enable_prefix_caching": False}
    with running_sim({"endpoints": [{"name": "e", "port": 0, "profile": profile}]}) as sim:
        body = {"prompt": " ".join(f"w{i}" for i in range(200)), "max_tokens": 8}
        post(f"{sim.url}/v1/completions", body)
        _, hot = post(f"{sim.url}/v1/completions", body)
    assert hot["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
