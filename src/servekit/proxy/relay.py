"""GET /metrics/engines: every engine's /metrics, scraped through the proxy, labelled.

On a platform where only the proxy's node takes outside traffic, the engines'
own ports are out of reach; this endpoint scrapes every instance the proxy
knows (all roles, whatever their health) concurrently, each bounded by
``--engine-metrics-timeout``, and returns the samples in one Prometheus text
page with two labels added to every sample: ``engine_url`` (the instance's
URL, as given to the proxy) and ``engine_role`` (prefill, decode or replica).
vLLM's own ``engine`` label (the engine core index) is kept as it is.
``servekit_proxy_engine_scrape_ok{engine_url, engine_role}`` says which
scrapes worked (1) or failed (0, also for a page over ``--max-answer-bytes``);
the page is 200 either way.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import aiohttp
from aiohttp import web
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from servekit.proxy.bodies import read_answer
from servekit.proxy.failures import ProxyError
from servekit.proxy.instances import Instance
from servekit.proxy.router import Router

PATH = "/metrics/engines"
URL_LABEL = "engine_url"
ROLE_LABEL = "engine_role"


async def scrape(router: Router, inst: Instance) -> str | None:
    """One engine's /metrics text, or None when it could not be read in time."""
    timeout = aiohttp.ClientTimeout(total=router.config.engine_metrics_timeout_s)
    try:
        async with router.session.get(
            inst.url + "/metrics", timeout=timeout, headers=router.headers
        ) as resp:
            if resp.status != 200:
                return None
            raw = await read_answer(resp, router.config.max_answer_bytes, inst.name, inst.role)
            return raw.decode("utf-8", "replace")
    except (aiohttp.ClientError, TimeoutError, ProxyError):
        return None


class _Page:
    """Families merged across engines, each sample labelled with its engine."""

    def __init__(self) -> None:
        self.families: dict[str, Metric] = {}
        self.scrape_ok = GaugeMetricFamily(
            "servekit_proxy_engine_scrape_ok", "1 when the engine's /metrics was read",
            labels=[URL_LABEL, ROLE_LABEL],
        )  # fmt: skip

    def add(self, inst: Instance, text: str | None) -> None:
        ok = text is not None and self._parse(inst, text)
        self.scrape_ok.add_metric([inst.url, inst.role], 1.0 if ok else 0.0)

    def _parse(self, inst: Instance, text: str) -> bool:
        try:
            families = list(text_string_to_metric_families(text))
        except ValueError:
            return False
        extra = {URL_LABEL: inst.url, ROLE_LABEL: inst.role}
        for fam in families:
            merged = self.families.get(fam.name)
            if merged is None:
                merged = self.families[fam.name] = Metric(fam.name, fam.documentation, fam.type)
            merged.samples += [
                Sample(s.name, {**s.labels, **extra}, s.value, s.timestamp, s.exemplar)
                for s in fam.samples
            ]
        return True

    def collect(self) -> Iterator[Metric]:
        yield from self.families.values()
        yield self.scrape_ok


def merge(instances: list[Instance], texts: list[str | None]) -> bytes:
    """The merged page from the scraped texts (pure CPU: parse, label, render)."""
    page = _Page()
    for inst, text in zip(instances, texts, strict=True):
        page.add(inst, text)
    return generate_latest(page)


async def render(router: Router) -> bytes:
    """Scrape every instance at once, then merge off the event loop.

    Parsing and rendering 52 engines' pages takes about 0.3 s of pure Python;
    on the loop that would stall every stream the proxy is relaying for as
    long (and a benchmark sampling through the relay would measure its own
    stall as inter-token latency). In a worker thread the loop keeps its turn
    every switch interval (``benchmarks/metrics_loop_stall.py``).
    """
    instances = list(router.instances())
    texts = await asyncio.gather(*(scrape(router, i) for i in instances))
    return await asyncio.to_thread(merge, instances, list(texts))


def add_routes(app: web.Application, key: web.AppKey[Router]) -> None:
    async def engines(request: web.Request) -> web.Response:
        body = await render(request.app[key])
        return web.Response(body=body, headers={"Content-Type": "text/plain; version=0.0.4"})

    app.router.add_get(PATH, engines)
