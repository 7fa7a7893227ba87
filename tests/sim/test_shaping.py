"""Answers shaped as vLLM shapes them, and the faults migration is proven against."""

from __future__ import annotations

import http.client
import json
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from servekit.sim.shaping import THINK_END, TOOL_BEGIN
from servekit.sim.testing import RunningSim, running_sim

from .webclient import post, request, sse_events, stream_text

TOOLS = [{"type": "function", "function": {"name": "search", "parameters": {}}}]


@pytest.fixture(scope="module")
def sim() -> Iterator[RunningSim]:
    parsers = {"reasoning_parser": True, "tool_call_parser": True}
    spec = {"admin": {"port": 0}, "endpoints": [
        {"name": "p", "port": 0, **parsers, "node": "n1"},  # parsers on
        {"name": "q", "port": 0, "node": "n2"},  # no parsers
        {"name": "g", "port": 0, "default_max_tokens": 7, "node": "n2"},  # a generation config
    ]}  # fmt: skip
    with running_sim(spec) as running:
        yield running


def chat(sim: RunningSim, name: str, **extra: Any) -> list[Any]:
    body = {"messages": [{"role": "user", "content": "shape this"}], "stream": True,
            "temperature": 0, **extra}  # fmt: skip
    status, raw = request("POST", f"{sim.urls[name]}/v1/chat/completions", body)
    assert status == 200, raw
    return sse_events(raw)


def deltas(events: list[Any]) -> list[dict[str, Any]]:
    return [e["choices"][0]["delta"] for e in events if e != "[DONE]" and e.get("choices")]


def test_thinking_streams_as_reasoning_under_a_parser_and_as_text_without(sim: RunningSim) -> None:
    thinking = {"chat_template_kwargs": {"thinking": True}}
    parsed = deltas(chat(sim, "p", **thinking))
    assert any("reasoning" in d for d in parsed) and all(THINK_END not in str(d) for d in parsed)
    plain = stream_text(chat(sim, "q", **thinking), chat=True)
    assert THINK_END in plain  # no parser: the thinking is content, marker and all
    assert plain.split(THINK_END, 1)[1] == "".join(d.get("content", "") for d in parsed)


def test_a_tool_call_streams_as_tool_calls_and_ends_with_their_finish_reason(
    sim: RunningSim,
) -> None:
    events = chat(sim, "p", tools=TOOLS)
    calls = [c for d in deltas(events) for c in d.get("tool_calls", [])]
    assert calls[0]["function"]["name"] == "search" and calls[0]["id"].startswith("chatcmpl-tool")
    args = "".join(c["function"].get("arguments", "") for c in calls)
    assert json.loads(args)["query"]
    assert events[-2]["choices"][0]["finish_reason"] == "tool_calls"
    assert TOOL_BEGIN in stream_text(chat(sim, "q", tools=TOOLS), chat=True)
    assert "tool_calls" not in str(deltas(chat(sim, "p", tools=TOOLS, tool_choice="none")))
    status, doc = post(f"{sim.urls['p']}/v1/chat/completions", {
        "messages": [{"role": "user", "content": "shape this"}], "tools": TOOLS})  # fmt: skip
    assert status == 200 and doc["choices"][0]["message"]["tool_calls"][0]["function"]["name"]


def test_structured_output_is_one_json_object(sim: RunningSim) -> None:
    fmt = {"type": "json_schema", "json_schema": {"name": "a", "schema": {"type": "object"}}}
    for extra in ({"response_format": fmt}, {"structured_outputs": {"json": {}}}):
        text = stream_text(chat(sim, "q", **extra), chat=True)
        assert isinstance(json.loads(text), dict)


def test_logprobs_come_in_each_routes_shape_one_entry_per_token(sim: RunningSim) -> None:
    events = chat(sim, "q", logprobs=True, top_logprobs=3, max_tokens=5, return_token_ids=True)
    body = [e for e in events if e != "[DONE]" and e.get("choices")][1:]
    for e in body:
        choice = e["choices"][0]
        entries = choice["logprobs"]["content"]
        assert len(entries) == len(choice["token_ids"]) and len(entries[0]["top_logprobs"]) == 3
    _, raw = request("POST", f"{sim.urls['q']}/v1/completions", {
        "prompt": "shape this", "stream": True, "logprobs": 2, "max_tokens": 4})  # fmt: skip
    lists = [e["choices"][0]["logprobs"] for e in sse_events(raw) if e != "[DONE]"]
    assert [len(lp["tokens"]) for lp in lists] == [1] * 4
    assert [lp["text_offset"][0] for lp in lists] == sorted(lp["text_offset"][0] for lp in lists)


