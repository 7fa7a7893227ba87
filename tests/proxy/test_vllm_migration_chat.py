"""Chat answers carried on across a decoder cut mid-answer, on real vLLM CPU engines.

local/1p1d (NixlConnector, the tiny model, whose generation config sets
``max_new_tokens: 64``: vLLM's limit for a chat request that sets none). The
proxy routes decodes to two loopback fronts of the one decoder; the first answer
that carries enough events is reset there (tests/helpers/cutfront.py), as a
decoder dying would cut it, and the proxy carries it on through the other front.
Each answer must come back whole and equal to the same request's uncut answer
through the same proxy, field for field (tests/helpers/answers.py: how vLLM groups
tokens into events is not stable even between two uncut runs here: a token that
ends inside a character came alone in one run and with the next in the other):

- a greedy chat without ``max_tokens`` (the proxy replays it: the engine's own
  default ends it at 64 tokens, where /v1/completions' default would have cut it at
  16, and what fits in the model would have run past 64);
- a greedy chat under a JSON schema (structured output: replayed, the grammar
  state being the engine's);
- a greedy chat with ``max_tokens`` (a token-id continuation on /v1/completions,
  in chat's shape).
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import aiohttp
import pytest
from tests.helpers.answers import answer_of
from tests.helpers.cutfront import Cutter, cut_fronts
from tests.helpers.engines import SharedRuns

from servekit.proxy.config import ProxyConfig
from servekit.proxy.server import start_proxy
from servekit.proxy.tape import Tape

pytestmark = [pytest.mark.vllm, pytest.mark.slow]
LAYOUT = "local/1p1d"
TIMEOUT_S = 180
CREATED = re.compile(rb'"created":\d+')
SCHEMA = {"type": "json_schema", "json_schema": {"name": "item", "schema": {
    "type": "object", "properties": {"name": {"type": "string"}, "tags": {
        "type": "array", "items": {"type": "string"}, "minItems": 3}},
    "required": ["name", "tags"]}}}  # fmt: skip
CHATS: dict[str, tuple[dict[str, Any], str]] = {
    "no-max-tokens": ({}, "/v1/chat/completions"),
    "json-schema": ({"response_format": SCHEMA, "max_tokens": 80}, "/v1/chat/completions"),
    "max-tokens": ({"max_tokens": 48, "ignore_eos": True}, "/v1/completions"),
}


def _body(name: str) -> dict[str, Any]:
    text = f"The river runs north through the valley. Describe the mill ({name})."
    return {"model": "tiny-llama", "messages": [{"role": "user", "content": text}],
            "temperature": 0, "stream": True, **CHATS[name][0]}  # fmt: skip


def _migrations(raw: bytes) -> dict[str, float]:
    out = {}
    for line in raw.decode().splitlines():
        if line.startswith("servekit_proxy_migrations_total{"):
            out[line.split('"')[1]] = float(line.split()[-1])
    return out


def _cut_run(
    shared_vllm: SharedRuns, name: str
) -> tuple[bytes, bytes, dict[str, float], list[str], int]:
    """The answer uncut and cut mid-answer through one proxy; its migrations, the paths
    the decoder was asked, and how many cuts were made."""
    shared_vllm.up(LAYOUT)
    dep = json.loads((shared_vllm.run_dir(LAYOUT) / "deployment.json").read_text())
    urls = {e["role"]: e["url"] for e in dep["endpoints"]}
    cutter = Cutter(events=12)

    async def go() -> tuple[bytes, bytes, dict[str, float], list[str]]:
        with cut_fronts(int(urls["decode"].rsplit(":", 1)[1]), cutter) as fronts:
            config = ProxyConfig(
                prefill=(urls["prefill"],), decode=tuple(f.url for f in fronts), port=0,
                migration_limit=3, health_interval_s=0.5, outlier_after=1000,
            )  # fmt: skip
            proxy = await start_proxy(config)
            timeout = aiohttp.ClientTimeout(total=TIMEOUT_S)
            try:
                async with aiohttp.ClientSession(timeout=timeout) as c:
                    while not all(i.routable for i in proxy.router.instances()):
                        await asyncio.sleep(0.1)

                    async def ask() -> bytes:
                        async with c.post(proxy.url + "/v1/chat/completions", json=_body(name),
                                          headers={"X-Request-Id": name}) as r:  # fmt: skip
                            assert r.status == 200
                            return CREATED.sub(b'"created":0', await r.read())

                    whole = await ask()
                    cutter.armed = True
                    cut = await ask()
                    async with c.get(proxy.url + "/metrics") as r:
                        counted = _migrations(await r.read())
            finally:
                await proxy.stop()
            return whole, cut, counted, cutter.posts

    return (*asyncio.run(go()), cutter.cuts)


@pytest.mark.parametrize("name", sorted(CHATS))
def test_a_chat_cut_mid_answer_comes_back_whole_and_equal(
    shared_vllm: SharedRuns, name: str
) -> None:
    whole, cut, counted, posts, cuts = _cut_run(shared_vllm, name)
    assert cuts == 1, "the answer was never cut: nothing was proven"
    assert counted.get("ok") == 1 and not counted.get("refused")
    assert answer_of(cut) == answer_of(whole), name
    assert cut.endswith(b"data: [DONE]\n\n") and b'"error"' not in cut
    assert posts[-1] == CHATS[name][1]  # how the answer was carried on: replay or prefix
    text = "".join(
        json.loads(e[6:])["choices"][0]["delta"].get("content", "")
        for e in whole.split(b"\n\n") if e.startswith(b"data: {") and b'"choices":[{' in e
    )  # fmt: skip
    assert len(text) > 40, "too short an answer to cut mid-way"
    if name == "json-schema":
        assert text.lstrip().startswith("{")


@pytest.mark.parametrize("name", ["no-max-tokens", "json-schema"])
def test_the_control_issue_43s_continuation_changes_these_answers(
    shared_vllm: SharedRuns, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The proxy before: every stream continued on /v1/completions from its ids, chat
    without max_tokens given its default 16, the JSON schema not carried."""
    monkeypatch.setattr(Tape, "_prefix_blockers", lambda self, model_len: [])
    # the continuation carried no max_tokens: /v1/completions' default 16 from the cut on
    monkeypatch.setattr(
        Tape, "_limit", lambda self, model_len: self.body.get("max_tokens", self._cut()[0] + 16)
    )
    monkeypatch.setattr("servekit.proxy.tape.CARRIED", ("model", "temperature"))
    for _ in range(3):  # the precondition: the cut landed where the old proxy continued
        whole, cut, counted, posts, cuts = _cut_run(shared_vllm, name)
        if cuts == 1 and posts[-1] == "/v1/completions":
            break
    assert cuts == 1 and posts[-1] == "/v1/completions", (counted, posts, cut[-600:])
    assert answer_of(cut) != answer_of(whole)
