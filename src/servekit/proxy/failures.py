"""Proxy-made errors: a status, the stage that failed and a machine-readable kind.

Backend 4xx answers are not wrapped here: they pass through with their own
status and body. Everything the proxy itself decides (no healthy instance,
connection failures after retries, timeouts, a backend 5xx, a prefill without
kv_transfer_params) becomes one of these, rendered as an OpenAI-style JSON error
that names the stage, never a bare 500 and never a 200 with an empty body.
"""

from __future__ import annotations

import json

from aiohttp import web

ERROR_STATUS = {
    "bad_request": 400,
    "unauthorized": 401,
    "upstream_error": 502,
    "connect_failed": 502,
    "missing_kv_transfer_params": 502,
    "stream_interrupted": 502,
    "no_healthy_instance": 503,
    "timeout": 504,
    "kv_lease_expired": 504,
    "payload_too_large": 413,
    "request_timeout": 408,
    "answer_too_large": 502,
    "forbidden": 403,
    "overloaded": 503,
    "worker_failed": 503,
}

# The request's body is left unread: answer, then close the connection (RFC 9110 15.5.9/14).
CLOSING_KINDS = frozenset({"payload_too_large", "request_timeout"})

# Failures of one instance that left nothing at the client: another instance may serve.
RETRYABLE_KINDS = frozenset({"connect_failed", "upstream_error"})


class Answer(Exception):
    """A backend's 4xx answer that goes back to the client as it is (never retried)."""

    def __init__(self, status: int, body: bytes, content_type: str) -> None:
        super().__init__(status)
        self.status = status
        self.body = body
        self.content_type = content_type


class OtherStageFailed(Exception):
    """Another stage failed inside this stage's exchange (layerwise: the prefill during
    the decode): not the chosen instance's failure; :meth:`Router.attempt` raises
    ``error`` without retrying or blaming the instance."""

    def __init__(self, error: ProxyError | Answer) -> None:
        super().__init__(str(error))
        self.error = error


class ProxyError(Exception):
    """A failure the proxy reports itself, for one stage (prefill, decode, replica)."""

    def __init__(self, kind: str, stage: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.stage = stage
        self.message = message

    @property
    def status(self) -> int:
        return ERROR_STATUS[self.kind]

    @property
    def retryable(self) -> bool:
        """A 5xx, an empty 200 or a connection failure: worth trying another instance."""
        return self.kind in RETRYABLE_KINDS

    def payload(self) -> dict[str, object]:
        return {
            "error": {
                "message": self.message,
                "type": "proxy_error",
                "code": self.kind,
                "stage": self.stage,
            }
        }

    def body(self) -> bytes:
        return json.dumps(self.payload()).encode()

    def sse_event(self) -> bytes:
        """The error as the last SSE events of a stream that already started."""
        return b"data: " + self.body() + b"\n\ndata: [DONE]\n\n"


STREAM_INTERRUPTED = "stream_interrupted"  # a relayed stream broke mid-answer


def stream_interrupted(stage: str, how: str = "interrupted") -> ProxyError:
    """The error that ends a stream broken mid-answer: a 502 before its first byte, an
    error event after (the one way it is worded, wherever the stream broke)."""
    return ProxyError(STREAM_INTERRUPTED, stage, f"{stage} stream {how}")


def error_response(err: ProxyError) -> web.Response:
    """The JSON response of a proxy-made error; closing the connection where its body is unread."""
    resp = web.Response(status=err.status, body=err.body(), content_type="application/json")
    if err.kind in CLOSING_KINDS:
        resp.force_close()
    return resp
