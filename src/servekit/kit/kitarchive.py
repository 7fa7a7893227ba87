"""The kit file itself: a deterministic ``.tar.zst`` and its ``.sha256`` sidecar.

Packing sorts members, fixes mtimes and owners and compresses with one zstd
level and no threads, so the same kit folder always gives the same bytes.
Unpacking accepts only directories and regular files under one top folder and
enforces the decompression limits: nothing in a kit can point outside it.
"""

from __future__ import annotations

import os
import tarfile
from pathlib import Path
from typing import BinaryIO

import zstandard

from servekit.kit.errors import KitRefused
from servekit.kit.paths import ROOT, member_path
from servekit.kit.streams import (
    CHUNK,
    BoundedReader,
    HashingReader,
    Limits,
    as_binary,
    forget_members,
    open_tar,
)

ZSTD_LEVEL = 10
FIXED_MTIME = 0
EXECUTABLE = (".sh",)


def _info(name: str, is_dir: bool, size: int = 0) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE if is_dir else tarfile.REGTYPE
    info.mode = 0o755 if is_dir or name.endswith(EXECUTABLE) else 0o644
    info.size = size
    info.mtime = FIXED_MTIME
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def kit_members(root: Path) -> list[str]:
    """Relative paths of every file and folder in a kit folder, sorted."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        base = Path(dirpath)
        out += [(base / n).relative_to(root).as_posix() + "/" for n in dirnames]
        out += [(base / n).relative_to(root).as_posix() for n in filenames]
    return sorted(out)


def pack(root: Path, name: str, dest: BinaryIO) -> None:
    """Write folder ``root`` as ``name/...`` into a zstd-compressed tar."""
    cctx = zstandard.ZstdCompressor(level=ZSTD_LEVEL, write_checksum=True, threads=0)
    with (
        cctx.stream_writer(dest, closefd=False) as zout,
        tarfile.open(fileobj=zout, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        tar.addfile(_info(name + "/", True))
        for rel in kit_members(root):
            path = root / rel
            if rel.endswith("/"):
                tar.addfile(_info(f"{name}/{rel}", True))
                continue
            with path.open("rb") as fh:
                tar.addfile(_info(f"{name}/{rel}", False, path.stat().st_size), fh)


def write_sidecar(archive: Path) -> str:
    """Write ``ARCHIVE.sha256`` (sha256sum format) and return the digest."""
    from servekit.fsutil import atomic_write_text
    from servekit.kit.streams import sha256_file

    digest = sha256_file(str(archive))
    atomic_write_text(archive.with_name(archive.name + ".sha256"), f"{digest}  {archive.name}\n")
    return digest


def read_sidecar(archive: Path) -> str | None:
    """The digest a sidecar records, or None when there is no sidecar."""
    side = archive.with_name(archive.name + ".sha256")
    if not side.is_file():
        return None
    text = side.read_text(encoding="utf-8", errors="replace").split()
    return text[0].lower() if text else ""


def _top(path: str, top: str | None, what: str) -> str:
    head = path.split("/")[1]
    if top is not None and head != top:
        raise KitRefused(f"{what}: member {path!r} is outside the kit folder {top!r}")
    return head


def _extract_file(tar: tarfile.TarFile, member: tarfile.TarInfo, target: Path, what: str) -> None:
    fh = tar.extractfile(member)
    if fh is None:
        raise KitRefused(f"{what}: member {member.name!r} has no content")
    got = 0
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("wb") as out:
        while block := fh.read(CHUNK):
            out.write(block)
            got += len(block)
    if got != member.size:
        raise KitRefused(
            f"{what}: member {member.name!r}: header says {member.size} bytes, archive holds {got}"
        )


def unpack(archive: Path, dest: Path, limits: Limits) -> Path:
    """Unpack a kit into ``dest`` (a fresh folder) and return the kit folder."""
    return unpack_hashed(archive, dest, limits)[0]


def unpack_hashed(archive: Path, dest: Path, limits: Limits) -> tuple[Path, str]:
    """Unpack like :func:`unpack`; also return the archive's sha256 (one read)."""
    what = f"kit {archive.name}"
    with archive.open("rb") as raw:
        comp = HashingReader(as_binary(raw))
        stream = zstandard.ZstdDecompressor().stream_reader(
            as_binary(comp), read_across_frames=True
        )
        bounded = as_binary(BoundedReader(stream, comp, limits, what))
        try:
            with open_tar(bounded, what) as tar:
                top = _extract_all(tar, dest, limits, what)
            comp.drain()
        except (tarfile.TarError, EOFError, zstandard.ZstdError, OSError) as exc:
            if isinstance(exc, KitRefused):
                raise
            raise KitRefused(f"{what}: not a readable .tar.zst ({exc})") from exc
    if top is None:
        raise KitRefused(f"{what}: the archive is empty")
    return dest / top, comp.hexdigest()


def _extract_all(tar: tarfile.TarFile, dest: Path, limits: Limits, what: str) -> str | None:
    """Extract every member (files and folders only); return the top folder name."""
    top: str | None = None
    seen: set[str] = set()
    while (member := tar.next()) is not None:
        if len(seen) >= limits.max_entries:
            raise KitRefused(f"{what}: more than {limits.max_entries} members")
        path = member_path(member.name, what)
        if path == ROOT:
            raise KitRefused(f"{what}: member {member.name!r} names the root")
        top = _top(path, top, what)
        if path in seen:
            raise KitRefused(f"{what}: member {path!r} appears twice")
        seen.add(path)
        if member.isdir():
            (dest / path[1:]).mkdir(parents=True, exist_ok=True)
        elif member.isreg():
            _extract_file(tar, member, dest / path[1:], what)
        else:
            raise KitRefused(
                f"{what}: member {member.name!r} is a link or special file;"
                " kits hold only files and folders"
            )
        forget_members(tar)
    return top
