"""HTTP exchanges with an engine, recorded as data for evidence and judging.

Requests go through the shared :class:`servekit.client.OpenAIClient` (one
aiohttp session for the whole run); each answer is turned into an
:class:`Exchange`, the acceptance suite's view of it: what was sent, what came
back (status, body, SSE frames), how long it took, or the transport error. An
HTTP error status is data here (the guard check *wants* a 400), so only a
failure to get any answer sets :attr:`Exchange.error`.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from pydantic import Field

from servekit.client import OpenAIClient, RequestKind, RequestRecord
from servekit.vocabulary import StrictModel

DEFAULT_TIMEOUT_S = 600.0
NS = 1e-9


class Exchange(StrictModel):
    """One request and its response (or the error that replaced it)."""

    method: str
    url: str
    request: dict[str, Any] | None = None
    request_sha256: str = ""
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


def _kind(path: str) -> RequestKind:
    if path.endswith("/chat/completions"):
        return "chat"
    if path.endswith("/completions"):
        return "completion"
    return "raw"


def to_exchange(rec: RequestRecord, payload: dict[str, Any] | None) -> Exchange:
    """The acceptance view of a client record."""
    frames = tuple(f.data for f in rec.frames)
    return Exchange(
        method=rec.method,
        url=rec.url,
        request=payload,
        request_sha256=rec.request_sha256 if payload is not None else "",
        status=rec.status,
        body=rec.response_body or "",
        frames=frames,
        error=rec.error if rec.status is None else None,
        elapsed_s=(rec.t_end_ns - rec.t_start_ns) * NS,
        ttft_s=rec.ttft_ns * NS if rec.ttft_ns is not None else None,
    )


class Wire:
    """Full-URL requests over one shared session; use as ``async with Wire() as wire``."""

    def __init__(self, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self._timeout_s = timeout_s
        self._session: aiohttp.ClientSession | None = None
        self._clients: dict[str, OpenAIClient] = {}

    async def __aenter__(self) -> Wire:
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=self._timeout_s)
        self._session = aiohttp.ClientSession(
            timeout=timeout, connector=aiohttp.TCPConnector(limit=0)
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()

    def _client(self, base: str) -> OpenAIClient:
        if self._session is None:
            raise RuntimeError("Wire used outside 'async with'")
        if base not in self._clients:
            self._clients[base] = OpenAIClient(
                base, timeout_s=self._timeout_s, session=self._session
            )
        return self._clients[base]

    async def _send(self, method: str, url: str, payload: dict[str, Any] | None) -> Exchange:
        parts = urlsplit(url)
        client = self._client(f"{parts.scheme}://{parts.netloc}")
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        rec = await client.send(_kind(path) if payload else "raw", method, path, payload)
        return to_exchange(rec, payload)

    async def get(self, url: str) -> Exchange:
        """GET ``url``; errors become data."""
        return await self._send("GET", url, None)

    async def post(self, url: str, payload: dict[str, Any]) -> Exchange:
        """POST JSON ``payload`` to ``url`` and read the whole answer."""
        return await self._send("POST", url, payload)

    async def stream(self, url: str, payload: dict[str, Any]) -> Exchange:
        """POST a streaming request (``stream`` set in ``payload``); frames kept in order."""
        return await self._send("POST", url, {**payload, "stream": True})
