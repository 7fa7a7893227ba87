"""The kit file itself: a deterministic ``.tar.zst`` and its ``.sha256`` sidecar.

Packing sorts members, fixes mtimes and owners and compresses with one zstd
level and no threads, so the same kit folder always gives the same bytes.
Unpacking accepts only directories and regular files under one top folder and
enforces the decompression limits: nothing in a kit can point outside it.
"""

from __future__ import annotations

import os
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import zstandard

from servekit.kit.canonical import (
    ENCODING,
    CanonicalTap,
    member_info,
    zstd_compressor,
    zstd_frame_problems,
)
from servekit.kit.errors import KitRefused
from servekit.kit.paths import ROOT, member_path
from servekit.kit.streams import (
    CHUNK,
    BoundedReader,
    ForwardReader,
    HashingReader,
    Limits,
    as_binary,
    each_member,
)
from servekit.vocabulary import sha256_file, walk_tree

MAX_SIDECAR = 4096


@dataclass(frozen=True)
class Unpacked:
    """An unpacked kit: its folder, the archive's sha256, and format findings.

    ``problems`` are departures from the canonical form (no zstd checksum, a
    non-canonical tar byte) that leave the members readable: ``kit verify``
    reports them, the other commands rely on the member checks.
    """

    root: Path
    sha256: str
    problems: list[str] = field(default_factory=list)


def kit_members(root: Path) -> list[str]:
    """Relative paths of every file and folder in a kit folder, sorted."""
    out = []
    for dirpath, dirnames, filenames in walk_tree(root):
        base = Path(dirpath)
        out += [(base / n).relative_to(root).as_posix() + "/" for n in dirnames]
        out += [(base / n).relative_to(root).as_posix() for n in filenames]
    return sorted(out)


def pack(root: Path, name: str, dest: BinaryIO) -> None:
    """Write folder ``root`` as ``name/...`` into a zstd-compressed tar."""
    with (
        zstd_compressor().stream_writer(dest, closefd=False) as zout,
        tarfile.open(fileobj=zout, mode="w", format=tarfile.PAX_FORMAT, encoding=ENCODING) as tar,
    ):
        tar.addfile(member_info(name + "/", True))
        for rel in kit_members(root):
            path = root / rel
            if rel.endswith("/"):
                tar.addfile(member_info(f"{name}/{rel}", True))
                continue
            with path.open("rb") as fh:
                tar.addfile(member_info(f"{name}/{rel}", False, path.stat().st_size), fh)


def write_sidecar(archive: Path) -> str:
    """Write ``ARCHIVE.sha256`` (sha256sum format) and return the digest."""
    from servekit.vocabulary import atomic_write_text

    digest = sha256_file(str(archive))
    atomic_write_text(archive.with_name(archive.name + ".sha256"), f"{digest}  {archive.name}\n")
    return digest


def read_sidecar(archive: Path) -> str | None:
    """The digest a sidecar records, or None when there is no sidecar."""
    side = archive.with_name(archive.name + ".sha256")
    if not side.is_file():
        return None
    with side.open("rb") as fh:
        text = fh.read(MAX_SIDECAR).decode("utf-8", "replace").split()
    return text[0].lower() if text else ""


def _extract_file(tar: tarfile.TarFile, member: tarfile.TarInfo, target: Path, what: str) -> None:
    fh = tar.extractfile(member)
    if fh is None:
        raise KitRefused(f"{what}: member {member.name[:80]!r} has no content")
    got = 0
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("wb") as out:
        while block := fh.read(CHUNK):
            out.write(block)
            got += len(block)
    if got != member.size:
        raise KitRefused(
            f"{what}: member {member.name[:80]!r}: header says {member.size} bytes,"
            f" archive holds {got}"
        )


def unpack(archive: Path, dest: Path, limits: Limits) -> Path:
    """Unpack a kit into ``dest`` (a fresh folder) and return the kit folder."""
    return unpack_checked(archive, dest, limits).root


def unpack_checked(archive: Path, dest: Path, limits: Limits) -> Unpacked:
    """Unpack like :func:`unpack`; also hash the archive and check its canonical form.

    The decompressed stream is read to its very end, so zstd verifies its
    content checksum and nothing after the tar's end goes unread.
    """
    what = f"kit {archive.name}"
    tap = CanonicalTap()
    with archive.open("rb") as raw:
        problems = zstd_frame_problems(as_binary(raw), os.fstat(raw.fileno()).st_size)
        raw.seek(0)
        comp = HashingReader(as_binary(raw))
        stream = zstandard.ZstdDecompressor().stream_reader(
            as_binary(comp), read_across_frames=True
        )
        bounded = as_binary(BoundedReader(stream, comp, limits, what))
        reader = ForwardReader(bounded, what, tap)
        try:
            with tarfile.TarFile(fileobj=as_binary(reader), mode="r", encoding=ENCODING) as tar:
                top, last_size = _extract_all(tar, dest, limits, what, tap)
            reader.drain()
            tap.expect_end(last_size)
            comp.drain()
        except (tarfile.TarError, EOFError, zstandard.ZstdError, OSError) as exc:
            if isinstance(exc, KitRefused):
                raise
            raise KitRefused(f"{what}: not a readable .tar.zst ({exc})") from exc
    if top is None:
        raise KitRefused(f"{what}: the archive is empty")
    if tap.problem is not None:
        problems.append(tap.problem)
    return Unpacked(dest / top, comp.hexdigest(), problems)


def _extract_all(
    tar: tarfile.TarFile, dest: Path, limits: Limits, what: str, tap: CanonicalTap
) -> tuple[str | None, int]:
    """Extract every member (files and folders only).

    Returns the top folder name and the last member's size (for the end check).
    """
    top: str | None = None
    seen: set[str] = set()
    previous = 0
    for member in each_member(tar, limits.max_entries, what):
        path = _member_target(member, top, seen, limits, what)
        tap.expect_header(member, previous, _order_key(path, member.isdir()))
        top = path.split("/")[1]
        if member.isdir():
            (dest / path[1:]).mkdir(parents=True, exist_ok=True)
        else:
            _extract_file(tar, member, dest / path[1:], what)
        previous = member.size
    return top, previous


def _order_key(path: str, is_dir: bool) -> str:
    """A member's place in the packer's order: its path in the kit, folders with '/'."""
    rel = path.split("/", 2)[2] if path.count("/") > 1 else ""
    return rel + "/" if is_dir and rel else rel


def _member_target(
    member: tarfile.TarInfo, top: str | None, seen: set[str], limits: Limits, what: str
) -> str:
    """The member's canonical path once it passes the kit archive's rules."""
    path = member_path(member.name, what)
    if path == ROOT:
        raise KitRefused(f"{what}: member {member.name[:80]!r} names the root")
    if top is not None and path.split("/")[1] != top:
        raise KitRefused(f"{what}: member {path[:80]!r} is outside the kit folder {top!r}")
    if path in seen:
        raise KitRefused(f"{what}: member {path[:80]!r} appears twice")
    seen.add(path)
    if member.issparse() or not (member.isdir() or member.isreg()):
        raise KitRefused(
            f"{what}: member {member.name[:80]!r} is a link or special file;"
            " kits hold only files and folders"
        )
    if member.size < 0 or member.size > limits.max_total:
        raise KitRefused(
            f"{what}: member {member.name[:80]!r} claims {member.size} bytes: expands past"
            f" {limits.max_total} bytes; raise --max-size if this is legitimate"
        )
    return path
