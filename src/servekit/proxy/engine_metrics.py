"""GET /metrics/engines: every engine's /metrics, scraped through the proxy, labelled.

On a platform where only the proxy's node takes outside traffic, the engines'
own ports are out of reach; this endpoint scrapes every instance the proxy
knows (all roles, whatever their health) concurrently, each bounded by
``--engine-metrics-timeout``, and returns the samples in one Prometheus text
page with two labels added to every sample: ``engine_url`` (the instance's
URL, as given to the proxy) and ``engine_role`` (prefill, decode or replica).
vLLM's own ``engine`` label (the engine core index) is kept as it is.
``servekit_proxy_engine_scrape_ok{engine_url, engine_role}`` says which
scrapes worked (1) or failed (0, also for a page over
``--max-engine-metrics-bytes``); the page is 200 either way.

The endpoint needs no key (Prometheus scrapes it), so what one GET can cost is
bounded, not what GETs may come (issue 45: 40 concurrent GETs over 4 engines
made ``/health`` wait 1.1-2.7 s, each scraping every engine and parsing in a
thread of its own; 2 GETs over one 10 MB page grew the proxy by 317-405 MB):

- one page is made at a time (:class:`PageMaker`): a GET that arrives while one
  is being made waits for the next, made after it arrived, which every GET
  waiting meanwhile shares; so N concurrent GETs cost at most two rounds of
  scrapes, and a page is never older than its request (a benchmark's last
  sample after a run sees the run's counts). ``--engine-metrics-ttl`` lets a
  page that recent answer later GETs too.
- each engine's page is read up to ``--max-engine-metrics-bytes`` (4 MiB; vLLM's
  are tens of KB), and the merge, about :data:`MERGE_COST` times the pages'
  bytes, is charged to ``--memory-budget`` while it runs (503 ``overloaded``
  beyond it).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

import aiohttp
from aiohttp import web
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from servekit.proxy.bodies import read_answer
from servekit.proxy.budget import charged, holding
from servekit.proxy.failures import ProxyError, error_response
from servekit.proxy.instances import Instance
from servekit.proxy.router import Router

PATH = "/metrics/engines"
URL_LABEL = "engine_url"
ROLE_LABEL = "engine_role"
MERGE_COST = 16  # bytes of parse per byte of page text (tracemalloc: 14 for counters)


async def scrape(router: Router, inst: Instance) -> str | None:
    """One engine's /metrics text, or None when it could not be read in time and size."""
    timeout = aiohttp.ClientTimeout(total=router.config.engine_metrics_timeout_s)
    try:
        async with router.session.get(
            inst.url + "/metrics", timeout=timeout, headers=router.headers
        ) as resp:
            if resp.status != 200:
                return None
            cap = router.config.max_engine_metrics_bytes
            raw = await read_answer(resp, cap, inst.name, inst.role)
            return raw.decode("utf-8", "replace")
    except (aiohttp.ClientError, TimeoutError):
        return None
    except ProxyError as err:
        if err.kind == "answer_too_large":
            return None
        raise  # the memory budget: the page cannot be made now


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
    every switch interval (``benchmarks/metrics_loop_stall.py``). The pages'
    bytes (as read) and their merge are charged to ``--memory-budget``.
    """
    with holding(router.budget):
        instances = list(router.instances())
        texts = await asyncio.gather(*(scrape(router, i) for i in instances))
        with charged(MERGE_COST * sum(len(t) for t in texts if t is not None)):
            return await asyncio.to_thread(merge, instances, list(texts))


class PageMaker:
    """One page made at a time; a GET is answered by a page whose making started after it
    arrived (or less than ``ttl_s`` before), and GETs waiting meanwhile share it."""

    def __init__(self, router: Router) -> None:
        self.router = router
        self.ttl_s = router.config.engine_metrics_ttl_s
        self._made: tuple[float, bytes] | None = None  # (when its making started, page)
        self._making: tuple[float, asyncio.Task[bytes]] | None = None

    async def page(self) -> bytes:
        loop = asyncio.get_running_loop()
        fresh_from = loop.time() - self.ttl_s
        while True:
            if self._made is not None and self._made[0] >= fresh_from:
                return self._made[1]
            if self._making is None:
                self._making = (loop.time(), loop.create_task(self._make(loop.time())))
            started, task = self._making
            if started >= fresh_from:
                return await asyncio.shield(task)
            with contextlib.suppress(Exception):  # begun before this GET: the next one
                await asyncio.shield(task)

    async def _make(self, started: float) -> bytes:
        try:
            made = await render(self.router)
        finally:
            self._making = None
        self._made = (started, made)
        return made


def add_routes(app: web.Application, key: web.AppKey[Router]) -> None:
    makers: dict[Router, PageMaker] = {}

    async def engines(request: web.Request) -> web.StreamResponse:
        router = request.app[key]
        maker = makers.get(router) or makers.setdefault(router, PageMaker(router))
        try:
            body = await maker.page()
        except ProxyError as err:  # the memory budget
            return error_response(err)
        return web.Response(body=body, headers={"Content-Type": "text/plain; version=0.0.4"})

    app.router.add_get(PATH, engines)
