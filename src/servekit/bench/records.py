"""Per-request records: ``requests.jsonl`` beside ``bench.json``.

``bench.json`` keeps each run's figures; these rows keep what they were made
of, one measured request per line, so anyone can recompute a figure, check the
ISL/OSL the server saw, or plot a distribution later. Times are integer
nanoseconds of the client's monotonic clock relative to the run's start (the
first send, or the trace's schedule origin), so the serving figures recompute
exactly (``tests/bench/test_records.py`` does it for every headline figure).
Token counts are the server's own ``usage``, never the client's guess.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path

from pydantic import Field

from servekit.client import RequestRecord
from servekit.vocabulary import StrictModel, atomic_write_text

RECORDS_FILE = "requests.jsonl"


class RequestRow(StrictModel):
    """One measured request of one run of one point."""

    workload: str
    point: str = Field(description="the point's label in bench.json")
    run: int = Field(description="run index, from 0")
    run_duration_s: float = Field(description="the run's duration the throughputs divide by")
    index: int = Field(description="the request's place in the run's send order")
    send_ns: int = Field(description="when the request was sent, from the run's start")
    scheduled_ns: int | None = Field(None, description="when it was due (trace replay)")
    lateness_ns: int | None = Field(None, description="send minus schedule (trace replay)")
    ttft_ns: int | None = None
    latency_ns: int = Field(description="send to last token frame (E2EL)")
    itl_ns: tuple[int, ...] = Field((), description="every gap between token frames")
    prompt_tokens: int | None = Field(None, description="usage.prompt_tokens")
    output_tokens: int | None = Field(None, description="usage.completion_tokens")
    cached_tokens: int | None = Field(None, description="usage prompt_tokens_details")
    trace_line: int | None = Field(None, description="the trace line replayed")
    trace_input_tokens: int | None = None
    trace_output_tokens: int | None = None
    error: str | None = None
    error_kind: str | None = None


def rows_of(
    records: Sequence[RequestRecord],
    *,
    workload: str,
    point: str,
    run: int,
    duration_s: float,
    t0_ns: int | None = None,
    scheduled_ns: Sequence[int] | None = None,
) -> list[RequestRow]:
    """Rows for one run's records (in send order); ``t0_ns`` defaults to the first send."""
    if not records:
        return []
    origin = min(r.t_start_ns for r in records) if t0_ns is None else t0_ns
    rows = []
    for i, rec in enumerate(records):
        due = scheduled_ns[i] if scheduled_ns is not None else None
        send = rec.t_start_ns - origin
        usage = rec.usage
        rows.append(
            RequestRow(
                workload=workload,
                point=point,
                run=run,
                run_duration_s=duration_s,
                index=i,
                send_ns=send,
                scheduled_ns=due,
                lateness_ns=send - due if due is not None else None,
                ttft_ns=rec.ttft_ns,
                latency_ns=rec.latency_ns,
                itl_ns=tuple(rec.itl_ns),
                prompt_tokens=usage.prompt_tokens if usage else None,
                output_tokens=usage.completion_tokens if usage else None,
                cached_tokens=usage.cached_tokens if usage else None,
                error=rec.error,
                error_kind=rec.error_kind,
            )
        )
    return rows


def write_rows(path: Path, rows: Iterable[RequestRow]) -> Path:
    """Write the rows as JSON lines, atomically."""
    atomic_write_text(path, "".join(row.model_dump_json() + "\n" for row in rows))
    return path


def read_rows(path: Path) -> list[RequestRow]:
    """Rows of a written ``requests.jsonl`` (a file servekit wrote, read back)."""
    with path.open(encoding="utf-8") as handle:
        return [RequestRow.model_validate(json.loads(line)) for line in handle if line.strip()]