def test_text_that_may_start_a_stop_string_is_held_back_until_it_cannot(sim: RunningSim) -> None:
    stop = "zz never here"
    events = chat(sim, "q", stop=[stop], max_tokens=12, ignore_eos=True)
    texts = [d.get("content", "") for d in deltas(events)[1:]]
    whole = stream_text(chat(sim, "q", max_tokens=12, ignore_eos=True), chat=True)
    assert "".join(texts) == whole  # nothing lost
    held = len(stop) - 1
    assert all(whole.startswith("".join(texts[:n])) for n in range(len(texts)))
    assert texts[0] == "" and len(texts[-1]) >= held  # held at the start, released at the end


def test_the_stop_string_is_kept_when_asked_and_null_max_tokens_is_16(sim: RunningSim) -> None:
    whole = stream_text(chat(sim, "q", max_tokens=12, ignore_eos=True), chat=True)
    stop = whole.split()[3]
    cut = stream_text(chat(sim, "q", max_tokens=12, ignore_eos=True, stop=[stop]), chat=True)
    kept = stream_text(chat(sim, "q", max_tokens=12, ignore_eos=True, stop=[stop],
                            include_stop_str_in_output=True), chat=True)  # fmt: skip
    assert kept == cut + stop and whole.startswith(kept)
    status, doc = post(f"{sim.urls['q']}/v1/completions", {
        "prompt": "x", "max_tokens": None, "ignore_eos": True})  # fmt: skip
    assert status == 200 and doc["usage"]["completion_tokens"] == 16


def test_a_chat_without_max_tokens_ends_at_the_generation_configs_limit(sim: RunningSim) -> None:
    events = chat(sim, "g", min_tokens=30)
    assert events[-2]["choices"][0]["finish_reason"] == "length"
    _, doc = post(f"{sim.urls['g']}/v1/chat/completions", {
        "messages": [{"role": "user", "content": "x"}], "min_tokens": 30})  # fmt: skip
    assert doc["usage"]["completion_tokens"] == 7


def test_a_stream_cut_right_after_its_finish_never_says_done(sim: RunningSim) -> None:
    post(f"{sim.admin_url}/sim/endpoints/q/faults", {"die_after_finish": True})
    body = json.dumps({"prompt": "x", "stream": True, "max_tokens": 4}).encode()
    req = urllib.request.Request(f"{sim.urls['q']}/v1/completions", data=body)
    try:
        with (
            urllib.request.urlopen(req, timeout=10) as resp,
            pytest.raises(http.client.IncompleteRead) as cut,  # no last chunk
        ):
            resp.read()
    finally:
        post(f"{sim.admin_url}/sim/endpoints/q/faults", {"die_after_finish": False})
    events = sse_events(cut.value.partial)
    assert events[-1] != "[DONE]" and events[-1]["choices"][0]["finish_reason"] == "length"


def test_a_lost_node_answers_nothing_until_it_comes_back(sim: RunningSim) -> None:
    status, _ = post(f"{sim.admin_url}/sim/group/faults",
                     {"select": {"node": "n2"}, "faults": {"unreachable": True}})  # fmt: skip
    assert status == 200
    try:
        for path in ("/health", "/v1/models"):
            with pytest.raises(TimeoutError):
                request("GET", sim.urls["q"] + path, timeout=0.5)
        with pytest.raises(TimeoutError):
            post(f"{sim.urls['g']}/v1/completions", {"prompt": "x"}, timeout=0.5)
        assert request("GET", sim.urls["p"] + "/health")[0] == 200  # another node
    finally:
        post(f"{sim.admin_url}/sim/group/faults",
             {"select": {"node": "n2"}, "faults": {"unreachable": False}})  # fmt: skip
    assert request("GET", sim.urls["q"] + "/health")[0] == 200
