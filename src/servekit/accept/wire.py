"""HTTP exchanges with an engine, recorded as data for evidence and judging.

Every request a check makes becomes an :class:`Exchange`: what was sent, what
came back (status, body, SSE frames), how long it took, or the error, so a
refused connection is a verdict with a reason and never a traceback. This is
the acceptance suite's thin seam over aiohttp; it keeps the raw bytes because
the evidence files must be exactly what crossed the wire.
"""

from __future__ import annotations

import json
import time
from typing import Any

import aiohttp
from pydantic import BaseModel, ConfigDict, Field

DEFAULT_TIMEOUT_S = 600.0


class Exchange(BaseModel):
    """One request and its response (or the error that replaced it)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    method: str
    url: str
    request: dict[str, Any] | None = None
    status: int | None = None
    body: str = ""
    frames: tuple[str, ...] = Field(default=(), description="SSE data payloads, in order")
    error: str | None = None
    elapsed_s: float = 0.0
    ttft_s: float | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.status == 200

    def json_body(self) -> Any:
        """The response body parsed as JSON, or None when it is not JSON."""
        try:
            return json.loads(self.body)
        except ValueError:
            return None

    def describe(self) -> str:
        """One line for a failure reason."""
        if self.error is not None:
            return f"{self.method} {self.url}: {self.error}"
        return f"{self.method} {self.url}: HTTP {self.status} {self.body[:120]!r}"


class Wire:
    """A shared aiohttp session; use as ``async with Wire() as wire``."""

    def __init__(self, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Wire:
        connector = aiohttp.TCPConnector(limit=64, force_close=False)
        self._session = aiohttp.ClientSession(timeout=self._timeout, connector=connector)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("Wire used outside 'async with'")
        return self._session

    async def get(self, url: str) -> Exchange:
        """GET ``url``; errors become data."""
        start = time.perf_counter()
        try:
            async with self.session.get(url) as resp:
                body = await resp.text(errors="replace")
                return Exchange(
                    method="GET",
                    url=url,
                    status=resp.status,
                    body=body,
                    elapsed_s=time.perf_counter() - start,
                )
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            return _failed("GET", url, None, exc, start=start)

    async def post(self, url: str, payload: dict[str, Any]) -> Exchange:
        """POST JSON ``payload`` to ``url`` and read the whole answer."""
        start = time.perf_counter()
        try:
            async with self.session.post(url, json=payload) as resp:
                body = await resp.text(errors="replace")
                return Exchange(
                    method="POST",
                    url=url,
                    request=payload,
                    status=resp.status,
                    body=body,
                    elapsed_s=time.perf_counter() - start,
                )
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            return _failed("POST", url, payload, exc, start=start)

    async def stream(self, url: str, payload: dict[str, Any]) -> Exchange:
        """POST a streaming request and keep every SSE ``data:`` payload in order."""
        start = time.perf_counter()
        frames: list[str] = []
        raw: list[str] = []
        ttft: float | None = None
        try:
            async with self.session.post(url, json=payload) as resp:
                async for line_bytes in resp.content:
                    line = line_bytes.decode("utf-8", errors="replace")
                    raw.append(line)
                    stripped = line.strip()
                    if stripped.startswith("data:"):
                        if ttft is None:
                            ttft = time.perf_counter() - start
                        frames.append(stripped[len("data:") :].strip())
                return Exchange(
                    method="POST",
                    url=url,
                    request=payload,
                    status=resp.status,
                    body="".join(raw),
                    frames=tuple(frames),
                    elapsed_s=time.perf_counter() - start,
                    ttft_s=ttft,
                )
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            return _failed("POST", url, payload, exc, start=start, body="".join(raw))


def _failed(
    method: str,
    url: str,
    payload: dict[str, Any] | None,
    exc: BaseException,
    *,
    start: float,
    body: str = "",
) -> Exchange:
    return Exchange(
        method=method,
        url=url,
        request=payload,
        body=body,
        error=f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__,
        elapsed_s=time.perf_counter() - start,
    )
