"""The shared async OpenAI-compatible client (used by accept and bench).

One aiohttp session per :class:`OpenAIClient`; every request comes back as a
typed :class:`RequestRecord` with ``perf_counter_ns`` stamps taken as bytes
arrive, its raw bodies and SSE frames, and errors as data. ``/metrics`` is
parsed into a :class:`MetricsSnapshot`. Readiness (``/health`` and the served model)
is :func:`probe_all` for one round and :func:`poll_ready` until ready.
"""

from servekit.client._client import EndpointError, OpenAIClient, TokenizeResult
from servekit.client._metrics import (
    HistogramSummary,
    MetricsSnapshot,
    merge_snapshots,
    parse_metrics,
)
from servekit.client._ready import Probe, ReadyTarget, judge_backends, poll_ready, probe_all
from servekit.client._records import ErrorKind, Frame, RequestKind, RequestRecord, Usage
from servekit.client._sse import SSEDecoder

__all__ = [
    "EndpointError",
    "ErrorKind",
    "Frame",
    "HistogramSummary",
    "MetricsSnapshot",
    "OpenAIClient",
    "Probe",
    "ReadyTarget",
    "RequestKind",
    "RequestRecord",
    "SSEDecoder",
    "TokenizeResult",
    "Usage",
    "judge_backends",
    "merge_snapshots",
    "parse_metrics",
    "poll_ready",
    "probe_all",
]
