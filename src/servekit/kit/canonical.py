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

import tarfile

BLOCK = tarfile.BLOCKSIZE
RECORD = tarfile.RECORDSIZE
ENCODING = "utf-8"
EXECUTABLE = (".sh",)
FIXED_MTIME = 0
MAX_PENDING = 1 << 20


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


def header_bytes(name: str, is_dir: bool, size: int) -> bytes:
    """The exact header block(s) :func:`member_info` packs to."""
    return member_info(name, is_dir, size).tobuf(tarfile.PAX_FORMAT, ENCODING, "surrogateescape")


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

    def expect_header(self, member: tarfile.TarInfo, previous_size: int) -> None:
        """The previous member's padding and this member's header must be canonical."""
        want = b"\0" * padding(previous_size) + header_bytes(
            member.name, member.isdir(), member.size
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
