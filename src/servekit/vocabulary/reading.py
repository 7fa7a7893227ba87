"""Bounded reads: at most N bytes of a file a person named, else one line saying why.

A plan.json, a selftest log, a saved tutorial or a kit member may be anything
(a multi-gigabyte file, a copy of /dev/zero): reading it whole first would cost
the memory the bound protects. :func:`read_at_most` reads one byte past the bound,
so a file of exactly N bytes is kept and one of N+1 is refused unread beyond that;
it reads in chunks, so what it holds is what the file has (``read(N + 1)`` would
allocate the whole bound up front, and a 1 GiB bound under an address-space limit
is a MemoryError). It opens non-blocking and reads only a regular file, so a
FIFO or a device under the name is refused at once rather than waited on or
read forever. Links are followed: the path is one the person named. Standard
library only.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

from servekit.errors import UsageError

CHUNK = 1 << 20


def read_at_most(
    path: Path,
    limit: int,
    where: str,
    too_large: str,
    *,
    hint: str = "",
    error: Callable[[str], Exception] = UsageError,
) -> bytes:
    """``path``'s bytes, at most ``limit`` of them.

    Refusals are one line starting with ``where`` (say ``--smoke PATH``): past the
    bound ``"{where}: {too_large}"``; a read that fails ``"{where}: cannot read
    (why){hint}"``. ``error`` builds the exception (a kit reader raises its own).
    """
    chunks: list[bytes] = []
    held = 0
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        with os.fdopen(fd, "rb", buffering=0) as fh:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise error(f"{where}: not a regular file (a FIFO, device or folder){hint}")
            while held <= limit:
                chunk = fh.read(min(CHUNK, limit + 1 - held))
                if not chunk:
                    break
                chunks.append(chunk)
                held += len(chunk)
    except OSError as exc:
        raise error(f"{where}: cannot read ({exc.strerror}){hint}") from None
    if held > limit:
        raise error(f"{where}: {too_large}")
    return b"".join(chunks)


def walk_tree(root: str | os.PathLike[str]) -> Iterator[tuple[str, list[str], list[str]]]:
    """:func:`os.walk` top-down (prune by editing the names list), without recursion.

    Python 3.11's ``os.walk`` recurses once per level, so a folder nested 1,500
    deep raised RecursionError; this keeps its own stack, so depth costs memory
    in proportion, not the interpreter's stack. Unreadable folders are skipped,
    as ``os.walk`` skips them.
    """
    stack = [os.fspath(root)]
    while stack:
        top = stack.pop()
        try:
            with os.scandir(top) as listing:
                found = list(listing)
        except OSError:
            continue
        # As os.walk: a link to a folder is listed among the folders, never entered.
        dirs = [e.name for e in found if _is_dir(e)]
        files = [e.name for e in found if not _is_dir(e)]
        yield top, dirs, files
        below = (os.path.join(top, name) for name in reversed(dirs))
        stack.extend(path for path in below if not os.path.islink(path))


def _is_dir(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir()
    except OSError:
        return False


def sha256_file(path: str | os.PathLike[str]) -> str:
    """Hex sha256 of a file's bytes, read in chunks (a kit archive may be gigabytes)."""
    sha = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(CHUNK):
            sha.update(block)
    return sha.hexdigest()
