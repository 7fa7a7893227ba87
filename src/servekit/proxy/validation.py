"""Strict checks of a generation request before anything reaches an engine.

In PD mode the prefill copy asks for one token unstreamed, so a request that
only decode would refuse (``max_tokens: -1``, ``"stream": "false"``, stream
options without a stream) passed prefill and pinned its KV on the prefill
instance until the connector's timeout, then failed at decode. Every field
below is checked for the JSON type and range vLLM 0.32 (and the OpenAI API)
accept, and a bad one is a 400 at the proxy naming the field. JSON types are
taken strictly: a string is never a boolean or a number (the proxy read
``"false"`` as true, the engine as false). ``null`` is left to the engine, and
fields not listed here pass through untouched.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from servekit.proxy.failures import ProxyError

Check = Callable[[Any], str | None]  # an error text, or None when the value is fine
INT64 = 2**63


def _integer(low: int | None = None, high: int | None = None) -> Check:
    def check(v: Any) -> str | None:
        if isinstance(v, bool) or not (
            isinstance(v, int) or (isinstance(v, float) and v.is_integer())
        ):
            return f"expected an integer, got {v!r}"
        if low is not None and v < low:
            return f"must be at least {low}, got {v!r}"
        if high is not None and v > high:
            return f"must be at most {high}, got {v!r}"
        return None

    return check


def _number(low: float, high: float, *, open_low: bool = False) -> Check:
    def check(v: Any) -> str | None:
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            return f"expected a finite number, got {v!r}"
        if v < low or (open_low and v == low) or v > high:
            return f"must be in {'(' if open_low else '['}{low}, {high}], got {v!r}"
        return None

    return check


def _of(kind: type | tuple[type, ...], what: str) -> Check:
    def check(v: Any) -> str | None:
        bad = not isinstance(v, kind) or (kind is int and isinstance(v, bool))
        return f"expected {what}, got {v!r}" if bad else None

    return check


def _stop(v: Any) -> str | None:
    ok = isinstance(v, str) or (isinstance(v, list) and all(isinstance(s, str) for s in v))
    return None if ok else f"expected a string or a list of strings, got {v!r}"


def _prompt(v: Any) -> str | None:
    """A string, a list of strings, a list of token ids or a list of such lists."""
    if isinstance(v, str):
        return None
    if isinstance(v, list) and v and all(isinstance(p, str) for p in v):
        return None
    ids = _of(int, "a token id")
    if isinstance(v, list) and all(ids(t) is None for t in v):
        return None
    if isinstance(v, list) and all(
        isinstance(p, list) and all(ids(t) is None for t in p) for p in v
    ):
        return None
    return f"expected a string, strings or token ids, got {type(v).__name__}"


def _messages(v: Any) -> str | None:
    if isinstance(v, list) and all(isinstance(m, dict) for m in v):
        return None
    return "expected a list of message objects"


BOOL = _of(bool, "true or false")
OBJECT = _of(dict, "a JSON object")
TEXT = _of(str, "a string")

COMMON: dict[str, Check] = {
    "model": TEXT, "user": TEXT, "stream": BOOL, "stream_options": OBJECT,
    "kv_transfer_params": OBJECT, "n": _integer(1), "max_tokens": _integer(1),
    "min_tokens": _integer(0), "seed": _integer(-INT64, INT64 - 1),
    "temperature": _number(0.0, 2.0), "top_p": _number(0.0, 1.0, open_low=True),
    "top_k": _integer(-1), "min_p": _number(0.0, 1.0),
    "presence_penalty": _number(-2.0, 2.0), "frequency_penalty": _number(-2.0, 2.0),
    "repetition_penalty": _number(0.0, math.inf, open_low=True), "stop": _stop,
    "ignore_eos": BOOL, "prompt_logprobs": _integer(-1),
}  # fmt: skip
BY_ROUTE: dict[str, dict[str, Check]] = {
    "/v1/completions": {"prompt": _prompt, "logprobs": _integer(-1), "echo": BOOL},
    "/v1/chat/completions": {
        "messages": _messages,
        "logprobs": BOOL,
        "top_logprobs": _integer(-1),
        "max_completion_tokens": _integer(1),
    },
    "/v1/responses": {"max_output_tokens": _integer(1)},
}


def _bad(message: str) -> ProxyError:
    return ProxyError("bad_request", "proxy", message)


def _cross_checks(route: str, body: dict[str, Any]) -> None:
    """Rules between fields that the engine applies only where the proxy's copy differs."""
    if body.get("stream_options") and not body.get("stream"):
        raise _bad("stream_options: only allowed with stream: true")
    if body.get("stream") and body.get("prompt_logprobs") not in (None, 0):
        raise _bad("prompt_logprobs: not available with stream: true")
    top = body.get("top_logprobs")
    if route.endswith("/chat/completions") and top not in (None, 0) and not body.get("logprobs"):
        raise _bad("top_logprobs: needs logprobs: true")
    limit = body.get("max_completion_tokens") or body.get("max_tokens")
    low = body.get("min_tokens")
    if limit is not None and low is not None and low > limit:
        raise _bad(f"min_tokens: must be at most the token limit {limit}, got {low}")


def check_request(route: str, body: dict[str, Any]) -> None:
    """Raise a 400 :class:`ProxyError` naming the first field the engine would refuse."""
    rules = BY_ROUTE.get(route, {})
    for name, value in body.items():
        check = rules.get(name) or COMMON.get(name)
        if check is None or value is None:
            continue
        problem = check(value)
        if problem is not None:
            raise _bad(f"{name}: {problem}")
    _cross_checks(route, body)
