"""The filesystem manifest: an image's applied filesystem as sorted lines.

One line per entry, tab-separated: type, mode, uid, gid, size, path, link
target, sha256 of the content. mtimes are left out on purpose (a rebuild or an
unpack changes them and they do not change what runs). Hardlinks are listed as
the regular file they share content with, so a manifest read from layer tars
and one walked from an unpacked rootfs (``umoci unpack``) compare equal.

:class:`FsState` applies layers in order with OCI semantics: a whiteout
``.wh.NAME`` removes ``NAME`` from lower layers, an opaque marker
``.wh..wh..opq`` hides everything a lower layer put in that directory.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from servekit.kit.errors import KitRefused
from servekit.kit.paths import HEX, ROOT, escape_field, image_path, unescape_field
from servekit.vocabulary import sha256_file, walk_tree

DIR, FILE, SYMLINK, CHAR, BLOCK, FIFO = "d", "f", "l", "c", "b", "p"
KINDS = frozenset((DIR, FILE, SYMLINK, CHAR, BLOCK, FIFO))
NO_SHA = "-"


@dataclass(frozen=True, slots=True)
class Entry:
    """One filesystem entry as the manifest records it."""

    kind: str
    mode: int
    uid: int
    gid: int
    size: int
    path: str
    link: str = ""
    sha256: str = NO_SHA

    def line(self) -> str:
        """The manifest line: fields separated by tabs, paths escaped."""
        return "\t".join(
            (
                self.kind,
                f"{self.mode:04o}",
                str(self.uid),
                str(self.gid),
                str(self.size),
                escape_field(self.path),
                escape_field(self.link) if self.link else "-",
                self.sha256,
            )
        )


class FsState:
    """An image filesystem being assembled layer by layer (metadata + hashes)."""

    def __init__(self) -> None:
        self.entries: dict[str, Entry] = {}
        self._children: dict[str, set[str]] = {ROOT: set()}

    def get(self, path: str) -> Entry | None:
        return self.entries.get(path)

    def remove_tree(self, path: str) -> None:
        """Remove ``path`` and everything under it (iteratively: trees may be deep)."""
        if self.entries.pop(path, None) is not None:
            self._children.get(os.path.dirname(path), set()).discard(path)
        stack = [path]
        while stack:
            for child in self._children.pop(stack.pop(), ()):
                self.entries.pop(child, None)
                stack.append(child)

    def clear_dir(self, path: str) -> None:
        """Remove everything under ``path`` but keep ``path`` (opaque dir)."""
        for child in list(self._children.get(path, ())):
            self.remove_tree(child)

    def put(self, entry: Entry) -> None:
        """Add or replace an entry, creating missing parents as plain dirs."""
        if not entry.path.startswith(ROOT) or entry.path == ROOT:
            raise KitRefused(f"filesystem entry {entry.path[:80]!r} is not an absolute image path")
        old = self.entries.get(entry.path)
        if old is not None and old.kind == DIR and entry.kind != DIR:
            self.remove_tree(entry.path)
        self._ensure_parents(entry.path)
        self._link(entry)

    def _ensure_parents(self, path: str) -> None:
        """Create missing ancestors; stop at the first existing directory.

        Every entry's parent is a directory (this method keeps it so), hence
        an existing directory's ancestors all exist already.
        """
        missing = []
        head = os.path.dirname(path)
        while head not in (ROOT, ""):
            have = self.entries.get(head)
            if have is not None and have.kind == DIR:
                break
            missing.append(head)
            head = os.path.dirname(head)
        for parent in reversed(missing):
            if parent in self.entries:
                self.remove_tree(parent)
            self._link(Entry(DIR, 0o755, 0, 0, 0, parent))  # a parent no layer listed

    def _link(self, entry: Entry) -> None:
        self.entries[entry.path] = entry
        self._children.setdefault(os.path.dirname(entry.path), set()).add(entry.path)
        if entry.kind == DIR:
            self._children.setdefault(entry.path, set())

    def lines(self) -> list[str]:
        return sorted_lines(self.entries.values())


def sorted_lines(entries: Iterable[Entry]) -> list[str]:
    """Manifest lines sorted by path (as UTF-8 bytes)."""
    ordered = sorted(entries, key=lambda e: e.path.encode("utf-8", "surrogateescape"))
    return [e.line() for e in ordered]


def parse_manifest(text: str, max_lines: int | None = None) -> list[str]:
    """Lines of a manifest file (no trailing blank), refused past ``max_lines``."""
    lines = [line for line in text.split("\n") if line]
    if max_lines is not None and len(lines) > max_lines:
        raise KitRefused(f"filesystem manifest has more than {max_lines} lines")
    return lines


def _number(text: str, base: int = 10) -> int:
    """A plain non-negative number (no sign, no spaces, no underscores)."""
    if not text.isascii() or not text.isdigit() or len(text) > 20:
        raise ValueError(text)
    return int(text, base)


def _sha(text: str) -> str:
    if text != NO_SHA and (len(text) != 64 or not HEX.issuperset(text)):
        raise ValueError(text)
    return text


def parse_line(line: str) -> Entry:
    """An :class:`Entry` back from its manifest line (refuses a malformed line)."""
    fields = line.split("\t")
    try:
        kind, mode, uid, gid, size, path, link, sha = fields
        entry = Entry(
            kind,
            _number(mode, 8),
            _number(uid),
            _number(gid),
            _number(size),
            unescape_field(path),
            "" if link == "-" else unescape_field(link),
            _sha(sha),
        )
    except ValueError:
        raise KitRefused(f"filesystem manifest line {line[:80]!r} is malformed") from None
    if kind not in KINDS or entry.mode > 0o7777:
        raise KitRefused(f"filesystem manifest line {line[:80]!r} has a bad type or mode")
    image_path(entry.path, "filesystem manifest")
    if entry.path == ROOT:
        raise KitRefused("filesystem manifest lists the root itself")
    return entry


def diff_lines(expected: list[str], actual: list[str], limit: int = 20) -> list[str]:
    """A short unified-style list of lines only in one side (``-``/``+``)."""
    exp, act = set(expected), set(actual)
    missing = [f"- {line}" for line in expected if line not in act]
    extra = [f"+ {line}" for line in actual if line not in exp]
    return (missing + extra)[:limit]


def _walk_entry(root: Path, path: Path, st: os.stat_result) -> Entry:
    rel = ROOT + path.relative_to(root).as_posix()
    mode = stat.S_IMODE(st.st_mode)
    if stat.S_ISDIR(st.st_mode):
        return Entry(DIR, mode, st.st_uid, st.st_gid, 0, rel)
    if stat.S_ISLNK(st.st_mode):
        return Entry(SYMLINK, 0o777, st.st_uid, st.st_gid, 0, rel, os.readlink(path))
    if stat.S_ISREG(st.st_mode):
        return Entry(FILE, mode, st.st_uid, st.st_gid, st.st_size, rel, "", sha256_file(str(path)))
    kind = {stat.S_IFCHR: CHAR, stat.S_IFBLK: BLOCK, stat.S_IFIFO: FIFO}.get(
        stat.S_IFMT(st.st_mode), "?"
    )
    link = f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}" if kind in (CHAR, BLOCK) else ""
    return Entry(kind, mode, st.st_uid, st.st_gid, 0, rel, link)


def walk_dir(root: Path, exclude: Iterable[str] = ()) -> Iterator[Entry]:
    """Entries of an unpacked rootfs on disk (for comparing with ``umoci unpack``).

    ``exclude`` names image paths (``/proc``) whose subtrees are skipped, as one
    does when walking a live container. Mount points (a folder on another
    device than ``root``: /proc, /sys, /dev in a live container) are skipped
    with their subtrees, as ``find -xdev`` does, so a walk never reads a
    pseudo-file such as /proc/kcore.
    """
    skip = set(exclude)
    device = root.stat().st_dev
    for dirpath, dirnames, filenames in walk_tree(root):
        base = Path(dirpath)
        for name in sorted(dirnames) + sorted(filenames):
            path = base / name
            st = path.lstat()
            entry = None if st.st_dev != device else _walk_entry(root, path, st)
            if entry is None or entry.path in skip:
                if name in dirnames:
                    dirnames.remove(name)
                continue
            yield entry
