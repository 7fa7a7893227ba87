"""The simulator with servekit's real PD proxy in front, on loopback, for acceptance tests."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from servekit.deployment import Deployment, Endpoint
from servekit.proxy.config import ProxyConfig
from servekit.proxy.server import start_proxy
from servekit.sim.testing import running_sim

FAST = {"health_interval_s": 0.05, "health_timeout_s": 1.0, "retry_backoff_s": 0.0}


@contextlib.contextmanager
def running_proxy(config: ProxyConfig) -> Iterator[str]:
    """The real proxy in its own thread and loop; yields its URL."""
    loop = asyncio.new_event_loop()
    started: Future[str] = Future()
    stop = asyncio.Event()

    async def main() -> None:
        proxy = await start_proxy(config)
        started.set_result(proxy.url)
        try:
            await stop.wait()
        finally:
            await proxy.stop()

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    try:
        yield started.result(timeout=30)
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(timeout=30)
        loop.close()


def _endpoint(name: str, role: str, log_dir: Path, **extra: Any) -> dict[str, Any]:
    log = log_dir / f"{name}.log"
    log.touch()
    return {
        "name": name,
        "port": 0,
        "role": role,
        "max_model_len": 8192,
        "log": str(log),
        **extra,
    }


@contextlib.contextmanager
def sim_pd(
    log_dir: Path,
    *,
    prefill: dict[str, Any] | None = None,
    decode: dict[str, Any] | None = None,
    reference: dict[str, Any] | None = None,
    capabilities: tuple[str, ...] = ("retrieval",),
    wait_healthy: bool = True,
) -> Iterator[tuple[Deployment, Any]]:
    """1 prefill + 1 decode (guarded) + a mixed reference, and the proxy in front."""
    spec = {
        "endpoints": [
            _endpoint("prefill", "prefill", log_dir, **(prefill or {})),
            _endpoint("decode", "decode", log_dir, **{"guard": True, **(decode or {})}),
            _endpoint("reference", "mixed", log_dir, **(reference or {})),
        ]
    }
    with running_sim(spec) as sim:
        urls = sim.urls
        config = ProxyConfig(
            mode="pd", prefill=(urls["prefill"],), decode=(urls["decode"],), port=0, **FAST
        )
        with running_proxy(config) as proxy_url:
            if wait_healthy:
                _wait_healthy(proxy_url)
            endpoints = (
                Endpoint(name="proxy", role="proxy", url=proxy_url),
                Endpoint(
                    name="prefill", role="prefill", url=urls["prefill"], log=log_dir / "prefill.log"
                ),
                Endpoint(
                    name="decode", role="decode", url=urls["decode"], log=log_dir / "decode.log"
                ),
            )
            yield (
                Deployment(
                    engine="sim",
                    model="sim-model",
                    entry_url=proxy_url,
                    endpoints=endpoints,
                    reference_url=urls["reference"],
                    capabilities=capabilities,
                ),
                sim,
            )


def _wait_healthy(url: str) -> None:
    import time
    import urllib.request

    for _ in range(400):
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.025)
    raise AssertionError(f"proxy at {url} never became healthy")
