"""Request traces the field replays: Mooncake JSONL and the Azure public trace CSV.

Mooncake (FAST'25 release, also read by ``vllm bench serve``, AIPerf's
``mooncake_trace`` and guidellm) is one JSON object per line: ``timestamp``
(ms since the first request), ``input_length`` and ``output_length`` (tokens)
and ``hash_ids``, one id per block of ``block_size`` (512) prompt tokens; equal
ids at the same position mean the same prefix block, the last block may be
partial. The Azure LLM inference trace is a CSV with a header naming
``TIMESTAMP`` (a date-time), ``ContextTokens`` and ``GeneratedTokens``.

A trace is hostile input like any other: it is read as a byte stream, each line
bounded before it is decoded (a 1 GB line costs at most ``MAX_LINE_BYTES``),
the line count, the total of block ids and the total of prompt tokens (their
texts are built before the first send) bounded before anything is kept, and
every refusal is one :class:`~servekit.errors.UsageError` naming the line and
the field.
"""

from __future__ import annotations

import codecs
import datetime as dt
import itertools
import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal

from servekit.errors import UsageError

TraceFormat = Literal["mooncake", "azure"]

MOONCAKE_BLOCK = 512
"""Tokens per ``hash_ids`` block in Mooncake's traces (and AIPerf's default)."""
MAX_LINE_BYTES = 1 << 20
"""A Mooncake line of a 1M-token prompt is about 16 KB; anything past 1 MiB is refused."""
MAX_REQUESTS = 1_000_000
MAX_BLOCK_IDS = 4_000_000
"""All ``hash_ids`` of a trace together (about 32 MB kept)."""
MAX_TOKENS = 1 << 24
MAX_INPUT_TOKENS = 100_000_000
"""All prompts of a replay together: their texts are built before the first send (~600 MB)."""
MAX_TIME_S = 30 * 86400.0


@dataclass(frozen=True, slots=True)
class TraceRequest:
    """One request of a trace: when (seconds after the first) and how long."""

    line: int
    at_s: float
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Trace:
    """A parsed trace: its requests in time order and where they came from."""

    path: str
    format: TraceFormat
    requests: tuple[TraceRequest, ...]
    block_size: int = MOONCAKE_BLOCK

    @property
    def span_s(self) -> float:
        """Time from the first request to the last."""
        return self.requests[-1].at_s if self.requests else 0.0

    def blocks(self) -> tuple[int, int]:
        """(block ids in all requests, distinct block ids): how much prefix is shared."""
        total = sum(len(r.hash_ids) for r in self.requests)
        return total, len({h for r in self.requests for h in r.hash_ids})


def detect_format(path: Path, first_line: bytes) -> TraceFormat:
    """Azure when the file is a CSV (by name or by its header), else Mooncake JSONL."""
    head = first_line.removeprefix(codecs.BOM_UTF8).lstrip()
    if path.suffix.lower() == ".csv" or head.startswith(b"TIMESTAMP"):
        return "azure"
    return "mooncake"


def read_trace(
    path: Path,
    *,
    fmt: TraceFormat | None = None,
    block_size: int = MOONCAKE_BLOCK,
    limit: int | None = None,
    flag: str = "--trace",
) -> Trace:
    """Parse a trace file; any fault is one UsageError ``FLAG PATH: line N: field: why``."""
    where = f"{flag} {path}"
    try:
        handle = path.open("rb")
    except OSError as exc:
        raise UsageError(f"{where}: cannot read ({exc.strerror}); pass a trace file") from None
    with handle:
        lines = _bounded_lines(handle, where)
        try:
            n, first = next(lines)
        except StopIteration:
            raise UsageError(f"{where}: empty; a trace needs at least one request") from None
        chosen = fmt or detect_format(path, first)
        parse = _mooncake if chosen == "mooncake" else _azure(where, first)
        stream = lines if chosen == "azure" else itertools.chain([(n, first)], lines)
        requests = _collect(stream, parse, where, block_size, limit)
    if not requests:
        raise UsageError(f"{where}: no requests; a trace needs at least one")
    return Trace(str(path), chosen, tuple(requests), block_size)


def _bounded_lines(handle: IO[bytes], where: str) -> Iterator[tuple[int, bytes]]:
    """(line number, bytes) of each non-blank line, never holding more than one line."""
    number = 0
    while True:
        raw = handle.readline(MAX_LINE_BYTES + 1)
        if not raw:
            return
        number += 1
        if len(raw) > MAX_LINE_BYTES:
            raise UsageError(
                f"{where}: line {number}: longer than {MAX_LINE_BYTES} bytes; one request per line"
            )
        if number > MAX_REQUESTS + 1:
            raise UsageError(
                f"{where}: line {number}: more than {MAX_REQUESTS} lines; "
                "split the trace or replay a part of it"
            )
        if raw.strip():
            yield number, raw


Parsed = tuple[float, int, int, tuple[int, ...]]


