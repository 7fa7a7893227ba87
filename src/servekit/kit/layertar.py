"""Reading one image layer: digests, entries, whiteouts, and safety rules.

:func:`scan_layer` streams a layer blob once (gzip, zstd or plain tar),
computing the blob sha256 and the diffID (sha256 of the uncompressed tar) while
applying the members to an :class:`~servekit.kit.fsmanifest.FsState`. It refuses
hostile members; ``strict`` adds the rules for layers a kit ships (no device
nodes or FIFOs, no relative symlinks that climb out of the root), which base
images from the wild may legitimately break.
"""

from __future__ import annotations

import hashlib
import io
import posixpath
import tarfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import BinaryIO

from servekit.kit.errors import KitRefused
from servekit.kit.fsmanifest import BLOCK, CHAR, DIR, FIFO, FILE, SYMLINK, Entry, FsState
from servekit.kit.imagetypes import OCI_LAYER_GZIP, OCI_LAYER_ZSTD, sniff_media_type
from servekit.kit.paths import (
    MAX_PATH,
    OPAQUE,
    ROOT,
    WHITEOUT_PREFIX,
    hardlink_target,
    member_path,
    parents,
    symlink_escapes,
)
from servekit.kit.streams import (
    CHUNK,
    BoundedReader,
    ForwardReader,
    HashingReader,
    Limits,
    as_binary,
    each_member,
)

MAX_CAPTURE = 16 << 20
MAX_CAPTURE_TOTAL = 512 << 20


@dataclass
class LayerScan:
    """What one pass over a layer found."""

    blob_sha256: str = ""
    diff_id: str = ""
    compressed_size: int = 0
    raw_size: int = 0
    entries: int = 0
    whiteouts: list[str] = field(default_factory=list)
    opaque_dirs: list[str] = field(default_factory=list)
    files: dict[str, Entry] = field(default_factory=dict)
    captured: dict[str, bytes] = field(default_factory=dict)
    too_large: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ScanOptions:
    """How to read a layer: safety level, limits, what content to keep, a copy."""

    what: str
    strict: bool = False
    limits: Limits = field(default_factory=Limits)
    capture: Callable[[str, bytes], bool] | None = None
    tee: BinaryIO | None = None


def _decompressor(buffered: BinaryIO) -> BinaryIO:
    kind = sniff_media_type(buffered.peek(4)[:4])  # type: ignore[attr-defined]
    if kind == OCI_LAYER_GZIP:
        import gzip

        return as_binary(gzip.GzipFile(fileobj=buffered, mode="rb"))
    if kind == OCI_LAYER_ZSTD:
        import zstandard

        reader: BinaryIO = zstandard.ZstdDecompressor().stream_reader(
            buffered, read_across_frames=True
        )
        return reader
    return buffered


def scan_layer(blob: BinaryIO, state: FsState, opts: ScanOptions) -> LayerScan:
    """Apply one layer blob to ``state`` and return its digests and counts."""
    comp = HashingReader(blob)
    buffered = as_binary(io.BufferedReader(comp, CHUNK))
    plain = _decompressor(buffered)
    bounded = BoundedReader(plain, comp, opts.limits, opts.what)
    diff = HashingReader(as_binary(bounded), tee=opts.tee, hashing=plain is not buffered)
    scan = LayerScan()
    applier = _Applier(state, opts, scan)
    try:
        forward = ForwardReader(as_binary(diff), opts.what)
        with tarfile.TarFile(fileobj=as_binary(forward), mode="r") as tar:
            applier.read_all(tar)
        diff.drain()
        comp.drain()
    except (tarfile.TarError, EOFError, OSError, ValueError) as exc:
        if isinstance(exc, KitRefused):
            raise
        raise KitRefused(f"{opts.what}: not a readable layer tar ({exc})") from exc
    applier.commit()
    scan.blob_sha256 = "sha256:" + comp.hexdigest()
    scan.diff_id = scan.blob_sha256 if plain is buffered else "sha256:" + diff.hexdigest()
    scan.compressed_size = comp.count
    scan.raw_size = diff.count
    return scan


