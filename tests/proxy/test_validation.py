"""Strict request checks before prefill (issue 13, items 9 and 10).

``"stream": "false"`` was read as true by the proxy and false by the engine;
``max_tokens: -1`` passed the prefill copy (max_tokens 1) and failed at decode
after the prefill had pinned its KV. Bad fields are now a 400 at the proxy,
before any engine sees the request.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, strategies as st

from servekit.proxy.failures import ProxyError
from servekit.proxy.validation import check_request

from .guard_spec import RELAXED
from .harness import MODEL, run, stack

COMPLETIONS = "/v1/completions"
CHAT = "/v1/chat/completions"

# The spec, from vLLM 0.32's request models and SamplingParams checks: field -> (JSON kinds, range)
INT, NUM, BOOL, STR, OBJ = "int", "num", "bool", "str", "obj"
SPEC: dict[str, tuple[str, float, float, bool]] = {  # kind, low, high, low end open
    "n": (INT, 1, math.inf, False), "max_tokens": (INT, 1, math.inf, False),
    "min_tokens": (INT, 0, math.inf, False), "top_k": (INT, -1, math.inf, False),
    "temperature": (NUM, 0, 2, False), "top_p": (NUM, 0, 1, True), "min_p": (NUM, 0, 1, False),
    "presence_penalty": (NUM, -2, 2, False), "frequency_penalty": (NUM, -2, 2, False),
    "repetition_penalty": (NUM, 0, math.inf, True), "seed": (INT, -(2**63), 2**63 - 1, False),
    "stream": (BOOL, 0, 0, False), "ignore_eos": (BOOL, 0, 0, False), "model": (STR, 0, 0, False),
    "stream_options": (OBJ, 0, 0, False), "prompt_logprobs": (INT, -1, math.inf, False),
}  # fmt: skip


def spec_accepts(field: str, v: Any) -> bool:
    kind, low, high, open_low = SPEC[field]
    if v is None:
        return True
    if kind == BOOL:
        return type(v) is bool
    if kind == STR:
        return type(v) is str
    if kind == OBJ:
        return type(v) is dict
    if type(v) is bool or type(v) not in (int, float):
        return False
    if kind == INT and not float(v).is_integer():
        return False
    if not math.isfinite(v):
        return False
    return (low < v if open_low else low <= v) and v <= high


VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 5), st.integers(), st.floats(-3, 3),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(["false", "1", "", "x"]),
    st.just([]), st.just({}),
)  # fmt: skip


def refused(route: str, body: dict[str, Any]) -> bool:
    try:
        check_request(route, body)
    except ProxyError as err:
        assert err.status == 400 and err.kind == "bad_request"
        return True
    return False


@RELAXED
@given(st.sampled_from(sorted(SPEC)), VALUES)
def test_each_field_is_checked_as_the_spec_says(field: str, v: Any) -> None:
    body = {"prompt": "hi", field: v}
    if field == "stream_options" and v:
        body["stream"] = True  # stream options need a stream
    assert refused(COMPLETIONS, body) is not spec_accepts(field, v)


@pytest.mark.parametrize(
    ("route", "body", "field"),
    [
        (COMPLETIONS, {"stream": "false"}, "stream"),
        (COMPLETIONS, {"max_tokens": -1}, "max_tokens"),
        (COMPLETIONS, {"max_tokens": "16"}, "max_tokens"),
        (CHAT, {"max_completion_tokens": 0, "messages": []}, "max_completion_tokens"),
        (COMPLETIONS, {"n": 0}, "n"),
        (COMPLETIONS, {"stream_options": {"include_usage": True}}, "stream_options"),
        (COMPLETIONS, {"min_tokens": 9, "max_tokens": 3}, "min_tokens"),
        (COMPLETIONS, {"stream": True, "prompt_logprobs": 1}, "prompt_logprobs"),
        (CHAT, {"messages": [], "top_logprobs": 3}, "top_logprobs"),
        (CHAT, {"messages": "hi"}, "messages"),
        (CHAT, {"messages": [], "logprobs": 2}, "logprobs"),
        (COMPLETIONS, {"prompt": {"text": "hi"}}, "prompt"),
        (COMPLETIONS, {"stop": [1]}, "stop"),
        ("/v1/responses", {"max_output_tokens": -5}, "max_output_tokens"),
    ],
)
def test_fields_the_engine_would_refuse_are_named(
    route: str, body: dict[str, Any], field: str
) -> None:
    with pytest.raises(ProxyError) as info:
        check_request(route, body)
    assert info.value.message.startswith(f"{field}: ")


@pytest.mark.parametrize(
    ("route", "body"),
    [
        (COMPLETIONS, {"model": MODEL, "prompt": "hi", "max_tokens": 16, "stream": False}),
        (COMPLETIONS, {"prompt": [1, 2, 3], "max_tokens": 16.0, "temperature": 0, "top_k": -1}),
        (COMPLETIONS, {"prompt": ["a", "b"], "stop": "\n", "seed": -3, "logprobs": 2}),
        (CHAT, {"messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 4,
                "logprobs": True, "top_logprobs": 2, "stream": True,
                "stream_options": {"include_usage": True}}),
        (CHAT, {"messages": [], "max_tokens": None, "n": None, "vendor_field": "passes"}),
        ("/v1/responses", {"input": "hi", "max_output_tokens": 3}),
    ],
)  # fmt: skip
def test_requests_vllm_accepts_pass(route: str, body: dict[str, Any]) -> None:
    check_request(route, body)


def test_refused_requests_never_reach_prefill() -> None:
    async def scenario() -> None:
        async with stack() as s:
            for body in ({"prompt": "x", "stream": "false"}, {"prompt": "x", "max_tokens": -1}):
                status, out = await s.post("/v1/completions", {"model": MODEL, **body})
                assert status == 400 and b"bad_request" in out, out
            assert s.prefill[0].gen() == [] and s.decode[0].gen() == []
            status, out = await s.post("/v1/completions", {"prompt": "x", "stream": False})
            assert status == 200 and out.startswith(b"{")  # JSON, not an event stream

    run(scenario())
