"""Run a simulator in a background thread for tests: ``with running_sim(spec) as sim:``.

The simulator gets its own thread and event loop, so synchronous tests and
tests with their own loop (pytest-asyncio, aiohttp clients) can both use it.
Ports 0 in the spec are replaced by free ports; ``sim.urls`` says which.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, TypeVar

from servekit.sim.endpoint import SimEndpoint
from servekit.sim.server import SimServer, serve
from servekit.sim.spec import SimSpec, spec_from_mapping

T = TypeVar("T")
START_TIMEOUT_S = 30.0


@dataclass
class RunningSim:
    """A simulator running in its own thread."""

    server: SimServer
    loop: asyncio.AbstractEventLoop

    @property
    def urls(self) -> dict[str, str]:
        """Base URL (``http://127.0.0.1:PORT``) of every endpoint, by name."""
        return self.server.urls

    @property
    def url(self) -> str:
        """Base URL of the first endpoint."""
        return next(iter(self.server.urls.values()))

    @property
    def admin_url(self) -> str | None:
        return self.server.admin_url

    def call(self, fn: Callable[[SimEndpoint], T], name: str | None = None) -> T:
        """Run ``fn(endpoint)`` on the simulator's loop (thread-safe) and return its result."""
        ep = self.server.endpoints[name] if name else next(iter(self.server.endpoints.values()))
        done: Future[T] = Future()

        def go() -> None:
            try:
                done.set_result(fn(ep))
            except BaseException as exc:
                done.set_exception(exc)

        self.loop.call_soon_threadsafe(go)
        return done.result(timeout=START_TIMEOUT_S)

    def set_faults(self, name: str | None = None, **patch: Any) -> None:
        """Change faults of one endpoint (the first when ``name`` is None)."""
        self.call(lambda ep: ep.set_faults(patch), name)


@contextlib.contextmanager
def running_sim(spec: SimSpec | dict[str, Any]) -> Iterator[RunningSim]:
    """Start ``spec`` in a background thread; stop it and join the thread on exit."""
    if not isinstance(spec, SimSpec):
        spec = spec_from_mapping(spec)
    loop = asyncio.new_event_loop()
    started: Future[SimServer] = Future()
    stopped = asyncio.Event()

    async def main() -> None:
        try:
            server = await serve(spec)
        except BaseException as exc:
            started.set_exception(exc)
            return
        started.set_result(server)
        try:
            await stopped.wait()
        finally:
            await server.stop()

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    try:
        server = started.result(timeout=START_TIMEOUT_S)
        yield RunningSim(server, loop)
    finally:
        loop.call_soon_threadsafe(stopped.set)
        thread.join(timeout=START_TIMEOUT_S)
        if not thread.is_alive():
            loop.close()
