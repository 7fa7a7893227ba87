"""Writing a deterministic layer tar.

Sorted members, a fixed mtime, numeric owners and no user or group names: the
same payload gives the same bytes, hence the same diffID, on any machine.
"""

from __future__ import annotations

import tarfile
from typing import BinaryIO

from servekit.kit.canonical import FIXED_MTIME
from servekit.kit.errors import KitRefused
from servekit.kit.fsmanifest import DIR, FILE, SYMLINK
from servekit.kit.payload import LayerMember


def _info(member: LayerMember) -> tarfile.TarInfo:
    info = tarfile.TarInfo(member.path.lstrip("/") + ("/" if member.kind == DIR else ""))
    info.mode = member.mode
    info.uid, info.gid = member.uid, member.gid
    info.uname = info.gname = ""
    info.mtime = FIXED_MTIME
    info.type = {DIR: tarfile.DIRTYPE, FILE: tarfile.REGTYPE, SYMLINK: tarfile.SYMTYPE}[member.kind]
    info.linkname = member.link
    return info


def write_layer(out: BinaryIO, members: list[LayerMember]) -> None:
    """Write ``members`` (already sorted) as an uncompressed PAX tar."""
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for member in members:
            info = _info(member)
            if member.source is None:
                tar.addfile(info)
                continue
            with member.source.open("rb") as fh:
                fh.seek(0, 2)
                info.size = fh.tell()
                fh.seek(0)
                try:
                    tar.addfile(info, fh)
                except OSError as exc:
                    raise KitRefused(f"payload: {member.source} changed while being read") from exc