def _collect(
    lines: Iterator[tuple[int, bytes]],
    parse: Any,
    where: str,
    block_size: int,
    limit: int | None,
) -> list[TraceRequest]:
    requests: list[TraceRequest] = []
    origin: float | None = None
    previous = -math.inf
    blocks = 0
    prompt_tokens = 0
    for number, raw in lines:
        if limit is not None and len(requests) >= limit:
            break
        try:
            at, isl, osl, ids = parse(raw)
        except _Bad as bad:
            raise UsageError(f"{where}: line {number}: {bad}") from None
        if at < previous:
            raise UsageError(
                f"{where}: line {number}: timestamp goes back in time "
                f"({_fmt_ms(at)} after {_fmt_ms(previous)}); sort the trace by time"
            )
        previous = at
        if len(ids) > -(-isl // block_size):
            raise UsageError(
                f"{where}: line {number}: hash_ids: {len(ids)} blocks of {block_size} tokens "
                f"do not fit input_length {isl}"
            )
        blocks += len(ids)
        if blocks > MAX_BLOCK_IDS:
            raise UsageError(
                f"{where}: line {number}: hash_ids: more than {MAX_BLOCK_IDS} in the trace; "
                "replay a part of it"
            )
        prompt_tokens += isl
        if prompt_tokens > MAX_INPUT_TOKENS:
            raise UsageError(
                f"{where}: line {number}: input_length: the prompts add up to more than "
                f"{MAX_INPUT_TOKENS} tokens; replay the first N requests with --requests N"
            )
        origin = at if origin is None else origin
        if at - origin > MAX_TIME_S:
            raise UsageError(
                f"{where}: line {number}: timestamp: {_fmt_days(at - origin)} after the first "
                f"request, past {_fmt_days(MAX_TIME_S)}; replay a part of the trace"
            )
        requests.append(TraceRequest(number, at - origin, isl, osl, ids))
    return requests


def _fmt_ms(seconds: float) -> str:
    return f"{seconds * 1000:g} ms"


def _fmt_days(seconds: float) -> str:
    return f"{seconds / 86400:g} days"


class _Bad(ValueError):
    """A field of one line is wrong (the caller adds the line number)."""


def _count(obj: dict[str, Any], name: str, minimum: int) -> int:
    value = obj.get(name)
    if value is None:
        raise _Bad(f"{name}: missing; every request needs it")
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Bad(f"{name}: expected a whole number of tokens, got {_shown(value)}")
    if not minimum <= value <= MAX_TOKENS:
        raise _Bad(f"{name}: {value} is outside {minimum}..{MAX_TOKENS}")
    return value


def _shown(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _mooncake(raw: bytes) -> Parsed:
    try:
        obj = json.loads(raw)
    except (ValueError, RecursionError):
        raise _Bad("not a JSON object; Mooncake traces hold one per line") from None
    if not isinstance(obj, dict):
        raise _Bad(f"expected a JSON object, got {type(obj).__name__}")
    ts = obj.get("timestamp")
    if isinstance(ts, bool) or not isinstance(ts, int | float):
        raise _Bad(f"timestamp: expected milliseconds (a number), got {_shown(ts)}")
    if not 0 <= ts <= MAX_TIME_S * 1000:
        raise _Bad(f"timestamp: {_shown(ts)} is outside 0..{MAX_TIME_S * 1000:g} ms")
    isl = _count(obj, "input_length", 1)
    osl = _count(obj, "output_length", 1)
    ids = obj.get("hash_ids", [])
    if not isinstance(ids, list) or not all(
        isinstance(h, int) and not isinstance(h, bool) and 0 <= h < 1 << 63 for h in ids
    ):
        raise _Bad("hash_ids: expected a list of block ids (whole numbers >= 0)")
    return ts / 1000.0, isl, osl, tuple(ids)


AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


def _azure(where: str, header: bytes) -> Any:
    """A line parser for the columns the header names (checked once)."""
    # utf-8-sig: a spreadsheet's "CSV UTF-8" starts with a byte order mark.
    names = [c.strip() for c in header.decode("utf-8-sig", "replace").split(",")]
    missing = [c for c in AZURE_COLUMNS if c not in names]
    if missing:
        raise UsageError(
            f"{where}: line 1: header lacks {', '.join(missing)}; "
            f"an Azure trace's header names {','.join(AZURE_COLUMNS)}"
        )
    at, ctx, gen = (names.index(c) for c in AZURE_COLUMNS)

    def parse(raw: bytes) -> Parsed:
        cells = raw.decode("utf-8", "replace").strip().split(",")
        if len(cells) != len(names):
            raise _Bad(f"expected {len(names)} columns, got {len(cells)}")
        return (
            _azure_time(cells[at]),
            _azure_count("ContextTokens", cells[ctx], 1),
            _azure_count("GeneratedTokens", cells[gen], 1),
            (),
        )

    return parse


def _azure_count(name: str, cell: str, minimum: int) -> int:
    try:
        value = int(cell.strip())
    except ValueError:
        raise _Bad(f"{name}: expected a whole number of tokens, got {_shown(cell)}") from None
    return _count({name: value}, name, minimum)


_AZURE_TIME = re.compile(r"([^.]*)(?:\.(\d+))?((?:Z|[+-][0-9:]+)?)")


def _azure_time(cell: str) -> float:
    """Seconds since the epoch of an Azure ``TIMESTAMP`` (e.g. 2023-11-16 18:15:46.6805900).

    The fraction is read apart (the trace has 7 digits, more than ``fromisoformat``
    takes); a UTC offset after it or after the seconds is kept, and a time
    without one is UTC.
    """
    text = cell.strip()
    match = _AZURE_TIME.fullmatch(text)
    try:
        if match is None:
            raise ValueError(text)
        stamp = dt.datetime.fromisoformat(match[1] + match[3])
    except ValueError:
        raise _Bad(f"TIMESTAMP: expected a date and time, got {_shown(text)}") from None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=dt.UTC)
    return stamp.timestamp() + (float(f"0.{match[2]}") if match[2] else 0.0)
