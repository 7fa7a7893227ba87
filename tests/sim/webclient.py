"""Tiny synchronous HTTP helpers for the simulator tests (stdlib only, loopback)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any


def request(
    method: str, url: str, doc: Any = None, timeout: float = 30.0, raw: bytes | None = None
) -> tuple[int, bytes]:
    """Status and body; HTTP errors are answers, not exceptions."""
    data = raw if raw is not None else (None if doc is None else json.dumps(doc).encode())
    req = urllib.request.Request(url, data=data, method=method)
    req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except urllib.error.URLError as exc:  # timeouts and resets while sending, unwrapped
        if isinstance(exc.reason, OSError):
            raise exc.reason from exc
        raise


def post(url: str, doc: Any, timeout: float = 30.0) -> tuple[int, Any]:
    status, body = request("POST", url, doc, timeout)
    return status, json.loads(body) if body else None


def get(url: str, timeout: float = 30.0) -> tuple[int, bytes]:
    return request("GET", url, None, timeout)


def sse_events(body: bytes) -> list[Any]:
    """The JSON events of an SSE body, ``"[DONE]"`` kept as a string."""
    out: list[Any] = []
    for block in body.decode().split("\n\n"):
        if not block.startswith("data: "):
            continue
        payload = block[len("data: ") :]
        out.append(payload if payload == "[DONE]" else json.loads(payload))
    return out


def stream_text(events: list[Any], chat: bool) -> str:
    parts = []
    for ev in events:
        if ev == "[DONE]" or not ev.get("choices"):
            continue
        choice = ev["choices"][0]
        parts.append(choice["delta"].get("content", "") if chat else choice["text"])
    return "".join(parts)


def metric(text: bytes, name: str, **labels: str) -> float:
    """Sum of the samples of ``name`` whose labels include ``labels``."""
    total = 0.0
    found = False
    for line in text.decode().splitlines():
        if line.startswith("#") or not line.startswith(name):
            continue
        head, value = line.rsplit(" ", 1)
        metric_name = head.split("{", 1)[0]
        if metric_name != name:
            continue
        if all(f'{k}="{v}"' in head for k, v in labels.items()):
            total += float(value)
            found = True
    if not found:
        raise KeyError(name)
    return total
