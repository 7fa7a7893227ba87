"""The Tape on made-up vLLM events: how a failed stream is carried on, and what it refuses."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings, strategies as st

from servekit.proxy.carry import prefix_blockers, reproducible, stop_lag, token_limit
from servekit.proxy.tape import Tape

CHAT = "/v1/chat/completions"
HEAD = {"object": "chat.completion.chunk", "created": 1, "model": "m"}


def event(doc: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(doc, separators=(",", ":")).encode() + b"\n\n"


def chunk(rid: str, delta: dict[str, Any], ids: list[int] | None, **extra: Any) -> bytes:
    choice: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None}
    choice["finish_reason"] = extra.pop("finish", None)
    if ids is not None:
        choice["token_ids"] = ids
    return event({"id": rid, **HEAD, "choices": [choice], **extra})


def role(rid: str) -> bytes:
    return chunk(rid, {"role": "assistant", "content": ""}, None, prompt_token_ids=[1, 2])


def call(rid: str, call_id: str, args: list[str], finish: bool = False) -> bytes:
    head = {"id": call_id, "type": "function", "index": 0,
            "function": {"name": "search", "arguments": ""}}  # fmt: skip
    out = role(rid) + chunk(rid, {"tool_calls": [head]}, [10])
    for n, piece in enumerate(args):
        out += chunk(
            rid, {"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}, [11 + n]
        )
    if finish:
        out += chunk(rid, {}, [], finish="tool_calls") + b"data: [DONE]\n\n"
    return out


def client_view(raw: bytes) -> tuple[str, str, list[dict[str, Any]]]:
    """The reasoning, the content and the tool-call deltas a client reads."""
    reasoning = content = ""
    calls: list[dict[str, Any]] = []
    for part in raw.split(b"\n\n"):
        if part.startswith(b"data: {"):
            for choice in json.loads(part[6:]).get("choices", []):
                delta = choice.get("delta", {})
                reasoning += delta.get("reasoning", "")
                content += delta.get("content", "")
                calls += delta.get("tool_calls", [])
    return reasoning, content, calls


def test_a_replayed_tool_call_keeps_the_id_the_client_has_and_goes_on_from_its_arguments() -> None:
    body = {"messages": [], "tools": [{"type": "function"}], "temperature": 0}
    tape = Tape(CHAT, body)
    first = tape.feed(call("a", "call-A", ['{"q', '": "pa']))
    carry = tape.carry()
    assert carry.how == "replay" and "tools" in carry.reason
    made = tape.continuation(carry)
    assert made is not None and made.route == CHAT and made.body["tools"] == body["tools"]
    # vLLM draws a new call id for the replay; the client keeps its own
    second = tape.feed(call("b", "call-B", ['{"q', '": "pa', 'ris"}'], finish=True))
    _, _, calls = client_view(first + second)
    assert [c.get("id") for c in calls if "id" in c] == ["call-A"]
    assert "".join(c["function"].get("arguments", "") for c in calls) == '{"q": "paris"}'
    assert b"call-B" not in second and tape.done
    assert b'"id":"a"' in second and b'"id":"b"' not in second  # the first leg's id


def test_a_replay_that_differs_from_what_was_sent_ends_the_stream() -> None:
    tape = Tape(CHAT, {"messages": [], "temperature": 0, "chat_template_kwargs": {}})
    tape.feed(role("a") + chunk("a", {"reasoning": " Let me"}, [5]))
    made = tape.continuation(tape.carry())
    assert made is not None
    out = tape.feed(role("b") + chunk("b", {"reasoning": " Let us"}, [5]))
    assert out == b"" and tape.failed
    carry = tape.carry()
    assert carry.how == "refused" and "differ" in carry.reason


def test_a_replay_that_ends_short_of_what_was_sent_ends_the_stream() -> None:
    tape = Tape(CHAT, {"messages": [], "temperature": 0})
    tape.feed(role("a") + chunk("a", {"reasoning": " Let me think"}, [5, 6, 7]))
    assert tape.continuation(tape.carry()) is not None
    tape.feed(role("b") + chunk("b", {"reasoning": " Let me"}, [5, 6], finish="stop"))
    assert tape.failed and "ended before" in tape.carry().reason


def test_a_new_leg_that_says_done_without_a_finish_ends_the_stream() -> None:
    tape = Tape(CHAT, {"messages": [], "temperature": 0})
    tape.feed(role("a") + chunk("a", {"content": " hi"}, [5]))
    assert tape.continuation(tape.carry()) is not None
    out = tape.feed(role("b") + chunk("b", {"content": " hi"}, [5]) + b"data: [DONE]\n\n")
    assert out == b"" and not tape.done and "without a finish_reason" in tape.carry().reason


def test_nothing_follows_a_finish_the_stream_is_ended_with_the_usage_asked_for() -> None:
    body = {"messages": [], "stream_options": {"include_usage": True}}
    tape = Tape(CHAT, body)
    tape.feed(role("a") + chunk("a", {"content": " hi"}, [5]))
    tape.feed(chunk("a", {"content": "."}, [6], finish="stop"))
    assert tape.carry().how == "finished"
    end = tape.completion().split(b"\n\n")
    assert json.loads(end[0][6:])["usage"] == {
        "prompt_tokens": 2, "total_tokens": 4, "completion_tokens": 2,
    }  # fmt: skip
    assert end[1] == b"data: [DONE]"
    assert Tape(CHAT, {}).completion() == b"data: [DONE]\n\n"  # no usage asked: none made


def test_an_event_with_nothing_but_the_ids_the_proxy_asked_for_is_not_relayed() -> None:
    """vLLM sends it only for return_token_ids: a parser swallowed the token's text."""
    tape = Tape(CHAT, {"messages": []})
    out = tape.feed(role("a") + chunk("a", {}, [9]) + chunk("a", {"content": "x"}, [10]))
    assert out.count(b"data: ") == 2 and tape.swallowed and tape.sent.ids == [9, 10]
    assert "parser" in tape.carry().reason


