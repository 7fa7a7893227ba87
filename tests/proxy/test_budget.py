"""One memory budget for the whole proxy, and a per-request cap on the parse (issue 36, item 5).

Every body a request holds (its own, its engines' answers, their parses) is
charged to one ``--memory-budget``; past it a request is a 503 ``overloaded``,
and a request gives its share back when it ends. A body whose estimated parse
passes ``--max-parse-bytes`` is a 413 before it is parsed (small values weigh
up to 25x their text once parsed).
"""

from __future__ import annotations

import asyncio
import json

from hypothesis import given, settings, strategies as st

from servekit.proxy.budget import parse_cost

from .harness import run, stack, wait_until

SMALL = {"model": "sim-model", "prompt": "hi", "max_tokens": 2}


@settings(max_examples=60, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
        lambda kids: st.lists(kids) | st.dictionaries(st.text(), kids),
        max_leaves=200,
    )
)
def test_parse_cost_is_at_least_what_json_loads_allocates(value: object) -> None:
    import tracemalloc

    raw = json.dumps(value, separators=(",", ":")).encode()
    tracemalloc.start()
    try:
        json.loads(raw)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert parse_cost(raw) + 4096 >= peak  # a page of slack for tiny bodies


def test_a_body_of_many_small_values_is_413_before_it_is_parsed() -> None:
    async def scenario() -> None:
        async with stack(prefill=0, decode=0, replica=1, max_parse_bytes=8 << 20) as s:
            many = [{"role": "user", "content": "x"}] * 60_000  # 2 MiB of text, ~25 MiB parsed
            status, raw = await s.post("/v1/chat/completions", {**SMALL, "messages": many})
            assert status == 413, raw
            assert b"--max-parse-bytes" in raw
            assert s.replica[0].gen() == []
            assert (await s.post("/v1/completions", SMALL))[0] == 200
            assert s.proxy.router.budget.used == 0

    run(scenario())


def test_requests_past_the_memory_budget_get_503_and_shares_come_back() -> None:
    async def scenario() -> None:
        async with stack(prefill=0, decode=0, replica=1, memory_budget=1536 << 10) as s:
            budget = s.proxy.router.budget
            big = {**SMALL, "prompt": "x" * 400_000}  # ~800 KB charged while it runs
            s.replica[0].fault(hang=True)
            first = asyncio.create_task(s.post("/v1/completions", big))
            await wait_until(lambda: budget.used >= 800_000, "the first request holds its share")
            status, raw = await s.post("/v1/completions", big)
            assert status == 503 and json.loads(raw)["error"]["code"] == "overloaded", raw
            s.replica[0].fault(hang=False)
            assert (await first)[0] == 200
            await wait_until(lambda: budget.used == 0, "every share given back")
            assert (await s.post("/v1/completions", big))[0] == 200
            assert budget.used == 0 and budget.refused == 1
            metrics = (await s.get("/metrics"))[1].decode()
            assert "servekit_proxy_memory_budget_refused 1.0" in metrics

    run(scenario())
