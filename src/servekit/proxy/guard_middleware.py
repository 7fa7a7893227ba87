"""The decode guard as a pure ASGI middleware, loaded into vLLM on decode instances.

    vllm serve ... --middleware servekit.proxy.guard_middleware.DecodeGuardMiddleware

vLLM adds a class given to ``--middleware`` with ``app.add_middleware(cls)``,
so the class takes the wrapped app as its only argument. Only a POST to a
generation path has its body buffered and judged by :mod:`servekit.guard`; a
refused request gets 400 with code ``decode_role_requires_kv_transfer_params``
and a log line, and never reaches the engine. Everything else (other scopes,
methods, paths, non-JSON bodies, requests with kv_transfer_params) reaches the
app untouched; a buffered body is replayed to it message by message.

The proxy's prompt-keyed mode (ExampleConnector) marks its decode requests
with kv_transfer_params too, so decoders keep the guard in both PD modes;
``SERVEKIT_DECODE_GUARD=off`` in the engine's environment disables it where a
deployment needs that. This module imports only the standard library and
servekit.guard.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from servekit.guard import guard_error_body, guard_rejects, is_guarded_path

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

log = logging.getLogger("servekit.guard")
ENV_SWITCH = "SERVEKIT_DECODE_GUARD"


def _make_visible(logger: logging.Logger) -> None:
    """Make refusals reach the engine log whatever logging setup the server did.

    Servers configure logging after importing middleware modules (a dictConfig can
    disable loggers created before it); the middleware is built after that.
    """
    logger.disabled = False
    if logger.getEffectiveLevel() > logging.WARNING:
        logger.setLevel(logging.WARNING)
    if not logger.hasHandlers():
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(levelname)s %(asctime)s [%(name)s] %(message)s"))
        logger.addHandler(handler)


def guard_enabled() -> bool:
    """Off only when ``SERVEKIT_DECODE_GUARD`` says so (off, 0, false, no)."""
    return os.environ.get(ENV_SWITCH, "on").strip().lower() not in ("off", "0", "false", "no")


async def _buffer(receive: Receive) -> tuple[list[Message], bytes, bool]:
    """Read the request body; returns the messages, the body and whether it completed."""
    messages: list[Message] = []
    chunks: list[bytes] = []
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request":
            return messages, b"".join(chunks), False
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return messages, b"".join(chunks), True


def _replay(messages: list[Message], receive: Receive) -> Receive:
    """A receive that gives back the buffered messages, then the real ones."""
    pending = list(messages)

    async def replay() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return replay


async def _refuse(path: str, send: Send) -> None:
    body = guard_error_body(path)
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 400, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


class DecodeGuardMiddleware:
    """Refuses generation requests without kv_transfer_params on a decode instance."""

    def __init__(self, app: ASGIApp, enabled: bool | None = None) -> None:
        self.app = app
        self.enabled = guard_enabled() if enabled is None else enabled
        _make_visible(log)
        log.info("decode guard %s", "on" if self.enabled else f"off ({ENV_SWITCH})")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            not self.enabled
            or scope["type"] != "http"
            or not is_guarded_path(scope.get("method", ""), scope.get("path", ""))
        ):
            await self.app(scope, receive, send)
            return
        messages, body, complete = await _buffer(receive)
        if complete and guard_rejects(scope["method"], scope["path"], body):
            client = scope.get("client") or ("?", 0)
            log.warning(
                "decode guard: refused %s %s from %s:%s without kv_transfer_params; "
                "send generation requests through the PD proxy",
                scope["method"], scope["path"], client[0], client[1],
            )  # fmt: skip
            await _refuse(scope["path"], send)
            return
        await self.app(scope, _replay(messages, receive), send)
