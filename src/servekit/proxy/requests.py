"""What the proxy reads from a request body, cheaply.

Scheduling needs a prompt size in tokens and a prefix key; an exact count would
need the tokenizer, so the size is estimated from characters (about four per
token for text, one per id for token-id prompts). The body is never rewritten
here: :mod:`servekit.proxy.payloads` builds the stage payloads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from servekit.proxy.failures import ProxyError

CHARS_PER_TOKEN = 4
MAX_NESTING = 64  # chat content is a handful of levels deep (messages, parts, text)


@dataclass(frozen=True)
class Ticket:
    """The parsed client request: body, route and the scheduler's view of it."""

    route: str
    body: dict[str, Any]
    raw: bytes
    prompt_tokens: int
    prefix_key: bytes
    stream: bool
    prompts: int = 1  # prompts batched in one completions request


def _text_of(value: Any, field: str) -> str:
    """Flatten prompt-like content (strings, lists of parts) into text.

    Walked with a stack, not recursion, and at most :data:`MAX_NESTING` deep: about
    900 nested lists in a chat ``content`` ran Python's recursion out, a 500 with
    100 KB of traceback in the log per request; now it is a 400 naming the field.
    """
    parts: list[str] = []
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            parts.append(item)
            continue
        if not isinstance(item, list | dict):
            continue
        if depth >= MAX_NESTING:
            msg = f"{field}: nested more than {MAX_NESTING} levels deep"
            raise ProxyError("bad_request", "proxy", msg)
        if isinstance(item, dict):
            stack.append((item.get("content", item.get("text", "")), depth + 1))
        else:
            stack.extend((v, depth + 1) for v in reversed(item))
    return "".join(parts)


def _token_ids(prompt: Any) -> int | None:
    """Length of a token-id prompt (a list of ints or a list of such lists)."""
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        return len(prompt)
    if isinstance(prompt, list) and prompt and all(isinstance(p, list) for p in prompt):
        return sum(len(p) for p in prompt)
    return None


def prompt_count(body: dict[str, Any]) -> int:
    """How many prompts a completions body batches (a list of ids is one prompt)."""
    prompt = body.get("prompt")
    if not isinstance(prompt, list) or not prompt or _token_ids(prompt) == len(prompt):
        return 1
    return len(prompt)


def prompt_of(body: dict[str, Any]) -> str:
    """The prompt text of a completions, chat or responses body."""
    if "messages" in body:
        return _text_of(body["messages"], "messages")
    if "prompt" in body:
        return _text_of(body["prompt"], "prompt")
    return _text_of(body.get("input", ""), "input") + _text_of(
        body.get("instructions", ""), "instructions"
    )


def make_ticket(route: str, body: dict[str, Any], prefix_chars: int, raw: bytes = b"") -> Ticket:
    """Estimate the prompt's tokens and key its prefix; ``raw`` is the body as sent."""
    ids = _token_ids(body.get("prompt"))
    text = "" if ids is not None else prompt_of(body)
    tokens = ids if ids is not None else len(text) // CHARS_PER_TOKEN + 1
    key = text[:prefix_chars].encode("utf-8", "surrogatepass") if ids is None else b""
    if ids is not None:
        key = repr(body.get("prompt"))[:prefix_chars].encode()
    stream = body.get("stream") is True
    return Ticket(route, body, raw, tokens, key, stream, prompt_count(body))
