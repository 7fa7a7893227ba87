"""Exact-length prompts against a real /tokenize on loopback."""

from __future__ import annotations

import asyncio

import pytest

from servekit.bench.prompts import PromptBuilder, filler
from servekit.client import OpenAIClient
from servekit.errors import UsageError

from .conftest import Engine, count_tokens


def test_prompts_have_exact_length_and_unique_prefixes(engine: Engine) -> None:
    async def go() -> list[str]:
        async with OpenAIClient(engine.url) as client:
            builder = PromptBuilder(client)
            return [
                *await builder.build_many(37, 5),
                await builder.build(1024),
                await builder.build(122),
            ]

    prompts = asyncio.run(go())
    assert [count_tokens(p) for p in prompts] == [37] * 5 + [1024, 122]
    prefixes = [p.split()[0] for p in prompts]
    assert prefixes == [f"[req-{i:05d}]" for i in range(7)]


def test_unreachable_length_is_a_usage_error(engine: Engine) -> None:
    async def go() -> None:
        async with OpenAIClient(engine.url) as client:
            await PromptBuilder(client).build(1)  # the prefix alone is 5 tokens here

    with pytest.raises(UsageError, match="prompt length 1"):
        asyncio.run(go())


def test_filler_is_deterministic() -> None:
    assert filler(3) == "the of and" and filler(0) == ""


def test_a_tag_keeps_builders_apart(engine: Engine) -> None:
    async def go() -> list[str]:
        async with OpenAIClient(engine.url) as client:
            return await PromptBuilder(client, tag="ab12").build_many(20, 2)

    prompts = asyncio.run(go())
    assert [count_tokens(p) for p in prompts] == [20, 20]
    assert [p.split()[0] for p in prompts] == ["[req-ab12-00000]", "[req-ab12-00001]"]
