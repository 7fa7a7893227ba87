"""The kit tar's canonical form, checked byte for byte while the kit unpacks.

A kit is packed deterministically (:func:`servekit.kit.kitarchive.pack`): each
header is a function of the member's name, type and size, padding is zeros,
and the stream ends with two zero blocks padded to a 10 KiB record. Member
content is covered by SHA256SUMS and the layer digests; everything else in the
tar stream (headers, padding, the end) is covered here: :class:`CanonicalTap`
sees every byte outside member content and compares it with what the packer
writes for the same members. So every changed byte of the tar stream is caught
by one or the other, padding included, without hashing the stream again.
"""

from __future__ import annotations

import functools
import io
import tarfile
from typing import BinaryIO

import zstandard

BLOCK = tarfile.BLOCKSIZE
RECORD = tarfile.RECORDSIZE
ENCODING = "utf-8"
EXECUTABLE = (".sh",)
FIXED_MTIME = 0
MAX_PENDING = 1 << 20
ZSTD_BLOCK_RESERVED = 3
ZSTD_HEADER_MAX = 18
ZSTD_LEVEL = 10


def zstd_compressor() -> zstandard.ZstdCompressor:
    """The compressor kits are packed with: one level, a content checksum, no threads."""
    return zstandard.ZstdCompressor(level=ZSTD_LEVEL, write_checksum=True, threads=0)


def compress(data: bytes) -> bytes:
    """Compress a tar stream exactly as the packer streams it (no content size in the header)."""
    buf = io.BytesIO()
    with zstd_compressor().stream_writer(buf, closefd=False) as out:
        out.write(data)
    return buf.getvalue()


@functools.cache
def frame_header() -> bytes:
    """The zstd frame header the packer writes (the same for every non-empty kit)."""
    data = compress(b"kit")
    return data[: zstandard.frame_header_size(data)]


def member_info(name: str, is_dir: bool, size: int = 0) -> tarfile.TarInfo:
    """The header the packer writes for a kit member (mode, owner, mtime fixed)."""
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE if is_dir else tarfile.REGTYPE
    info.mode = 0o755 if is_dir or name.endswith(EXECUTABLE) else 0o644
    info.size = size
    info.mtime = FIXED_MTIME
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def padding(size: int) -> int:
    """Zero bytes after ``size`` bytes of content, up to the next block."""
    return -size % BLOCK


class CanonicalTap:
    """Collect the tar stream's bytes outside member content and compare them.

    Called with every ``(offset, bytes)`` the tar reader consumes. Bytes inside
    the current member's content window are skipped (their digests are checked
    elsewhere); the rest is held until :meth:`expect_header` or
    :meth:`expect_end` says what the packer would have written there.
    """

    def __init__(self) -> None:
        self._pending = bytearray()
        self._window = (0, 0)
        self._overflow = False
        self._last_end = 0
        self._last_key: str | None = None
        self.problem: str | None = None

    def __call__(self, offset: int, data: bytes) -> None:
        start, end = self._window
        stop = offset + len(data)
        if stop <= start or offset >= end:
            self._keep(data)
            return
        if offset < start:
            self._keep(data[: start - offset])
        if stop > end:
            self._keep(data[end - offset :])

    def _keep(self, data: bytes) -> None:
        if len(self._pending) + len(data) > MAX_PENDING:
            self._overflow = True
            return
        self._pending += data

    def _compare(self, want: bytes, where: str) -> None:
        have = bytes(self._pending)
        self._pending.clear()
        if self.problem is not None:
            return
        if self._overflow or have != want:
            at = next((i for i, (a, b) in enumerate(zip(have, want, strict=False)) if a != b), None)
            offset = self._last_end + (at if at is not None else min(len(have), len(want)))
            self.problem = (
                f"tar stream byte {offset} ({where}) differs from the canonical packing of the"
                " same members: a changed header field, padding or trailing data"
            )
        self._overflow = False

    def expect_header(self, member: tarfile.TarInfo, previous_size: int, key: str) -> None:
        """The previous member's padding and this member's header must be canonical.

        ``key`` is the member's place in the packer's order (its path inside the
        kit folder, folders with a trailing ``/``): keys must strictly increase.
        """
        if self.problem is None and self._last_key is not None and key <= self._last_key:
            self.problem = (
                f"member {member.name[:80]!r} is out of the packer's sorted order"
                " (members were reordered)"
            )
        self._last_key = key
        header = member_info(member.name, member.isdir(), member.size)
        want = b"\0" * padding(previous_size) + header.tobuf(
            tarfile.PAX_FORMAT, ENCODING, "surrogateescape"
        )
        self._compare(want, f"before member {member.name[:80]!r}")
        self._window = (member.offset_data, member.offset_data + member.size)
        self._last_end = member.offset_data + member.size

    def expect_end(self, previous_size: int) -> None:
        """After the last member: its padding, two zero blocks, zeros to a full record."""
        content_end = self._last_end + padding(previous_size)
        total = content_end + 2 * BLOCK
        total += -total % RECORD
        self._compare(b"\0" * (total - self._last_end), "after the last member")


def zstd_frame_problems(fh: BinaryIO, file_size: int) -> list[str]:
    """A kit is exactly one zstd frame, with a content checksum.

    Walks the frame's block headers (3 bytes each, no decompression) to find
    where the frame ends: anything after it (another frame, a skippable frame,
    garbage) is a problem, as is a frame without a checksum or a frame header
    other than the packer's (its window size is not covered by the content
    checksum). Malformed frames are left to the decompressor, which names them.
    """
    head = fh.read(ZSTD_HEADER_MAX)
    try:
        pos = zstandard.frame_header_size(head)
        checksum = zstandard.get_frame_parameters(head).has_checksum
    except zstandard.ZstdError:
        return []
    last = False
    while not last and pos < file_size:
        fh.seek(pos)
        header = int.from_bytes(fh.read(3), "little")
        last, kind, size = bool(header & 1), (header >> 1) & 3, header >> 3
        if kind == ZSTD_BLOCK_RESERVED:
            return []
        pos += 3 + (1 if kind == 1 else size)
    problems = [] if checksum else ["the zstd frame has no content checksum (kits have one)"]
    if checksum and head[: zstandard.frame_header_size(head)] != frame_header():
        problems.append(
            "the zstd frame header differs from the one servekit packs with"
            f" (level {ZSTD_LEVEL}, streamed, with a checksum)"
        )
    end = pos + (4 if checksum else 0)
    if last and end < file_size:
        problems.append(
            f"{file_size - end} bytes follow the zstd frame (a kit is exactly one frame)"
        )
    return problems
