"""What a client reads of an SSE answer, whatever events it came in."""

from __future__ import annotations

import json
from typing import Any


def answer_of(raw: bytes) -> dict[str, Any]:
    """What a client reads of a stream, whatever events it came in: each field's pieces
    joined in order (text, content, reasoning, a tool call's id, name and arguments by
    its index, token ids, logprob entries), the last finish and stop reasons, usage,
    an error, and whether ``[DONE]`` came."""
    out: dict[str, Any] = {"done": False}
    for event in raw.split(b"\n\n"):
        part = event.strip()
        if part == b"data: [DONE]":
            out["done"] = True
        elif part.startswith(b"data: {"):
            doc = json.loads(part[6:])
            out.update((k, doc[k]) for k in ("id", "object", "model", "usage", "error") if k in doc)
            for choice in doc.get("choices") or ():
                _choice(out, choice)
    return out


def _choice(out: dict[str, Any], choice: dict[str, Any]) -> None:
    delta = choice.get("delta") or {}
    pieces = (("text", choice.get("text")), ("content", delta.get("content")),
              ("reasoning", delta.get("reasoning")))  # fmt: skip
    for key, value in pieces:
        if isinstance(value, str):
            out[key] = out.get(key, "") + value
    for call in delta.get("tool_calls") or ():
        got = out.setdefault("calls", {}).setdefault(call["index"], {"arguments": ""})
        fn = call.get("function") or {}
        got.update({k: v for k, v in (("id", call.get("id")), ("name", fn.get("name"))) if v})
        got["arguments"] += fn.get("arguments") or ""
    out["token_ids"] = out.get("token_ids", []) + (choice.get("token_ids") or [])
    for key, value in (choice.get("logprobs") or {}).items():  # chat: content; completions: 4
        if isinstance(value, list):
            out.setdefault("logprobs", {}).setdefault(key, []).extend(value)
    for key in ("finish_reason", "stop_reason"):
        if choice.get(key) is not None:
            out[key] = choice[key]
