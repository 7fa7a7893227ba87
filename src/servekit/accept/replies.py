"""Reading OpenAI-compatible replies: text, finish reason, usage, SSE streams.

Parsers are total: a malformed reply yields None or a list of problems, never an
exception, because a malformed reply is itself a finding to report.
"""

from __future__ import annotations

import json
from typing import Any

from servekit.accept.wire import Exchange
from servekit.vocabulary import StrictModel


def _first_choice(doc: Any) -> dict[str, Any] | None:
    if not isinstance(doc, dict):
        return None
    choices = doc.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return None
    return choices[0]


def _choice_text(choice: dict[str, Any]) -> str | None:
    message = choice.get("message")
    if isinstance(message, dict):
        content = message.get("content")
        return content if isinstance(content, str) else None
    delta = choice.get("delta")
    if isinstance(delta, dict):
        content = delta.get("content")
        return content if isinstance(content, str) else ""
    text = choice.get("text")
    return text if isinstance(text, str) else None


def answer_text(exchange: Exchange) -> str | None:
    """The generated text of a non-streamed chat or completions reply."""
    choice = _first_choice(exchange.json_body()) if exchange.ok else None
    return None if choice is None else _choice_text(choice)


def finish_reason(exchange: Exchange) -> str | None:
    choice = _first_choice(exchange.json_body()) if exchange.ok else None
    reason = None if choice is None else choice.get("finish_reason")
    return reason if isinstance(reason, str) else None


def usage(exchange: Exchange) -> dict[str, Any]:
    doc = exchange.json_body()
    found = doc.get("usage") if isinstance(doc, dict) else None
    return found if isinstance(found, dict) else {}


def cached_tokens(doc_usage: dict[str, Any]) -> int | None:
    """``usage.prompt_tokens_details.cached_tokens`` when the engine reports it."""
    details = doc_usage.get("prompt_tokens_details")
    if isinstance(details, dict) and isinstance(details.get("cached_tokens"), int):
        return int(details["cached_tokens"])
    return None


class StreamReading(StrictModel):
    """What a stream said, and what was wrong with its framing."""

    text: str
    finish_reason: str | None
    done: bool
    chunks: int
    problems: tuple[str, ...]
    usage: dict[str, Any] | None = None


def read_stream(exchange: Exchange) -> StreamReading:
    """Join a stream's deltas and list framing problems (bad JSON, error events, data after [DONE])."""
    text: list[str] = []
    problems: list[str] = []
    finish: str | None = None
    done = False
    chunks = 0
    last_usage: dict[str, Any] | None = None
    for i, frame in enumerate(exchange.frames):
        if done:
            problems.append(f"frame {i} after [DONE]")
            continue
        if frame == "[DONE]":
            done = True
            continue
        try:
            doc = json.loads(frame)
        except ValueError:
            problems.append(f"frame {i} is not JSON: {frame[:40]!r}")
            continue
        if isinstance(doc, dict) and "error" in doc:
            problems.append(f"frame {i} is an error event: {frame[:120]}")
            continue
        chunks += 1
        if isinstance(doc, dict) and isinstance(doc.get("usage"), dict):
            last_usage = doc["usage"]
        choice = _first_choice(doc)
        if choice is None:
            continue
        text.append(_choice_text(choice) or "")
        reason = choice.get("finish_reason")
        if isinstance(reason, str):
            finish = reason
    if not done:
        problems.append("stream did not end with data: [DONE]")
    if chunks == 0:
        problems.append("stream carried no JSON chunk")
    return StreamReading(
        text="".join(text),
        finish_reason=finish,
        done=done,
        chunks=chunks,
        problems=tuple(problems),
        usage=last_usage,
    )
