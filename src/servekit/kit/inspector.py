"""``kit inspect``: what a kit or an image holds, without changing anything.

A kit (``.tar.zst`` or unpacked folder) shows its MANIFEST.json; an image (OCI
layout or docker-archive) shows its layers and runtime config. ``--fs`` adds the
image's filesystem manifest, the same lines a kit records.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from servekit.kit.apply import apply_image
from servekit.kit.image import read_image
from servekit.kit.kitdir import open_kit
from servekit.kit.models import KitManifest
from servekit.kit.streams import Limits
from servekit.vocabulary import StrictModel

CONFIG_KEYS = ("Env", "Labels", "Entrypoint", "Cmd", "WorkingDir")


class ImageLayer(StrictModel):
    """One layer as an image lists it."""

    index: int
    diff_id: str
    digest: str | None
    size: int
    media_type: str


class ImageSummary(StrictModel):
    """An image's identity, layers and runtime config."""

    reference: str
    format: str
    name: str | None
    image_id: str
    layers: list[ImageLayer]
    config: dict[str, Any]
    fs_manifest: list[str] | None = None


def is_kit(target: str) -> bool:
    """A kit is a .tar.zst/.tzst file or a folder holding MANIFEST.json."""
    path = Path(target)
    return target.endswith((".tar.zst", ".tzst")) or (path / "MANIFEST.json").is_file()


def is_rootfs(target: str) -> bool:
    """A plain folder that is neither a kit nor an OCI layout: an unpacked rootfs."""
    path = Path(target)
    return path.is_dir() and not is_kit(target) and not (path / "oci-layout").exists()


def rootfs_manifest(root: Path, exclude: list[str]) -> list[str]:
    """Filesystem manifest of an unpacked rootfs (e.g. ``umoci unpack`` output)."""
    from servekit.kit.fsmanifest import sorted_lines, walk_dir

    return sorted_lines(walk_dir(root, exclude))


def inspect_kit(path: Path, limits: Limits | None = None) -> KitManifest:
    """The kit's manifest (members are not checked here: that is verify's job)."""
    with open_kit(path, limits or Limits()) as kit:
        return kit.read_manifest()


def inspect_image(ref: str, with_fs: bool = False, limits: Limits | None = None) -> ImageSummary:
    """Layers and config of an image; with ``with_fs``, also its filesystem manifest."""
    image = read_image(ref)
    section = image.config.get("config") or {}
    return ImageSummary(
        reference=ref,
        format=image.fmt,
        name=image.name,
        image_id=image.image_id,
        layers=[
            ImageLayer(
                index=i + 1,
                diff_id=layer.diff_id,
                digest=layer.digest,
                size=layer.size,
                media_type=layer.media_type,
            )
            for i, layer in enumerate(image.layers)
        ],
        config={k: section[k] for k in CONFIG_KEYS if section.get(k) is not None},
        fs_manifest=apply_image(image, limits or Limits()).lines() if with_fs else None,
    )
