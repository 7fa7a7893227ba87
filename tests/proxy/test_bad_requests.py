"""Bad requests (issue 23, item 10): one log line each, rate-limited; Authorization as RFC 9110.

Malformed HTTP used to log a full traceback at ERROR per request (2,000
requests, 1.1 MB); now each is one WARNING line naming the peer and the
parser's complaint, at most ``--log-burst`` per ``--log-interval`` and the rest
summed in one "suppressed" line. ``Authorization: bearer KEY`` is accepted (the
scheme is case-insensitive) and two Authorization headers are a 400.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re

import pytest
from hypothesis import given, settings, strategies as st

from servekit.proxy.ratelog import RateLimited, printable

from .harness import run, stack
from .test_slow_clients import connect, read_to_eof

MALFORMED = [
    b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n",
    b"GET / HTTP/1.1\r\nno colon here\r\n\r\n",
    b"GET / HTTP/9.9\r\nHost: x\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: x\r\nX: a\x00b\r\n\r\n",
    b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\n\r\n",
    b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
    b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: x\r\nX: \x1b[31mred\x1b[0m\r\nBad\r\n\r\n",
]
SUPPRESSED = re.compile(r"bad requests: suppressed (\d+) more lines")


async def send_raw(url: str, data: bytes) -> bytes:
    reader, writer = await connect(url)
    writer.write(data)
    answer = await read_to_eof(reader)
    writer.close()
    return answer


async def send_raw_or_closed(url: str, data: bytes) -> bytes:
    """Like :func:`send_raw`; a connection the proxy reset counts as closed (b""), as a
    close that overtakes unread bytes arrives as a reset on a loaded machine."""
    try:
        return await send_raw(url, data)
    except ConnectionError:
        return b""


def test_each_malformed_request_is_one_line_and_the_flood_is_summed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    sent = 200

    async def scenario() -> None:
        async with stack(log_burst=5, log_interval_s=0.5) as s:
            caplog.clear()
            answers = await asyncio.gather(
                *(send_raw(s.url, MALFORMED[i % len(MALFORMED)]) for i in range(sent))
            )
            assert all(a.split(b"\r\n", 1)[0].endswith(b" 400 Bad Request") for a in answers)

            def summed() -> int:
                counts = [SUPPRESSED.search(r.getMessage()) for r in caplog.records]
                return sum(int(m.group(1)) for m in counts if m)

            lines = [r for r in caplog.records if "Error handling request" in r.getMessage()]
            deadline = asyncio.get_running_loop().time() + 20
            while len(lines) + summed() < sent:  # the window's summary comes at its end
                assert asyncio.get_running_loop().time() < deadline, (len(lines), summed())
                await asyncio.sleep(0.1)
                lines = [r for r in caplog.records if "Error handling request" in r.getMessage()]
            assert len(lines) + summed() == sent  # every one counted, once
            windows = sum(1 for r in caplog.records if SUPPRESSED.search(r.getMessage()))
            assert len(lines) <= 5 * (windows + 1)  # at most the burst per window
            for record in lines:
                assert record.exc_info is None and record.levelno == logging.WARNING
                text = record.getMessage()
                assert "\n" not in text and "\x1b" not in text and len(text) < 400, text

    run(scenario())
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"


def test_a_refused_request_logs_one_line(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="servekit.proxy")

    async def scenario() -> None:
        async with stack() as s:
            caplog.clear()
            async with s.client.post(s.url + "/v1/completions", data=b"{not json") as resp:
                assert resp.status == 400
            refused = [r for r in caplog.records if r.getMessage().startswith("refused POST")]
            assert len(refused) == 1 and "400 bad_request" in refused[0].getMessage()

    run(scenario())


def test_the_bearer_scheme_is_case_insensitive() -> None:
    async def scenario() -> None:
        async with stack(api_key="s3cret") as s:
            for scheme in ("bearer", "BEARER", "Bearer", "bEARER"):
                headers = {"Authorization": f"{scheme} s3cret"}
                status, _ = await s.post("/v1/completions", {"prompt": "x"}, headers=headers)
                assert status == 200, scheme
            for wrong in ("Basic s3cret", "bearer s3cre", "bearers3cret"):
                headers = {"Authorization": wrong}
                status, _ = await s.post("/v1/completions", {"prompt": "x"}, headers=headers)
                assert status == 401, wrong

    run(scenario())


def two_authorizations(path: str, first: str, second: str) -> bytes:
    body = b'{"prompt": "x", "max_tokens": 2}'
    return (
        f"POST {path} HTTP/1.1\r\nHost: p\r\nContent-Type: application/json\r\n"
        f"Authorization: {first}\r\nAuthorization: {second}\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode() + body


def test_two_authorization_headers_are_refused_not_first_wins() -> None:
    async def scenario() -> None:
        async with stack(api_key="s3cret", admin=True, admin_key="adm1n") as s:
            cases = [
                ("/v1/completions", "Bearer s3cret", "Bearer s3cret"),
                ("/v1/completions", "Bearer s3cret", "Bearer other"),
                ("/v1/completions", "Bearer other", "Bearer s3cret"),
                ("/admin/instances/drain", "Bearer adm1n", "Bearer other"),
            ]
            for path, first, second in cases:
                answer = await send_raw(s.url, two_authorizations(path, first, second))
                assert answer.startswith(b"HTTP/1.1 400"), (path, first, second, answer[:80])
                doc = json.loads(answer.split(b"\r\n\r\n", 1)[1])
                assert "Authorization: sent 2 times" in doc["error"]["message"]
            assert s.prefill[0].gen() == [] and s.decode[0].gen() == []
            assert all(i.routable for i in s.proxy.router.instances())  # nothing drained

    run(scenario())


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=500))
def test_printable_is_one_bounded_line_of_printable_characters(text: str) -> None:
    out = printable(text)
    assert out.isprintable() and len(out) <= 203
    assert "\n" not in out and "\r" not in out


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 5), st.lists(st.floats(0, 3, allow_nan=False), max_size=200))
def test_the_limiter_writes_at_most_the_burst_per_window_and_counts_the_rest(
    burst: int, gaps: list[float]
) -> None:
    logger = logging.getLogger("servekit.test.ratelog")
    logger.propagate = False
    collect = Collect()
    logger.addHandler(collect)
    clock = FakeClock()
    limiter = RateLimited(logger, "kind", burst, 1.0, clock)
    written = 0
    try:
        for gap in gaps:
            clock.now += gap
            if limiter.allow():
                written += 1
        limiter.flush()
    finally:
        logger.removeHandler(collect)
    reported = sum(int(r.args[1]) for r in collect.records)  # type: ignore[index, call-overload]
    assert written + reported == len(gaps)  # each call written or counted, once
    assert written <= burst * (1 + clock.now)  # windows are at least 1 s apart


PREFIXES = [b"", b"GET / HTTP/1.1\r\n", b"GET /health HTTP/1.1\r\nHost: p\r\n",
            b"POST /v1/completions HTTP/1.1\r\nHost: p\r\nContent-Length: 40\r\n\r\n",
            b"POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"]  # fmt: skip
HOSTILE = st.lists(
    st.tuples(st.sampled_from(PREFIXES), st.binary(max_size=300)).map(b"".join),
    min_size=1, max_size=40,
)  # fmt: skip


@pytest.mark.slow
@settings(max_examples=6, deadline=None)
@given(HOSTILE)
def test_hostile_bytes_are_answered_or_closed_and_the_proxy_stays_up(heads: list[bytes]) -> None:
    """Every connection ends (answered or closed, never held), no traceback, /health 200."""
    seen: list[logging.LogRecord] = []
    collect = logging.Handler()
    collect.emit = seen.append  # type: ignore[method-assign]
    logger = logging.getLogger("servekit.proxy")
    logger.addHandler(collect)
    limits = {"header_timeout_s": 0.5, "body_timeout_s": 0.5, "keepalive_timeout_s": 0.5}

    async def scenario() -> None:
        async with stack(prefill=0, decode=0, replica=1, **limits) as s:
            answers = await asyncio.gather(*(send_raw_or_closed(s.url, h) for h in heads))
            assert all(a == b"" or a.startswith(b"HTTP/1.") for a in answers)
            status, _ = await s.get("/health")
            assert status == 200

    try:
        run(scenario())
    finally:
        logger.removeHandler(collect)
    assert not [r for r in seen if r.exc_info or r.levelno >= logging.ERROR]


def nested(depth: int, leaf: str) -> str:
    """JSON text of ``leaf`` inside ``depth`` lists (text: no deep object in this process)."""
    return "[" * depth + leaf + "]" * depth


DEEP = 900  # under json's own recursion bound, over the prompt walker's
X, ONE = nested(DEEP, '"x"'), nested(DEEP, "1")


@pytest.mark.parametrize(
    ("path", "fields"),
    [
        ("/v1/chat/completions", '"messages": [{"role": "user", "content": ' + X + "}]"),
        ("/v1/responses", '"input": ' + X),
        ("/v1/responses", '"input": "x", "instructions": ' + X),
        ("/v1/completions", '"prompt": ' + ONE),
    ],
    ids=["chat-content", "responses-input", "responses-instructions", "completions-prompt"],
)
def test_a_deeply_nested_prompt_is_a_clean_400_without_a_traceback(
    path: str, fields: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 36 item 11: about 900 levels got a 500 and ~100 KB of traceback per request."""

    async def scenario() -> None:
        async with stack(prefill=0, decode=0, replica=1) as s:
            raw = '{"model": "sim-model", "max_tokens": 2, ' + fields + "}"
            async with s.client.post(s.url + path, data=raw) as resp:
                assert resp.status == 400, await resp.text()
                assert json.loads(await resp.read())["error"]["code"] == "bad_request"
            assert s.replica[0].gen() == []

    with caplog.at_level(logging.INFO, logger="servekit.proxy"):
        run(scenario())
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"
    assert sum(len(r.getMessage()) for r in caplog.records) < 5000
