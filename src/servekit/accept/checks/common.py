"""Small helpers shared by the check modules: prompts and greedy answers."""

from __future__ import annotations

import re
from typing import Any

from servekit.accept.env import Probe
from servekit.accept.replies import answer_text
from servekit.accept.wire import Exchange

# Short, plain prompts whose greedy continuations the invariants compare.
PROMPTS = (
    "The capital of France is",
    "Count from one to ten: one, two,",
    "A short poem about the sea:",
    "The three primary colours are",
    "def fibonacci(n):",
    "Water boils at a temperature of",
    "Once upon a time, in a small village,",
    "The quick brown fox",
)
METRIC_LINE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})?\s+([0-9.eE+-]+|NaN|[+-]Inf)\s*")


async def complete(
    probe: Probe, url: str, prompt: str, max_tokens: int = 24, **extra: Any
) -> Exchange:
    """A greedy /v1/completions request to ``url`` (a base URL)."""
    return await probe.post(
        f"{url}/v1/completions", probe.completion(prompt, max_tokens=max_tokens, **extra)
    )


def text_or_reason(exchange: Exchange) -> tuple[str | None, str]:
    """The answer text, or None and why there is none."""
    text = answer_text(exchange)
    if text is None:
        return None, exchange.describe()
    return text, ""


def metric_sum(text: str, names: tuple[str, ...]) -> float:
    """The sum of all samples of the metrics named ``names`` in a Prometheus text."""
    total = 0.0
    for line in text.splitlines():
        match = METRIC_LINE.match(line)
        if match and match.group(1) in names:
            try:
                total += float(match.group(3))
            except ValueError:
                continue
    return total


def first_diff(a: str, b: str) -> str:
    """Where two answers part, for a failure reason."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return f"differ at char {i}: {a[i : i + 20]!r} vs {b[i : i + 20]!r}"
    return f"lengths {len(a)} vs {len(b)}"


def tokenize_count(doc: Any) -> int | None:
    """``count`` (or the length of ``tokens``) from a /tokenize reply."""
    if not isinstance(doc, dict):
        return None
    if isinstance(doc.get("count"), int):
        return int(doc["count"])
    tokens = doc.get("tokens")
    return len(tokens) if isinstance(tokens, list) else None
