"""Writing a kit: the staging folder's side files, then the archive and sidecar.

The staging folder already holds the working layer tars; this adds
MANIFEST.json, config.json, the lists (base diffIDs, filesystem manifest,
payload sums), the generated files and SHA256SUMS, then packs it atomically.
"""

from __future__ import annotations

from pathlib import Path

from servekit.kit.errors import KitRefused
from servekit.kit.kitarchive import kit_members, pack, write_sidecar
from servekit.kit.models import MAX_MANIFEST_BYTES, KitManifest
from servekit.kit.render import render_all
from servekit.vocabulary import atomic_writer, sha256_file


def sha256sum_line(digest: str, path: str) -> str:
    """One line in ``sha256sum`` format."""
    return f"{digest}  {path}\n"


def write_stage(stage: Path, manifest: KitManifest, config: bytes, fs_lines: list[str]) -> None:
    """Write every side file of the kit next to its layers."""
    text = manifest.model_dump_json(indent=2) + "\n"
    if len(text.encode("utf-8")) > MAX_MANIFEST_BYTES:
        raise KitRefused(
            f"kit build: MANIFEST.json would be larger than {MAX_MANIFEST_BYTES >> 20} MiB, "
            "which kit verify refuses; ship fewer or shorter payload paths"
        )
    (stage / "MANIFEST.json").write_text(text)
    (stage / "config.json").write_bytes(config)
    (stage / "base-diffids.txt").write_text("".join(f"{d}\n" for d in manifest.base.diff_ids))
    (stage / "fs-manifest.txt").write_text("".join(f"{line}\n" for line in fs_lines))
    (stage / "payload.sha256").write_text(
        "".join(sha256sum_line(p.sha256, p.path.lstrip("/")) for p in manifest.payload)
    )
    for fname, text in render_all(manifest).items():
        (stage / fname).write_text(text)
    write_sums(stage)


def write_sums(stage: Path) -> None:
    """SHA256SUMS over every other member (sha256sum -c format)."""
    lines = [
        sha256sum_line(sha256_file(str(stage / rel)), rel)
        for rel in kit_members(stage)
        if not rel.endswith("/") and rel != "SHA256SUMS"
    ]
    (stage / "SHA256SUMS").write_text("".join(lines))


def write_archive(out: Path, stage: Path, name: str) -> str:
    """Pack the staging folder into ``out`` atomically; write the sidecar; return the sha256."""
    with atomic_writer(out) as fh:
        pack(stage, name, fh)
    return write_sidecar(out)
