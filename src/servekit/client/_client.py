"""One async OpenAI-compatible client for acceptance and benchmarks.

A single :class:`aiohttp.ClientSession` (one connection pool) per client, an
injectable base URL and API key, and methods that return typed records instead
of raising for request failures. Setup helpers (``tokenize``, ``models``,
``metrics``) raise :class:`EndpointError` carrying the record, because a
benchmark cannot proceed without them.

Usage::

    async with OpenAIClient("http://127.0.0.1:8000") as client:
        rec = await client.completion({"prompt": "hi", "max_tokens": 8, "stream": True})
        print(rec.ttft_ns, rec.itl_ns, rec.text, rec.finish_reason)
"""

from __future__ import annotations

import asyncio
import json
import time
from types import TracebackType
from typing import Any

import aiohttp

from servekit.client._metrics import MetricsSnapshot, parse_metrics
from servekit.client._records import RequestKind, RequestRecord
from servekit.client._stream import ResponseAccumulator
from servekit.vocabulary import StrictModel


class EndpointError(Exception):
    """A setup call did not succeed; ``record`` holds what was exchanged."""

    def __init__(self, message: str, record: RequestRecord | None = None) -> None:
        super().__init__(message)
        self.record = record


class TokenizeResult(StrictModel):
    """The answer of vLLM's ``/tokenize``."""

    count: int
    tokens: tuple[int, ...]
    max_model_len: int | None = None


