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

CHUNK = 1 << 20
MAX_LINE = 64 * 1024


def log_lines(path: Path, max_line: int = MAX_LINE) -> Iterator[str]:
    """Every line of the regular file ``path`` (decoded leniently, each at most ``max_line``).

    Raises OSError when ``path`` cannot be opened or is not a regular file.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path} is not a regular file")
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
