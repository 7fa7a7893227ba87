"""The engine bugs the acceptance checks exist to catch, each one a fault field.

Every fault below is off by default (the healthy case is asserted beside it)
and changes exactly the observable its acceptance check watches.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from servekit.sim.testing import RunningSim, running_sim
from servekit.textcontract import encode
from servekit.visioncontract import COLOUR_QUESTION, colour_png, data_url

from .webclient import get, metric, post, request, sse_events, stream_text

PROMPT = "Tell me a story about the river and the old mill by the bridge."
SLOW = {"name": "slow", "decode_step_s": [[1, 0.004]], "prefill_per_token_s": 0.0001}


@pytest.fixture
def sim() -> Iterator[RunningSim]:
    spec = {
        "endpoints": [
            {"name": "m", "port": 0, "profile": SLOW},
            {"name": "p", "port": 0, "role": "prefill", "engine_id": "p", "kv_port": 36000},
            {"name": "d", "port": 0, "role": "decode", "engine_id": "d"},
        ]
    }
    with running_sim(spec) as running:
        yield running


def _complete(sim: RunningSim, name: str = "m", **extra: Any) -> Any:
    body = {"prompt": PROMPT, "max_tokens": 24, "temperature": 0, **extra}
    status, doc = post(f"{sim.urls[name]}/v1/completions", body)
    assert status == 200, doc
    return doc


def _stream(sim: RunningSim, name: str = "m") -> list[Any]:
    body = {"prompt": PROMPT, "max_tokens": 24, "temperature": 0, "stream": True}
    status, raw = request("POST", f"{sim.urls[name]}/v1/completions", body)
    assert status == 200
    return sse_events(raw)


def test_stream_mismatch_changes_only_the_streamed_text(sim: RunningSim) -> None:
    plain = _complete(sim)["choices"][0]["text"]
    assert stream_text(_stream(sim), chat=False) == plain
    sim.set_faults("m", stream_mismatch=True)
    streamed = stream_text(_stream(sim), chat=False)
    assert streamed != plain and streamed[:-1] == plain[:-1]
    assert _complete(sim)["choices"][0]["text"] == plain


def test_stream_no_done_drops_the_done_line(sim: RunningSim) -> None:
    assert _stream(sim)[-1] == "[DONE]"
    sim.set_faults("m", stream_no_done=True)
    events = _stream(sim)
    assert "[DONE]" not in events and events[-1]["choices"][0]["finish_reason"]


def test_crowd_drift_changes_answers_only_when_requests_overlap(sim: RunningSim) -> None:
    alone = _complete(sim)["choices"][0]["text"]
    sim.set_faults("m", crowd_drift=True)
    assert _complete(sim)["choices"][0]["text"] == alone  # alone: unchanged
    texts: list[str] = []
    threads = [
        threading.Thread(target=lambda: texts.append(_complete(sim)["choices"][0]["text"]))
        for _ in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(texts) == 4 and any(t != alone for t in texts)


def test_no_prefix_cache_never_hits(sim: RunningSim) -> None:
    long = PROMPT * 20
    _complete(sim, prompt=long)
    hot = _complete(sim, prompt=long)
    assert hot["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
    sim.set_faults("m", no_prefix_cache=True)
    other = long + " Again."
    _complete(sim, prompt=other)
    again = _complete(sim, prompt=other)
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] == 0


def test_usage_off_by_one_disagrees_with_tokenize(sim: RunningSim) -> None:
    count = len(encode(PROMPT))
    assert _complete(sim)["usage"]["prompt_tokens"] == count
    sim.set_faults("m", usage_off_by_one=True)
    use = _complete(sim)["usage"]
    assert use["prompt_tokens"] == count + 1
    assert use["total_tokens"] == use["prompt_tokens"] + use["completion_tokens"]


def test_ignore_stop_keeps_generating_past_the_stop_string(sim: RunningSim) -> None:
    text = _complete(sim, max_tokens=12)["choices"][0]["text"]
    stop = text.strip().split()[2]
    cut = _complete(sim, max_tokens=12, stop=[stop])["choices"][0]
    assert cut["finish_reason"] == "stop" and stop not in cut["text"]
    sim.set_faults("m", ignore_stop=True)
    kept = _complete(sim, max_tokens=12, stop=[stop])["choices"][0]
    assert kept["text"] == text


def _pd(sim: RunningSim) -> dict[str, Any]:
    prefill = _complete(
        sim, "p", kv_transfer_params={"do_remote_decode": True}, max_tokens=1, prompt=PROMPT * 4
    )
    return _complete(sim, "d", kv_transfer_params=prefill["kv_transfer_params"], prompt=PROMPT * 4)


def test_no_kv_handoff_recomputes_the_prompt_on_the_decoder(sim: RunningSim) -> None:
    handed = _pd(sim)
    assert handed["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
    _, text = get(f"{sim.urls['d']}/metrics")
    before = metric(text, "vllm:external_prefix_cache_hits_total")
    assert before > 0
    sim.set_faults("d", no_kv_handoff=True)
    recomputed = _pd(sim)
    assert recomputed["choices"][0]["text"] == handed["choices"][0]["text"]
    assert recomputed["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    _, text = get(f"{sim.urls['d']}/metrics")
    assert metric(text, "vllm:external_prefix_cache_hits_total") == before


def _colour_request(colours: list[str]) -> dict[str, Any]:
    parts: list[dict[str, Any]] = [{"type": "input_text", "text": COLOUR_QUESTION}]
    parts += [{"type": "input_image", "image_url": data_url(colour_png(c))} for c in colours]
    return {"input": [{"role": "user", "content": parts}], "max_output_tokens": 32}


def test_responses_with_two_images_names_both_colours_in_order() -> None:
    spec = {"endpoints": [{"name": "v", "port": 0}, {"name": "t", "port": 0, "vision": False}]}
    with running_sim(spec) as sim:
        status, doc = post(f"{sim.urls['v']}/v1/responses", _colour_request(["red", "blue"]))
        assert status == 200, doc
        assert doc["output"][0]["content"][0]["text"] == "red, blue."
        status, doc = post(f"{sim.urls['t']}/v1/responses", _colour_request(["red"]))
        assert status == 400 and "multimodal" in doc["error"]["message"]


def test_chat_images_are_read_from_the_image_url_object() -> None:
    content = [
        {"type": "text", "text": COLOUR_QUESTION},
        {"type": "image_url", "image_url": {"url": data_url(colour_png("green"))}},
    ]
    with running_sim({"endpoints": [{"name": "v", "port": 0}]}) as sim:
        body = {"messages": [{"role": "user", "content": content}], "max_tokens": 8}
        status, doc = post(f"{sim.url}/v1/chat/completions", body)
    assert status == 200 and doc["choices"][0]["message"]["content"] == "green."


def test_responses_api_off_answers_404() -> None:
    with running_sim({"endpoints": [{"name": "x", "port": 0, "responses_api": False}]}) as sim:
        status, _ = post(f"{sim.url}/v1/responses", {"input": "hi"})
        assert status == 404
        assert post(f"{sim.url}/v1/completions", {"prompt": "hi"})[0] == 200
