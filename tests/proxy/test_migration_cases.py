"""Each kind of answer migrated mid-stream on the simulator: the uninterrupted answer, or an
explicit error event, never a 200 with a changed answer.

One prefill and two decoders with vLLM's parsers on (reasoning, tool calls). A case's
answer is read first without a fault (through the proxy, so its ``id`` is the same
X-Request-Id's); then the decoder that served it resets its connection after a few
tokens (or right after its ``finish_reason``) and the same request must come back byte
for byte (``created`` and the cache's counts aside), carried on the way the case says:
``prefix`` (a token-id continuation on /v1/completions), ``replay`` (the client's
request again) or ``finished`` (no migration: the answer was whole). A sampled answer
that only a replay could carry on ends with the error event instead.

The positive control forces every case through the token-id continuation the proxy
used before (issue 43): the cases it cannot carry come back changed, so these tests
can fail for the reason they name.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import pytest

from servekit.proxy.tape import Tape

from .harness import Node, Stack, run, stack, wait_until

CREATED = re.compile(rb'"(created|cached_tokens)":\d+')
TOOLS = [{"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}]
SCHEMA = {"type": "json_schema", "json_schema": {"name": "a", "schema": {"type": "object"}}}
PARSERS = {"reasoning_parser": True, "tool_call_parser": True}


@dataclass
class Case:
    name: str
    route: str
    body: dict[str, Any]
    way: str  # prefix, replay, finished, refused
    cut: int = 5  # tokens streamed before the reset
    fault: dict[str, Any] = field(default_factory=dict)


def chat(n: int, **extra: Any) -> dict[str, Any]:
    messages = [{"role": "user", "content": f"case {n}: tell me about proxies"}]
    return {"model": "sim-model", "messages": messages, "stream": True, "temperature": 0, **extra}


def completion(n: int, **extra: Any) -> dict[str, Any]:
    prompt = f"case {n}: tell me about proxies"
    return {"model": "sim-model", "prompt": prompt, "stream": True, "temperature": 0, **extra}


C, T = "/v1/chat/completions", "/v1/completions"
CASES = [
    Case("completion-max-tokens", T, completion(1, max_tokens=24, ignore_eos=True), "prefix"),
    Case("completion-default-16", T, completion(2, ignore_eos=True), "prefix"),
    Case("chat-no-max-tokens", C, chat(3), "replay"),
    Case("chat-sampled-no-max-tokens", C, chat(20, temperature=0.9), "prefix"),
    Case("chat-max-tokens", C, chat(4, max_tokens=20, ignore_eos=True), "prefix"),
    Case(
        "chat-stop-held-back",
        C,
        chat(5, stop=[" engine proxy", " tokens ."], max_tokens=40),
        "prefix",
        cut=9,
    ),
    Case("completion-stop-held-back", T, completion(6, stop=" the cache", max_tokens=30), "prefix"),
    Case("chat-reasoning", C, chat(7, chat_template_kwargs={"thinking": True}), "replay", cut=3),
    Case(
        "chat-reasoning-then-content",
        C,
        chat(8, chat_template_kwargs={"thinking": True}),
        "replay",
        cut=16,
    ),
    Case("chat-tool-call", C, chat(9, tools=TOOLS), "replay", cut=6),
    Case("chat-structured", C, chat(10, response_format=SCHEMA), "replay"),
    Case(
        "chat-guided-json", C, chat(11, structured_outputs={"json": {"type": "object"}}), "replay"
    ),
    Case("chat-logprobs", C, chat(12, logprobs=True, top_logprobs=2), "replay"),
    Case("completion-logprobs", T, completion(13, logprobs=2, max_tokens=20), "replay"),
    Case("chat-penalties", C, chat(14, frequency_penalty=0.5, max_tokens=30), "replay"),
    Case(
        "chat-seeded-sampling",
        C,
        chat(15, temperature=0.9, seed=7, response_format=SCHEMA),
        "replay",
    ),
    Case("chat-sampled-prefix", C, chat(16, temperature=0.9, max_tokens=30), "prefix"),
    Case(
        "chat-sampled-structured", C, chat(17, temperature=0.9, response_format=SCHEMA), "refused"
    ),
    Case("chat-finish-then-die", C, chat(18), "finished", fault={"die_after_finish": True}),
    Case(
        "completion-finish-then-die",
        T,
        completion(19, max_tokens=12),
        "finished",
        fault={"die_after_finish": True},
    ),
]


def frames(raw: bytes) -> list[bytes]:
    return [e[6:] for e in raw.split(b"\n\n") if e.startswith(b"data: ")]


async def ask(s: Stack, case: Case, rid: str) -> bytes:
    async with s.client.post(
        s.url + case.route, json=case.body, headers={"X-Request-Id": rid}
    ) as r:
        assert r.status == 200, await r.read()
        return CREATED.sub(rb'"\1":0', await r.read())


async def settled(s: Stack) -> None:
    """No instance suspect, every decoder's model length known: routing is as before."""
    insts = list(s.proxy.router.instances())
    await wait_until(
        lambda: (
            all(i.suspect_since is None and i.routable for i in insts)
            and all(i.max_model_len for i in insts if i.role == "decode")
        ),
        "instances settled",
    )