class _Applier:
    """Collects a layer's members, then applies them with whiteout semantics."""

    def __init__(self, state: FsState, opts: ScanOptions, scan: LayerScan) -> None:
        self.state = state
        self.opts = opts
        self.scan = scan
        self.added: dict[str, Entry] = {}
        self.captured_bytes = 0
        self.order: list[str] = []

    def read_all(self, tar: tarfile.TarFile) -> None:
        for member in each_member(tar, self.opts.limits.max_entries, self.opts.what):
            self.take(tar, member)

    def take(self, tar: tarfile.TarFile, member: tarfile.TarInfo) -> None:
        what = self.opts.what
        path = member_path(member.name, what)
        if path == ROOT:
            return
        self._refuse_through_symlink(path)
        name = posixpath.basename(path)
        if name == OPAQUE:
            self.scan.opaque_dirs.append(posixpath.dirname(path))
            return
        if name.startswith(WHITEOUT_PREFIX):
            hidden = name.removeprefix(WHITEOUT_PREFIX)
            if hidden in ("", ".", ".."):
                raise KitRefused(f"{self.opts.what}: whiteout {path!r} names no entry")
            self.scan.whiteouts.append(posixpath.join(posixpath.dirname(path), hidden))
            return
        entry = self._entry(tar, member, path)
        self.scan.entries += 1
        if path not in self.added:
            self.order.append(path)
        self.added[path] = entry
        if entry.kind == FILE:
            self.scan.files[path] = entry

    def _refuse_through_symlink(self, path: str) -> None:
        for parent in parents(path):
            entry = self.added.get(parent) or self.state.get(parent)
            if entry is not None and entry.kind == SYMLINK:
                raise KitRefused(
                    f"{self.opts.what}: member {path!r} passes through symlink {parent!r};"
                    " refusing a symlink escape"
                )

    def _entry(self, tar: tarfile.TarFile, m: tarfile.TarInfo, path: str) -> Entry:
        mode = m.mode & 0o7777
        _refuse_odd(m, path, self.opts)
        if m.isreg():
            return self._file(tar, m, path, mode)
        if m.isdir():
            return Entry(DIR, mode, m.uid, m.gid, 0, path)
        if m.issym():
            if self.opts.strict and symlink_escapes(path, m.linkname):
                raise KitRefused(
                    f"{self.opts.what}: symlink {path!r} -> {m.linkname!r} climbs out of the image root"
                )
            return Entry(SYMLINK, 0o777, m.uid, m.gid, 0, path, m.linkname)
        if m.islnk():
            return self._hardlink(m, path)
        return self._special(m, path, mode)

    def _file(self, tar: tarfile.TarFile, m: tarfile.TarInfo, path: str, mode: int) -> Entry:
        fh = tar.extractfile(m)
        if fh is None:
            raise KitRefused(f"{self.opts.what}: member {path!r} has no readable content")
        sha = hashlib.sha256()
        block = fh.read(CHUNK)
        keep = self._keep(path, m.size, block)
        got = 0
        kept: list[bytes] = []
        while block:
            sha.update(block)
            got += len(block)
            if keep:
                kept.append(block)
            block = fh.read(CHUNK)
        if got != m.size:
            raise KitRefused(
                f"{self.opts.what}: member {path!r}: header says {m.size} bytes, archive holds {got}"
            )
        if keep:
            self.scan.captured[path] = b"".join(kept)
            self.captured_bytes += got
        return Entry(FILE, mode, m.uid, m.gid, m.size, path, "", sha.hexdigest())

    def _keep(self, path: str, size: int, head: bytes) -> bool:
        """Whether to keep a file's bytes for verify; too large ones are listed instead."""
        if self.opts.capture is None or not self.opts.capture(path, head):
            return False
        if size > MAX_CAPTURE or self.captured_bytes + size > MAX_CAPTURE_TOTAL:
            self.scan.too_large.append(path)
            return False
        return True

    def _hardlink(self, m: tarfile.TarInfo, path: str) -> Entry:
        target = hardlink_target(m.linkname, self.opts.what)
        entry = self.added.get(target) or self.state.get(target)
        if entry is None or entry.kind != FILE:
            raise KitRefused(
                f"{self.opts.what}: hardlink {path!r} -> {m.linkname!r} names no regular file"
                " inside the image; refusing a hardlink escape"
            )
        return Entry(FILE, entry.mode, entry.uid, entry.gid, entry.size, path, "", entry.sha256)

    def _special(self, m: tarfile.TarInfo, path: str, mode: int) -> Entry:
        if m.ischr() or m.isblk():
            if self.opts.strict:
                raise KitRefused(
                    f"{self.opts.what}: device node {path!r} is not allowed in a kit layer"
                )
            kind = CHAR if m.ischr() else BLOCK
            return Entry(kind, mode, m.uid, m.gid, 0, path, f"{m.devmajor}:{m.devminor}")
        if m.isfifo():
            if self.opts.strict:
                raise KitRefused(f"{self.opts.what}: FIFO {path!r} is not allowed in a kit layer")
            return Entry(FIFO, mode, m.uid, m.gid, 0, path)
        raise KitRefused(
            f"{self.opts.what}: member {path!r} has an unsupported tar type {m.type!r}"
        )

    def commit(self) -> None:
        """Apply whiteouts and opaque dirs to lower layers, then this layer's entries."""
        for directory in self.scan.opaque_dirs:
            self.state.clear_dir(directory)
        for path in self.scan.whiteouts:
            self.state.remove_tree(path)
        for path in self.order:
            self.state.put(self.added[path])


def _refuse_odd(m: tarfile.TarInfo, path: str, opts: ScanOptions) -> None:
    """Refuse what no layer needs and what makes reading unbounded.

    A sparse member expands to its "real size" without reading archive bytes,
    so its header alone could ask for terabytes of zeros; negative or
    over-limit sizes and over-long link targets come only from damaged headers.
    """
    if m.issparse():
        raise KitRefused(f"{opts.what}: member {path!r} is a sparse file; layers do not use them")
    if m.size < 0 or m.size > opts.limits.max_total:
        raise KitRefused(
            f"{opts.what}: member {path!r} claims {m.size} bytes: expands past"
            f" {opts.limits.max_total} bytes; raise --max-size if this is legitimate"
        )
    if len(m.linkname) > MAX_PATH or "\x00" in m.linkname:
        raise KitRefused(f"{opts.what}: member {path!r} has a malformed link target")


@contextmanager
def open_plain(blob: BinaryIO, limits: Limits, what: str) -> Iterator[BinaryIO]:
    """A layer blob as its uncompressed tar stream, within ``limits``."""
    comp = HashingReader(blob)
    buffered = as_binary(io.BufferedReader(comp, CHUNK))
    yield as_binary(BoundedReader(_decompressor(buffered), comp, limits, what))
