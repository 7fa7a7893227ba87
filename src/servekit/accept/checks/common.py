"""Small helpers shared by the check modules: prompts, greedy answers, engine metrics."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import Any

from servekit.accept.env import Probe, base_url
from servekit.accept.replies import answer_text
from servekit.accept.wire import Exchange
from servekit.deployment import Endpoint, split_relay
from servekit.vocabulary import CACHE_CONFIG_INFO

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
PREFIX_CACHING = re.compile(
    rf'^{re.escape(CACHE_CONFIG_INFO)}\{{[^}}]*enable_prefix_caching="(\w+)"', re.M
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
    return sum(_samples(text, names, ""), 0.0)


def metric_labelled(text: str, names: tuple[str, ...], label: str, value: str) -> float | None:
    """The sum of the samples of ``names`` whose ``label`` is ``value`` (None: no such sample)."""
    found = list(_samples(text, names, f'{label}="{value}"'))
    return sum(found, 0.0) if found else None


def _samples(text: str, names: tuple[str, ...], wanted: str) -> Iterator[float]:
    """The values of the samples of ``names`` whose labels hold ``wanted``."""
    for line in text.splitlines():
        match = METRIC_LINE.match(line)
        if match and match.group(1) in names and wanted in (match.group(2) or ""):
            try:
                yield float(match.group(3))
            except ValueError:
                continue


def first_diff(a: str, b: str) -> str:
    """Where two answers part, for a failure reason."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return f"differ at char {i}: {a[i : i + 20]!r} vs {b[i : i + 20]!r}"
    return f"lengths {len(a)} vs {len(b)}"


async def engine_metrics(probe: Probe, endpoints: Sequence[Endpoint]) -> list[str]:
    """The /metrics text of each endpoint that answered, as evidence of the check.

    Engines reached directly are asked one by one; behind a proxy whose
    engines are out of reach, the proxy's ``/metrics/engines`` is read once and
    split by its ``engine_url`` label.
    """
    pages: dict[str, dict[str, str] | str | None] = {}
    texts: list[str] = []
    for endpoint in endpoints:
        url, label = probe.env.deployment.metrics_source(endpoint)
        if url not in pages:
            ex = await probe.get(url if label else f"{base_url(endpoint.url)}/metrics")
            ok = ex.status == 200
            pages[url] = (split_relay(ex.body) if label else ex.body) if ok else None
        page = pages[url]
        text = page.get(label) if isinstance(page, dict) and label else page
        if isinstance(text, str):
            texts.append(text)
    return texts


def prefix_caching_off(texts: Sequence[str]) -> bool:
    """Whether the engines say prefix caching is off (``vllm:cache_config_info``).

    True only when at least one engine reports the setting and none reports it
    on: an engine that says nothing is not taken to have it off.
    """
    found = [m.group(1).lower() for text in texts for m in PREFIX_CACHING.finditer(text)]
    return bool(found) and all(value == "false" for value in found)


CACHING_OFF = (
    "no prefix-cache hit expected: the engines run with prefix caching off "
    "(vllm:cache_config_info enable_prefix_caching=False, as the layout sets it)"
)


def tokenize_count(doc: Any) -> int | None:
    """``count`` (or the length of ``tokens``) from a /tokenize reply."""
    if not isinstance(doc, dict):
        return None
    if isinstance(doc.get("count"), int):
        return int(doc["count"])
    tokens = doc.get("tokens")
    return len(tokens) if isinstance(tokens, list) else None
