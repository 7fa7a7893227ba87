"""Bodies bounded in bytes and time, both ways (issue 23, item 10, the proxy's parts).

Request bodies: a declared size over the cap is a 413 before one byte is read,
a chunked body is cut at the cap, a body that does not arrive is a 408; both
close the connection. Engine answers: an unstreamed answer over
``--max-answer-bytes`` is a 502 not held against the engine; a 200 that is not
UTF-8 JSON is the engine's failure (counted, retried elsewhere, 502 when none
serves), never relayed as a 200.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from .harness import run, stack
from .test_slow_clients import connect, read_response, read_to_eof

REQUEST = b'{"prompt": "hello", "max_tokens": 4}'


def head(length: int | str, extra: str = "") -> bytes:
    return (
        "POST /v1/completions HTTP/1.1\r\nHost: p\r\nContent-Type: application/json\r\n"
        f"Content-Length: {length}\r\n{extra}\r\n"
    ).encode()


def error_of(answer: bytes) -> tuple[int, str]:
    status = int(answer.split(b" ", 2)[1])
    body = answer.split(b"\r\n\r\n", 1)[1]
    return status, json.loads(body)["error"]["code"]


@pytest.mark.slow
def test_a_huge_content_length_gets_413_before_any_body_is_sent() -> None:
    async def scenario() -> None:
        async with stack() as s:
            for extra in ("", "Expect: 100-continue\r\n"):
                reader, writer = await connect(s.url)
                writer.write(head(999999999999, extra))  # and not one byte of body
                answer = await read_to_eof(reader)  # answered, then closed
                assert not answer.startswith(b"HTTP/1.1 100")  # the client never sends it
                assert error_of(answer) == (413, "payload_too_large"), answer
                assert b"Connection: close" in answer.split(b"\r\n\r\n")[0]
                writer.close()
            assert s.prefill[0].gen() == []

    run(scenario())


def test_a_chunked_body_over_the_cap_gets_413() -> None:
    async def scenario() -> None:
        async with stack(max_body_bytes=1000) as s:
            reader, writer = await connect(s.url)
            writer.write(
                b"POST /v1/completions HTTP/1.1\r\nHost: p\r\nTransfer-Encoding: chunked\r\n\r\n"
            )
            for _ in range(5):
                writer.write(b"190\r\n" + b"x" * 400 + b"\r\n")
            answer = await read_response(reader)
            assert error_of(answer) == (413, "payload_too_large")
            writer.close()
            assert s.prefill[0].gen() == []

    run(scenario())


@pytest.mark.slow
def test_a_body_that_stops_arriving_gets_408_and_the_connection_closes() -> None:
    async def scenario() -> None:
        async with stack(body_timeout_s=0.5) as s:
            reader, writer = await connect(s.url)
            writer.write(head(len(REQUEST)) + REQUEST[:10])  # then nothing
            answer = await read_to_eof(reader)
            assert error_of(answer) == (408, "request_timeout")
            assert b"Connection: close" in answer.split(b"\r\n\r\n")[0]
            writer.close()
            status, _ = await s.post("/v1/completions", {"prompt": "x", "max_tokens": 2})
            assert status == 200  # the proxy is fine; only that request was refused
            assert len(s.prefill[0].gen()) == 1

    run(scenario())


def padded(size: int) -> Callable[[bytes], bytes]:
    """A rewrite that keeps the answer valid JSON and makes it ``size`` bytes or more."""

    def rewrite(body: bytes) -> bytes:
        return body[:-1] + b', "pad": "' + b"x" * size + b'"}'

    return rewrite


def test_an_unstreamed_answer_over_the_cap_is_502_and_not_held_against_the_engine() -> None:
    async def scenario() -> None:
        async with stack(prefill=0, decode=0, replica=1, max_answer_bytes=1 << 20) as s:
            s.replica[0].spy.rewrite["/v1/completions"] = padded(2 << 20)
            status, out = await s.post("/v1/completions", {"prompt": "x", "max_tokens": 2})
            assert status == 502, (status, len(out))
            doc = json.loads(out)["error"]
            assert doc["code"] == "answer_too_large", doc
            assert "--max-answer-bytes" in doc["message"]
            inst = next(s.proxy.router.instances())
            assert inst.request_fails == 0 and inst.routable  # the request's doing, not its
            s.replica[0].spy.rewrite["/v1/completions"] = padded(1000)
            status, out = await s.post("/v1/completions", {"prompt": "x", "max_tokens": 2})
            assert status == 200 and json.loads(out)["pad"] == "x" * 1000
            assert s.loads_are_zero()

    run(scenario())


def test_an_oversized_answer_in_pd_is_502_too() -> None:
    async def scenario() -> None:
        async with stack(max_answer_bytes=1 << 20) as s:
            s.decode[0].spy.rewrite["/v1/completions"] = padded(2 << 20)
            status, out = await s.post("/v1/completions", {"prompt": "x", "max_tokens": 2})
            assert status == 502 and json.loads(out)["error"]["code"] == "answer_too_large"
            assert s.loads_are_zero()

    run(scenario())


MANGLED = {
    "truncated": lambda body: body[: len(body) // 2],
    "not UTF-8": lambda body: body.replace(b'"text"', b'"t\xffxt"', 1),
    "UTF-16": lambda body: body.decode().encode("utf-16"),
}


def test_replica_answers_that_are_not_utf8_json_are_engine_failures() -> None:
    async def scenario() -> None:
        for name, mangle in MANGLED.items():
            async with stack(prefill=0, decode=0, replica=1, max_attempts=1) as s:
                s.replica[0].spy.rewrite["/v1/completions"] = mangle
                status, out = await s.post("/v1/completions", {"prompt": "x", "max_tokens": 2})
                assert status == 502, (name, status, out[:200])
                doc = json.loads(out)["error"]
                assert doc["code"] == "upstream_error", (name, doc)
                assert "not UTF-8 JSON" in doc["message"]
                inst = next(s.proxy.router.instances())
                assert inst.request_fails == 1, name  # counted against the instance
                assert s.loads_are_zero()

    run(scenario())


def test_a_bad_replica_answer_is_retried_on_another_and_ejects_the_bad_one() -> None:
    async def scenario() -> None:
        cfg = {"outlier_after": 2, "health_interval_s": 30.0, "decode_policy": "round-robin"}
        async with stack(prefill=0, decode=0, replica=2, **cfg) as s:
            bad = s.replica[0]
            bad.spy.rewrite["/v1/completions"] = MANGLED["truncated"]
            for _ in range(6):
                status, out = await s.post("/v1/completions", {"prompt": "x", "max_tokens": 2})
                assert status == 200 and json.loads(out)["choices"], out
            assert s.state("replica-0") == "ejected"
            assert s.state("replica-1") == "healthy"

    run(scenario())


def test_streams_are_not_capped() -> None:
    async def scenario() -> None:
        async with stack(max_answer_bytes=1000) as s:
            body = {"prompt": "x", "max_tokens": 64, "stream": True}
            status, out = await s.post("/v1/completions", body)
            assert status == 200 and len(out) > 1000 and out.endswith(b"data: [DONE]\n\n")

    run(scenario())


def test_passthrough_bodies_are_bounded_too() -> None:
    async def scenario() -> None:
        async with stack(max_answer_bytes=100) as s:
            status, out = await s.get("/v1/models")
            assert status == 502 and out["error"]["code"] == "answer_too_large"
            reader, writer = await connect(s.url)
            writer.write(
                b"POST /tokenize HTTP/1.1\r\nHost: p\r\nContent-Length: 999999999999\r\n\r\n"
            )
            assert error_of(await read_response(reader)) == (413, "payload_too_large")
            writer.close()

    run(scenario())