class OpenAIClient:
    """Async client for an OpenAI-compatible server (vLLM, the simulator, the proxy).

    ``base_url`` is the server root (``http://host:port``; a trailing ``/v1`` is
    dropped). ``model`` fills requests that name none; ``keep_frames`` and
    ``keep_body`` keep the raw SSE frames and body text on each record (evidence
    for acceptance; benchmarks turn them off to stay light). ``session`` injects
    an existing session, which the client then does not close.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        model: str | None = None,
        timeout_s: float = 600.0,
        max_connections: int = 0,
        keep_frames: bool = True,
        keep_body: bool = True,
        session: aiohttp.ClientSession | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/").removesuffix("/v1")
        self.model = model
        self.keep_frames = keep_frames
        self.keep_body = keep_body
        self._headers = {"Content-Type": "application/json"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._timeout = aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=timeout_s)
        self._max_connections = max_connections
        self._session = session
        self._owns_session = session is None

    async def __aenter__(self) -> OpenAIClient:
        self._ensure_session()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the session if this client created it."""
        if self._session is not None and self._owns_session:
            await self._session.close()
        self._session = None

    def derive(self, base_url: str) -> OpenAIClient:
        """A client for another server of the same deployment, sharing this session.

        One connection pool serves the entry and every engine endpoint; the
        derived client never closes the shared session.
        """
        other = OpenAIClient(
            base_url,
            model=self.model,
            keep_frames=self.keep_frames,
            keep_body=self.keep_body,
            session=self._ensure_session(),
        )
        other._headers = dict(self._headers)
        return other

    def _ensure_session(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = aiohttp.TCPConnector(limit=self._max_connections, force_close=False)
            self._session = aiohttp.ClientSession(connector=connector, timeout=self._timeout)
            self._owns_session = True
        return self._session

    # -- generation ---------------------------------------------------------

    async def completion(self, body: dict[str, Any]) -> RequestRecord:
        """POST /v1/completions; streams when ``body["stream"]`` is true."""
        return await self.send("completion", "POST", "/v1/completions", self._with_model(body))

    async def chat(self, body: dict[str, Any]) -> RequestRecord:
        """POST /v1/chat/completions; streams when ``body["stream"]`` is true."""
        return await self.send("chat", "POST", "/v1/chat/completions", self._with_model(body))

    async def request(
        self, method: str, path: str, body: dict[str, Any] | str | None = None
    ) -> RequestRecord:
        """Any call, body sent as given (a str is sent verbatim), response kept raw."""
        return await self.send("raw", method, path, body)

    async def send(
        self,
        kind: RequestKind,
        method: str,
        path: str,
        body: dict[str, Any] | str | None,
        extra_headers: dict[str, str] | None = None,
    ) -> RequestRecord:
        """Send one request and return its record; never raises for I/O or HTTP errors."""
        payload = body if isinstance(body, str) or body is None else _dumps(body)
        stream = isinstance(body, dict) and bool(body.get("stream"))
        ex = _Exchange(kind, method, self.base_url + path, payload, stream)
        await ex.run(self._ensure_session(), {**self._headers, **(extra_headers or {})}, self)
        return ex.record()

    def _with_model(self, body: dict[str, Any]) -> dict[str, Any]:
        if "model" in body or self.model is None:
            return body
        return {"model": self.model, **body}

    # -- setup helpers ------------------------------------------------------

    async def health(self) -> RequestRecord:
        """GET /health (200 when the server is up)."""
        return await self.request("GET", "/health")

    async def models(self) -> list[str]:
        """The served model ids from GET /v1/models."""
        data = _json_of(await self.request("GET", "/v1/models"), "/v1/models")
        try:
            return [str(m["id"]) for m in data["data"]]
        except (KeyError, TypeError) as exc:
            raise EndpointError(f"/v1/models: unexpected answer ({exc!r})") from exc

    async def resolve_model(self) -> str:
        """The configured model, else the first served one (and remember it)."""
        if self.model is None:
            names = await self.models()
            if not names:
                raise EndpointError("/v1/models lists no model")
            self.model = names[0]
        return self.model

    async def tokenize(
        self,
        text: str | None = None,
        *,
        messages: list[dict[str, Any]] | None = None,
        add_special_tokens: bool = True,
    ) -> TokenizeResult:
        """POST /tokenize with a prompt or chat messages; the token ids and count."""
        if (text is None) == (messages is None):
            raise ValueError("tokenize: pass exactly one of text or messages")
        body: dict[str, Any] = {"add_special_tokens": add_special_tokens}
        body.update({"prompt": text} if messages is None else {"messages": messages})
        if self.model is not None:
            body["model"] = self.model
        data = _json_of(await self.request("POST", "/tokenize", body), "/tokenize")
        try:
            return TokenizeResult(
                count=int(data["count"]),
                tokens=tuple(int(t) for t in data["tokens"]),
                max_model_len=data.get("max_model_len"),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise EndpointError(f"/tokenize: unexpected answer ({exc!r})") from exc

    async def metrics_text(self) -> str:
        """GET /metrics as raw Prometheus text."""
        rec = await self.request("GET", "/metrics")
        if not rec.ok or rec.response_body is None:
            raise EndpointError(f"/metrics: {rec.error}", rec)
        return rec.response_body

    async def metrics(self) -> MetricsSnapshot:
        """GET /metrics parsed into a snapshot stamped when the answer arrived."""
        text = await self.metrics_text()
        t_ns = time.perf_counter_ns()
        try:
            # Off the loop: a load generator sampling many engines would otherwise
            # delay the arrival stamps of the streams it is measuring.
            return await asyncio.to_thread(parse_metrics, text, t_ns)
        except ValueError as exc:
            raise EndpointError(f"/metrics: not Prometheus text ({exc})") from exc


def _dumps(body: dict[str, Any]) -> str:
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"))


def _json_of(rec: RequestRecord, path: str) -> Any:
    if not rec.ok:
        raise EndpointError(f"{path}: {rec.error}", rec)
    data = rec.json_body()
    if data is None:
        raise EndpointError(f"{path}: answer is not JSON", rec)
    return data


class _Exchange:
    """The mutable state of one request while it is in flight."""

    def __init__(
        self, kind: RequestKind, method: str, url: str, payload: str | None, stream: bool
    ) -> None:
        self.kind, self.method, self.url = kind, method, url
        self.payload, self.stream = payload, stream
        self.status: int | None = None
        self.headers: dict[str, str] = {}
        self.t_headers: int | None = None
        self.acc = ResponseAccumulator("raw", False, False, False)
        self.t_start = self.t_end = 0

    async def run(
        self, session: aiohttp.ClientSession, headers: dict[str, str], client: OpenAIClient
    ) -> None:
        """Do the exchange, stamping times as bytes arrive; errors become data."""
        data = self.payload.encode("utf-8") if self.payload else None
        self.t_start = time.perf_counter_ns()
        try:
            async with session.request(self.method, self.url, data=data, headers=headers) as resp:
                self.t_headers = time.perf_counter_ns()
                self.status, self.headers = resp.status, dict(resp.headers)
                ok = resp.status < 400
                sse = self.stream and ok and resp.content_type == "text/event-stream"
                self.acc = ResponseAccumulator(
                    self.kind if ok else "raw", sse, client.keep_frames, client.keep_body
                )
                async for chunk in resp.content.iter_any():
                    self.acc.feed(chunk, time.perf_counter_ns())
                self.acc.finish(time.perf_counter_ns())
        except (TimeoutError, aiohttp.ServerTimeoutError) as exc:
            self.acc.fail("timeout", f"timed out: {exc!r}")
        except aiohttp.ClientConnectorError as exc:
            self.acc.fail("connect", f"cannot connect to {self.url}: {exc}")
        except aiohttp.ClientError as exc:
            self.acc.fail("protocol", f"{type(exc).__name__}: {exc}")
        self.t_end = time.perf_counter_ns()
        self._judge()

    def _judge(self) -> None:
        if self.status is not None and self.status >= 400:
            self.acc.fail("http", f"HTTP {self.status}: {(self.acc.body_text() or '')[:200]}")
        elif self.status is not None and self._expects_tokens and not self.acc.token_times:
            self.acc.fail("no_token", "the stream carried no token frame")

    @property
    def _expects_tokens(self) -> bool:
        return self.stream and self.kind != "raw"

    def record(self) -> RequestRecord:
        """The finished, immutable record."""
        acc = self.acc
        return RequestRecord(
            kind=self.kind,
            method=self.method,
            url=self.url,
            request_body=self.payload,
            stream=self.stream,
            status=self.status,
            headers=self.headers,
            t_start_ns=self.t_start,
            t_headers_ns=self.t_headers,
            t_first_byte_ns=acc.first_byte_ns,
            t_end_ns=self.t_end,
            token_times_ns=tuple(acc.token_times),
            frames=acc.frame_models(),
            response_body=acc.body_text(),
            text="".join(acc.text_parts),
            finish_reason=acc.finish_reason,
            usage=acc.usage,
            done=acc.done,
            error=acc.error,
            error_kind=acc.error_kind,
        )
