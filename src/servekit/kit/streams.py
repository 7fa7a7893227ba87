"""Readers that hash, count, bound and slice byte streams.

Every layer and kit is read through these wrappers so that one pass over the
bytes yields the digests (blob sha256, diffID) and enforces the decompression
limits: nothing is read twice and nothing unbounded reaches ``tarfile``.
"""

from __future__ import annotations

import hashlib
import io
import tarfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import BinaryIO, cast

from servekit.kit.errors import KitRefused

Tap = Callable[[int, bytes], None]
CHUNK = 1 << 20
MAX_READ = 16 << 20


@dataclass(frozen=True)
class Limits:
    """Bounds on what decompression may produce (anti decompression bomb).

    ``max_total`` caps the bytes one stream may expand to; ``max_ratio`` caps
    expanded/compressed once more than ``ratio_floor`` bytes came out (small
    streams of zeros legitimately compress very well). ``max_entries`` caps tar
    members per layer or kit (and lines of a filesystem manifest); ``max_text``
    caps a text member of a kit (MANIFEST.json, the lists) read into memory.
    """

    max_total: int = 64 << 30
    max_ratio: int = 1000
    ratio_floor: int = 64 << 20
    max_entries: int = 5_000_000
    max_text: int = 1 << 30


class ReadStream(io.RawIOBase):
    """A readable raw stream whose subclasses only write ``read``.

    ``readinto`` (what ``io.BufferedReader`` and ``tarfile`` call) goes through
    ``read``, so a subclass counts, hashes or bounds its bytes in one place.
    """

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def read(self, size: int = -1) -> bytes:
        raise NotImplementedError

    def drain(self) -> None:
        """Read to the end of the stream (so a digest or tap covers all of it)."""
        while self.read(CHUNK):
            pass


class HashingReader(ReadStream):
    """Pass bytes through while feeding a sha256 and counting them.

    With ``hashing=False`` it only counts and tees: used where another reader
    already hashes the very same bytes (an uncompressed layer's blob digest is
    its diffID).
    """

    def __init__(self, inner: BinaryIO, tee: BinaryIO | None = None, hashing: bool = True) -> None:
        super().__init__()
        self._inner = inner
        self._tee = tee
        self._hashing = hashing
        self.sha = hashlib.sha256()
        self.count = 0

    def read(self, size: int = -1) -> bytes:
        data = self._inner.read(size)
        if data:
            if self._hashing:
                self.sha.update(data)
            self.count += len(data)
            if self._tee is not None:
                self._tee.write(data)
        return data

    def hexdigest(self) -> str:
        return self.sha.hexdigest()


class BoundedReader(ReadStream):
    """Refuse a decompressed stream that grows past the limits.

    ``source`` counts the compressed bytes consumed so far; the ratio check
    compares against it.
    """

    def __init__(self, inner: BinaryIO, source: HashingReader, limits: Limits, what: str) -> None:
        super().__init__()
        self._inner = inner
        self._source = source
        self._limits = limits
        self._what = what
        self.count = 0

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            size = CHUNK
        data = self._inner.read(size)
        self.count += len(data)
        self._check()
        return data

    def _check(self) -> None:
        lim = self._limits
        if self.count > lim.max_total:
            raise KitRefused(
                f"{self._what}: expands past {lim.max_total} bytes (decompression bomb?);"
                " raise --max-size if this is legitimate"
            )
        if self.count > lim.ratio_floor and self.count > lim.max_ratio * max(1, self._source.count):
            raise KitRefused(
                f"{self._what}: expands more than {lim.max_ratio}x (decompression bomb?);"
                " raise --max-ratio if this is legitimate"
            )


class SliceReader(ReadStream):
    """A read-only window ``[offset, offset+size)`` of a file (a tar member)."""

    def __init__(self, fh: BinaryIO, offset: int, size: int) -> None:
        super().__init__()
        self._fh = fh
        self._pos = offset
        self._left = size

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0 or size > self._left:
            size = self._left
        if size == 0:
            return b""
        self._fh.seek(self._pos)
        data = self._fh.read(size)
        self._pos += len(data)
        self._left -= len(data)
        return data


class ForwardReader(ReadStream):
    """A stream that tarfile may treat as seekable, as long as it only moves forward.

    ``tarfile``'s streaming mode copies its whole read buffer on every header
    read (quadratic on layers with many small files); its random-access mode
    reads headers and data directly but seeks. Tar members are read in order,
    so every seek tarfile makes is forward: skipped bytes are read and dropped
    (they still pass through the hashing readers underneath). A backward seek
    is refused.
    """

    def __init__(self, inner: BinaryIO, what: str, tap: Tap | None = None) -> None:
        super().__init__()
        self._inner = inner
        self._what = what
        self._pos = 0
        self._tap = tap

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = 0) -> int:
        target = offset if whence == 0 else self._pos + offset
        if whence not in (0, 1) or target < self._pos:
            raise KitRefused(f"{self._what}: the archive needs a backward seek; refusing it")
        while self._pos < target:
            if not self.read(min(CHUNK, target - self._pos)):
                break
        return self._pos

    def read(self, size: int = -1) -> bytes:
        if size is not None and size > MAX_READ:
            raise KitRefused(
                f"{self._what}: a tar header asks to read {size} bytes at once; refusing it"
            )
        data = self._inner.read(size if size is not None and size >= 0 else CHUNK)
        if self._tap is not None and data:
            self._tap(self._pos, data)
        self._pos += len(data)
        return data


def as_binary(stream: object) -> BinaryIO:
    """View one of these readers as the ``BinaryIO`` that tarfile and zstd take."""
    return cast(BinaryIO, stream)


def each_member(tar: tarfile.TarFile, max_entries: int, what: str) -> Iterator[tarfile.TarInfo]:
    """The members front to back, at most ``max_entries``, none kept (bounded memory)."""
    count = 0
    while (member := tar.next()) is not None:
        count += 1
        if count > max_entries:
            raise KitRefused(f"{what}: more than {max_entries} members")
        yield member
        setattr(tar, "members", [])  # noqa: B010 (the list a streaming TarFile accumulates)
