"""A rendered PD layout's proxy routes by the KV events its engines publish, live.

``servekit up local/1p1d --engine sim``: the simulated prefill and decode publish on
the Plan's ports, the proxy (the Plan's own argv) subscribes to both, and its
/metrics shows every feed ``live`` and prefill choices scored from the events.
The control: the same layout with ``kv_events: false`` starts a proxy with no
feed at all.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import time
from pathlib import Path

import aiohttp
import pytest
import yaml
from tests.helpers.cli import runs_env, servekit_cli

from servekit.catalog.loader import packaged_catalog
from servekit.client import OpenAIClient
from servekit.deployment import Deployment

NAME = "local/1p1d"
PROMPT = "the quick brown fox jumps over the lazy dog " * 24  # several KV blocks


async def _metrics_after_requests(dep: Deployment, count: int = 3) -> str:
    """``count`` completions through the proxy, then its /metrics."""
    async with OpenAIClient(dep.entry_url, model=dep.model or "") as client:
        for _ in range(count):
            rec = await client.completion({"prompt": PROMPT, "max_tokens": 4})
            assert rec.status == 200, rec
    async with aiohttp.ClientSession() as session, session.get(dep.entry_url + "/metrics") as r:
        return await r.text()


def _metrics(
    dep: Deployment, wanted: list[str], timeout_s: float = 20.0, pattern: str | None = None
) -> str:
    """/metrics once every wanted line is in it and ``pattern`` matches (a subscription
    connects, and an engine's events arrive, in the background)."""
    deadline = time.monotonic() + timeout_s
    while True:
        text = asyncio.run(_metrics_after_requests(dep, 0))
        found = pattern is None or re.search(pattern, text)
        if (all(line in text for line in wanted) and found) or time.monotonic() > deadline:
            return text
        time.sleep(0.5)


def _up(tmp_path: Path, env: dict[str, str]) -> Deployment:
    up = servekit_cli(
        "up", NAME, "--engine", "sim", "--detach", "--free-ports",
        cwd=tmp_path, env=env, timeout=300,
    )  # fmt: skip
    assert up.returncode == 0, up.stdout + up.stderr
    run = tmp_path / "runs" / NAME.replace("/", "__")
    return Deployment.model_validate_json((run / "deployment.json").read_text())


def _counter(text: str, name: str, **labels: str) -> float:
    inside = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    found = re.search(rf"^{name}\{{{inside}\}} ([0-9.e+]+)$", text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


@pytest.mark.slow
def test_every_engine_feeds_the_proxy_live(tmp_path: Path) -> None:
    env = runs_env(tmp_path)
    dep = _up(tmp_path, env)
    try:
        engines = [e.url for e in dep.endpoints if e.role in ("prefill", "decode")]
        assert len(engines) == 2
        live = [f'servekit_proxy_kv_events_state{{engine="{u}",state="live"}} 1.0' for u in engines]
        text = _metrics(dep, live)
        for line in live:
            assert line in text, text
        asyncio.run(_metrics_after_requests(dep, 2))
        prefill = dep.by_role("prefill")[0].url
        held = re.escape(f'servekit_proxy_kv_index_blocks{{engine="{prefill}"}}') + r" [1-9]"
        # the prefill's BlockStored reaches the proxy after its answer (CI: read at once, 0.0)
        text = _metrics(dep, live, pattern=held)
        assert (
            _counter(text, "servekit_proxy_kv_choices_total", stage="prefill", score="precise") >= 2
        )
        assert re.search(held, text), text  # the prefill's own blocks
        assert _counter(text, "servekit_proxy_kv_matched_tokens_total", stage="prefill") > 0
    finally:
        down = servekit_cli("down", NAME, cwd=tmp_path, env=env)
    assert down.returncode == 0, down.stderr


@pytest.mark.slow
def test_with_kv_events_off_the_proxy_has_no_feed(tmp_path: Path) -> None:
    catalog = tmp_path / "catalog"
    shutil.copytree(packaged_catalog() / "local", catalog / "local")
    path = catalog / NAME / "layout.yaml"
    data = yaml.safe_load(path.read_text())
    for engine in data["engines"]:
        engine.setdefault("settings", {})["kv_events"] = False
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    env = {**runs_env(tmp_path), "SERVEKIT_CATALOG": str(catalog)}
    dep = _up(tmp_path, env)
    try:
        text = asyncio.run(_metrics_after_requests(dep))
        assert "servekit_proxy_" in text  # it is the proxy's /metrics
        assert "servekit_proxy_kv_events_state" not in text
        assert "servekit_proxy_kv_choices_total" not in text
    finally:
        down = servekit_cli("down", NAME, cwd=tmp_path, env=env)
    assert down.returncode == 0, down.stderr
