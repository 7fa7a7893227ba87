"""Helpers to unpack a kit, tamper with it and pack it again (tests only)."""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Callable
from pathlib import Path

from servekit.kit.kitarchive import kit_members, pack, write_sidecar
from servekit.kit.kitdir import open_kit
from servekit.kit.streams import Limits


def resum(root: Path) -> None:
    """Rewrite SHA256SUMS so only deeper checks can notice a change."""
    lines = [
        f"{hashlib.sha256((root / rel).read_bytes()).hexdigest()}  {rel}\n"
        for rel in kit_members(root)
        if not rel.endswith("/") and rel != "SHA256SUMS"
    ]
    (root / "SHA256SUMS").write_text("".join(lines))


def edit_kit(
    archive: Path, out: Path, change: Callable[[Path], None], *, sums: bool = True
) -> Path:
    """Copy a kit through ``change(folder)``, re-summing and re-siding it."""
    with open_kit(archive, Limits()) as kit:
        work = out.parent / f"{out.name}.work"
        shutil.copytree(kit.root, work / kit.root.name)
        root = work / kit.root.name
    change(root)
    if sums:
        resum(root)
    with out.open("wb") as fh:
        pack(root, root.name, fh)
    write_sidecar(out)
    return out


def tar_stream(archive: Path) -> bytes:
    """The kit's decompressed tar stream."""
    import io

    import zstandard

    reader = zstandard.ZstdDecompressor().stream_reader(
        io.BytesIO(archive.read_bytes()), read_across_frames=True
    )
    return reader.read()


def write_tar_stream(out: Path, tar: bytes, *, checksum: bool = True) -> Path:
    """Compress a (changed) tar stream as the packer does and give it an honest sidecar."""
    import zstandard

    from servekit.kit.canonical import compress

    data = compress(tar) if checksum else zstandard.ZstdCompressor(level=3).compress(tar)
    out.write_bytes(data)
    write_sidecar(out)
    return out