def served(s: Stack, before: list[int]) -> Node:
    (node,) = [d for d, n in zip(s.decode, before, strict=True) if len(d.gen()) > n]
    return node


async def migrated(s: Stack, case: Case, n: int) -> tuple[bytes, bytes, str]:
    """The answer without a fault, with one, and how the new decoder was asked (route)."""
    await settled(s)
    counts = [len(d.gen()) for d in s.decode]
    whole = await ask(s, case, f"case-{n}")
    node = served(s, counts)
    node.fault(**(case.fault or {"reset_rate": 1.0, "reset_after_tokens": case.cut}))
    await settled(s)
    counts = [len(d.gen()) for d in s.decode]
    try:
        cut = await ask(s, case, f"case-{n}")
    finally:
        node.fault(reset_rate=0.0, die_after_finish=False)
    others = [
        d for d, c in zip(s.decode, counts, strict=True) if d is not node and len(d.gen()) > c
    ]
    route = others[0].gen()[-1].path if others else ""
    return whole, cut, route


def check(case: Case, whole: bytes, cut: bytes, route: str) -> None:
    if case.way == "refused":
        assert cut != whole
        error = json.loads(frames(cut)[-2])["error"]
        assert error["code"] == "stream_interrupted" and "cannot be carried on" in error["message"]
        assert frames(cut)[-1] == b"[DONE]"
        return
    assert cut == whole, case.name
    assert frames(cut)[-1] == b"[DONE]" and b'"error"' not in cut
    want = {"prefix": "/v1/completions", "replay": case.route, "finished": ""}[case.way]
    assert route == want, (case.name, route)


def outcomes(s: Stack) -> dict[str, float]:
    """servekit_proxy_migrations_total by outcome."""
    found: dict[str, float] = {}
    for metric in s.proxy.router.metrics.registry.collect():
        if metric.name == "servekit_proxy_migrations":
            for sample in metric.samples:
                if sample.name.endswith("_total"):
                    found[sample.labels["outcome"]] = sample.value
    return found


def scenario(
    cases: list[Case], **engines: Any
) -> tuple[list[tuple[Case, bytes, bytes, str]], dict[str, float]]:
    async def go() -> tuple[list[tuple[Case, bytes, bytes, str]], dict[str, float]]:
        config = {"migration_limit": 3, "outlier_after": 1000, "health_timeout_s": 5.0}
        out = []
        async with stack(prefill=1, decode=2, sim={**PARSERS, **engines}, **config) as s:
            for n, case in enumerate(cases):
                out.append((case, *await migrated(s, case, n)))
            return out, outcomes(s)

    return run(go())


@pytest.mark.parametrize("part", [0, 1])
def test_each_kind_of_answer_comes_back_whole_or_ends_in_an_error(part: int) -> None:
    cases = CASES[part::2]
    results, counted = scenario(cases)
    for case, whole, cut, route in results:
        check(case, whole, cut, route)
    ways = [c.way for c in cases]
    want = {
        "ok": ways.count("prefix") + ways.count("replay"),
        "finished": ways.count("finished"),
        "refused": ways.count("refused"),
    }
    assert {k: counted.get(k, 0) for k in want} == want
    assert counted.get("failed", 0) == counted.get("diverged", 0) == 0


