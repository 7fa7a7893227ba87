"""Reading engine logs line by line, with memory bounded whatever the file holds.

Logs come from clusters (``verify --logs DIR``) and can be many gigabytes, or
one endless line of a crashed writer; a FIFO or a device put where a log should
be would block a plain ``open`` or never end. Lines are read in 1 MiB chunks,
each cut to ``max_line`` characters, and only regular files are read.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

CHUNK = 1 << 20
MAX_LINE = 64 * 1024


def open_log(path: Path) -> BinaryIO:
    """A regular file opened for reading; a FIFO or a device is refused, never waited on."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    fh = os.fdopen(fd, "rb")
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        fh.close()
        raise OSError(f"{path} is not a regular file")
    return fh


def last_lines(path: Path, count: int, max_bytes: int = 64 << 20) -> list[str]:
    """The last ``count`` lines, reading backwards in blocks (at most ``max_bytes``)."""
    with open_log(path) as fh:
        end = fh.seek(0, os.SEEK_END)
        start, blocks, newlines = end, [], 0
        while start > 0 and newlines <= count and end - start < max_bytes:
            step = min(CHUNK, start)
            start -= step
            fh.seek(start)
            blocks.append(fh.read(step))
            newlines += blocks[-1].count(b"\n")  # each block counted once, joined once
    data = b"".join(reversed(blocks))
    lines = data.decode("utf-8", errors="replace").splitlines()
    if start > 0 and lines:
        lines = lines[1:]  # the first line read may be the end of a longer one
    return lines[-count:] if count else []


def log_lines(path: Path, max_line: int = MAX_LINE) -> Iterator[str]:
    """Every line of the regular file ``path`` (decoded leniently, each at most ``max_line``).

    Raises OSError when ``path`` cannot be opened or is not a regular file.
    """
    with open_log(path) as fh:
        pending = b""
        dropping = False  # inside a line already cut to max_line
        while chunk := fh.read(CHUNK):
            parts = (pending + chunk).split(b"\n")
            pending = parts.pop()
            for part in parts:
                if not dropping:
                    yield part[:max_line].decode("utf-8", errors="replace")
                dropping = False
            if len(pending) > max_line:
                if not dropping:
                    yield pending[:max_line].decode("utf-8", errors="replace")
                pending, dropping = b"", True
        if pending and not dropping:
            yield pending[:max_line].decode("utf-8", errors="replace")