def test_the_hold_back_of_stop_strings_moves_the_cut_back() -> None:
    """With stop "xyz" vLLM holds back two characters: after " ab" (1 token) and "cd" (1
    token) it sent " " then "ab"; the text is whole at 1 token / 3 characters, which the
    client lacks, so the cut is at 0 tokens until it has them."""
    tape = Tape("/v1/completions", {"stop": "xyz", "max_tokens": 9, "temperature": 0.5})
    head = {"id": "a", "object": "text_completion", "created": 1, "model": "m"}
    first = {"index": 0, "text": " ", "token_ids": [5], "prompt_token_ids": [1]}
    tape.feed(event({**head, "choices": [first]}))
    assert tape._cut() == (0, 0)
    tape.feed(event({**head, "choices": [{"index": 0, "text": "ab", "token_ids": [6]}]}))
    assert tape.sent.text == " ab" and tape._cut() == (1, 3)
    made = tape.continuation(tape.carry())
    assert made is not None and json.loads(made.prompt or b"") == [1, 5]
    assert made.body["max_tokens"] == 8


def test_the_rules() -> None:
    assert prefix_blockers(CHAT, {"messages": [], "temperature": 0, "stop": "x"}) == []
    assert prefix_blockers(CHAT, {"response_format": {"type": "text"}, "tools": []}) == []
    assert prefix_blockers(CHAT, {"tools": [{}], "tool_choice": "none"}) == []
    assert prefix_blockers(CHAT, {"tools": [{}]}) == ["tools"]
    assert prefix_blockers(CHAT, {"frequency_penalty": 0.1, "vllm_xargs": {}}) == [
        "frequency_penalty", "vllm_xargs",
    ]  # fmt: skip
    assert prefix_blockers("/v1/completions", {"logprobs": 0}) == ["logprobs"]
    assert reproducible({"temperature": 0}) and reproducible({"seed": 3})
    assert not reproducible({}) and not reproducible({"temperature": 0.7, "seed": True})
    assert stop_lag({"stop": ["ab", "abcd"]}) == 3
    assert stop_lag({"stop": "abcd", "include_stop_str_in_output": True}) == 0
    assert token_limit("/v1/completions", {"max_tokens": None}, 5, None) == 16
    assert token_limit(CHAT, {}, 5, 100) == 95 and token_limit(CHAT, {}, 5, None) is None
    assert token_limit(CHAT, {"max_tokens": 9, "max_completion_tokens": 7}, 5, 100) == 7


@settings(max_examples=60, deadline=None)
@given(st.lists(st.binary(max_size=64), max_size=40))
def test_hostile_events_never_crash_the_tape(parts: list[bytes]) -> None:
    tape = Tape(CHAT, {"messages": [], "temperature": 0}, max_event_bytes=256)
    for part in parts:
        tape.feed(part + b"\n\n" if len(part) % 3 else part)
    carry = tape.carry()
    assert carry.how in ("prefix", "replay", "refused", "finished")
    if carry.how in ("prefix", "replay"):
        tape.continuation(carry)