def test_the_reasoning_is_kept_as_reasoning_and_the_thinking_token_never_sent() -> None:
    ((_, whole, cut, _),), _ = scenario([next(c for c in CASES if c.name == "chat-reasoning")])
    deltas = [json.loads(f)["choices"][0]["delta"] for f in frames(cut)[:-1]]
    assert any("reasoning" in d for d in deltas) and b"</think>" not in cut
    assert cut == whole


def test_a_refusal_names_the_field_that_cannot_be_carried() -> None:
    ((_, _, cut, _),), _ = scenario([next(c for c in CASES if c.name == "chat-sampled-structured")])
    message = json.loads(frames(cut)[-2])["error"]["message"]
    assert "response_format" in message and "no seed" in message


def test_the_control_a_token_id_continuation_changes_the_answers_it_cannot_carry(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 43's proxy, in effect: every stream carried on /v1/completions from its ids,
    and a chat without max_tokens given /v1/completions' default (16)."""
    monkeypatch.setattr(Tape, "_prefix_blockers", lambda self, model_len: [])
    monkeypatch.setattr(Tape, "_limit", lambda self, model_len: self.body.get("max_tokens", 16))
    picked = [c for c in CASES if c.name in {"chat-no-max-tokens", "chat-reasoning",
              "chat-tool-call", "chat-structured", "chat-penalties"}]  # fmt: skip
    results, _ = scenario(picked)
    changed = {case.name for case, whole, cut, _ in results if cut != whole}
    assert changed == {c.name for c in picked}


GENERATION_CONFIG = {"default_max_tokens": 24}  # the model's max_new_tokens (vLLM's default)
LONG_CHAT = Case("chat-no-max-tokens-capped", C, chat(30, min_tokens=40), "replay", cut=6)


def test_a_chat_without_max_tokens_keeps_the_engines_own_default_limit() -> None:
    """An engine whose generation config sets max_new_tokens (servekit's tiny model:
    64) ends a chat that sets no limit there; the proxy cannot see it, so a greedy
    stream is replayed and ends where it would have."""
    ((case, whole, cut, route),), _ = scenario([LONG_CHAT], **GENERATION_CONFIG)
    check(case, whole, cut, route)
    assert b'"finish_reason":"length"' in whole


def test_the_control_what_fits_in_the_model_is_longer_than_the_engines_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("servekit.proxy.tape.reproducible", lambda body: False)
    ((_, whole, cut, route),), _ = scenario([LONG_CHAT], **GENERATION_CONFIG)
    assert route == "/v1/completions" and len(cut) > len(whole)


def test_the_control_without_the_stop_hold_back_the_text_held_back_is_lost(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """vLLM holds back the last max(len(stop)) - 1 characters of a stream; a cut that
    ignored them started the new leg after text the client never got."""
    monkeypatch.setattr("servekit.proxy.tape.stop_lag", lambda body: 0)
    results, _ = scenario([c for c in CASES if "stop-held-back" in c.name])
    assert all(cut != whole for _, whole, cut, _ in results)


def test_a_stop_string_that_spans_the_cut_ends_the_answer_where_it_would_have() -> None:
    """The stop string's first token went out before the decoder died, its second not."""

    async def go() -> None:
        config = {"migration_limit": 3, "outlier_after": 1000, "health_timeout_s": 5.0}
        async with stack(prefill=1, decode=2, **config) as s:
            plain = Case("plain", C, chat(40, max_tokens=20, ignore_eos=True), "prefix")
            words = [
                json.loads(f)["choices"][0]["delta"].get("content", "")
                for f in frames(await ask(s, plain, "words"))[1:-1]
            ]
            stop = words[8] + words[9]
            case = Case("span", C, chat(40, max_tokens=20, ignore_eos=True, stop=[stop]),
                        "prefix", cut=9)  # fmt: skip
            whole, cut, route = await migrated(s, case, 40)
            check(case, whole, cut, route)
            assert b'"finish_reason":"stop"' in whole and stop.encode() not in whole

    run(go())
