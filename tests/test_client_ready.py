"""The one readiness poller (issue 25): accept's proxy and verify's dry cluster wait with it."""

from __future__ import annotations

import asyncio
import socket

import pytest

from servekit.client import ReadyTarget, poll_ready


def _closed_url() -> str:
    """A loopback URL nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def test_a_target_that_never_answers_is_returned_with_its_last_probe() -> None:
    target = ReadyTarget("proxy", _closed_url(), None)
    pending = poll_ready([target], 0.2, poll_s=0.05, probe_timeout_s=0.5)
    assert [t for t, _ in pending] == [target]
    assert not pending[0][1].ready and "not answering" in pending[0][1].detail


def test_check_stops_the_wait_before_the_deadline() -> None:
    def exited() -> None:
        raise RuntimeError("proxy exited with 1")

    with pytest.raises(RuntimeError, match="exited with 1"):
        poll_ready([ReadyTarget("proxy", _closed_url(), None)], 60.0, check=exited)


def test_no_targets_are_ready_at_once() -> None:
    assert poll_ready([], 0.0) == []


def test_it_also_polls_from_inside_a_running_event_loop() -> None:
    """accept's self-check starts its stack in a coroutine, where asyncio.run is refused."""

    async def inside() -> int:
        target = ReadyTarget("proxy", _closed_url(), None)
        return len(poll_ready([target], 0.1, poll_s=0.05, probe_timeout_s=0.5))

    assert asyncio.run(inside()) == 1
