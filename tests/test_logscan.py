"""Engine logs read line by line with bounded memory; FIFOs and devices refused, never waited on."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from servekit import logscan
from servekit.logscan import log_lines


@contextlib.contextmanager
def _chunks_of(size: int) -> Iterator[None]:
    """Read in ``size``-byte chunks (hypothesis examples cannot share monkeypatch)."""
    old, logscan.CHUNK = logscan.CHUNK, size
    try:
        yield
    finally:
        logscan.CHUNK = old


def _expected(data: bytes, max_line: int) -> list[str]:
    pieces = data.split(b"\n")
    if pieces and pieces[-1] == b"":
        pieces.pop()
    return [p[:max_line].decode("utf-8", errors="replace") for p in pieces]


@settings(max_examples=300, deadline=None)
@given(
    data=st.lists(
        st.sampled_from([b"a", b"\n", b"\xff", b"\xc3\xa9", b"xyz" * 7]), max_size=60
    ).map(b"".join),
    max_line=st.integers(1, 40),
    chunk=st.integers(1, 16),
)
def test_lines_equal_a_split_cut_to_the_limit(
    tmp_path_factory: pytest.TempPathFactory, data: bytes, max_line: int, chunk: int
) -> None:
    path = tmp_path_factory.mktemp("log") / "x.log"
    path.write_bytes(data)
    with _chunks_of(chunk):  # small chunks: lines cross chunk borders
        got = list(log_lines(path, max_line=max_line))
    assert got == _expected(data, max_line)


def test_one_endless_line_is_cut_not_held(tmp_path: Path) -> None:
    path = tmp_path / "crash.log"
    path.write_bytes(b"x" * (5 << 20) + b"\nAssertionError: boom\n")
    got = list(log_lines(path, max_line=1000))
    assert got == ["x" * 1000, "AssertionError: boom"]


def test_a_fifo_or_a_device_is_refused_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "engine.log"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match="not a regular file"):
        list(log_lines(fifo))
    zero = tmp_path / "zero.log"
    zero.symlink_to("/dev/zero")
    with pytest.raises(OSError, match="not a regular file"):
        list(log_lines(zero))


@settings(max_examples=300, deadline=None)
@given(
    data=st.lists(
        st.sampled_from([b"a", b"\n", b"\r\n", b"\xc3\xa9", b"\xff", b"xyz" * 5]), max_size=80
    ).map(b"".join),
    count=st.integers(0, 12),
    chunk=st.integers(1, 16),
)
def test_last_lines_equal_the_end_of_the_whole_file(
    tmp_path_factory: pytest.TempPathFactory, data: bytes, count: int, chunk: int
) -> None:
    path = tmp_path_factory.mktemp("log") / "x.log"
    path.write_bytes(data)
    with _chunks_of(chunk):  # small blocks: reading backwards crosses many of them
        got = logscan.last_lines(path, count)
    whole = data.decode("utf-8", errors="replace").splitlines()
    assert got == (whole[-count:] if count else [])


def test_logs_never_wait_on_a_fifo(tmp_path: Path) -> None:
    from servekit.local.procs import tail

    fifo = tmp_path / "decode.log"
    os.mkfifo(fifo)
    assert tail(fifo, 20) == []
