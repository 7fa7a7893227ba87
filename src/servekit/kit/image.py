"""An image as servekit sees it: one config blob and an ordered list of layers.

Both on-disk formats (OCI image layout, docker-archive tarball) are read into
:class:`Image`, whose layers open lazily as byte streams, so a 1 GiB base is
never held in memory. References follow skopeo's spelling:
``oci:DIR[:REF]``, ``docker-archive:FILE[:REPO:TAG]`` or a bare path.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Literal

from servekit.kit.errors import KitRefused

Format = Literal["oci", "docker-archive"]
DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER_TAR = "application/vnd.oci.image.layer.v1.tar"
OCI_LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
OCI_LAYER_ZSTD = "application/vnd.oci.image.layer.v1.tar+zstd"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
REF_NAME = "org.opencontainers.image.ref.name"

_OCI_LAYER_TYPES = {
    "application/vnd.docker.image.rootfs.diff.tar": OCI_LAYER_TAR,
    "application/vnd.docker.image.rootfs.diff.tar.gzip": OCI_LAYER_GZIP,
    OCI_LAYER_TAR: OCI_LAYER_TAR,
    OCI_LAYER_GZIP: OCI_LAYER_GZIP,
    OCI_LAYER_ZSTD: OCI_LAYER_ZSTD,
}

Opener = Callable[[], AbstractContextManager[BinaryIO]]


@dataclass(frozen=True)
class LayerBlob:
    """One layer as stored: how to open it, and what it claims to be.

    ``digest`` is the blob digest (OCI) or ``None`` when the format records
    none (docker-archive, where the blob is the uncompressed tar).
    """

    opener: Opener
    size: int
    media_type: str
    digest: str | None
    diff_id: str


@dataclass(frozen=True)
class Image:
    """A parsed image: reference, config bytes and layers in order."""

    reference: str
    fmt: Format
    name: str | None
    config_bytes: bytes
    layers: tuple[LayerBlob, ...]

    @property
    def config(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.config_bytes)
        return data

    @property
    def image_id(self) -> str:
        return "sha256:" + hashlib.sha256(self.config_bytes).hexdigest()

    @property
    def diff_ids(self) -> list[str]:
        return [layer.diff_id for layer in self.layers]


def oci_layer_type(media_type: str) -> str:
    """The OCI media type for a layer media type (docker names mapped)."""
    if media_type not in _OCI_LAYER_TYPES:
        raise KitRefused(f"layer media type {media_type!r} is not supported")
    return _OCI_LAYER_TYPES[media_type]


def sniff_media_type(head: bytes) -> str:
    """The layer media type its first bytes show (docker-archive records none)."""
    if head.startswith(b"\x1f\x8b"):
        return OCI_LAYER_GZIP
    if head.startswith(b"\x28\xb5\x2f\xfd"):
        return OCI_LAYER_ZSTD
    return OCI_LAYER_TAR


def check_digest(digest: object, what: str) -> str:
    """Accept only ``sha256:<64 hex>`` (also keeps blob paths inside blobs/)."""
    if not isinstance(digest, str) or not DIGEST_RE.match(digest):
        raise KitRefused(f"{what}: digest {digest!r} is not sha256:<64 hex digits>")
    return digest


def parse_config(data: bytes, what: str) -> list[str]:
    """The diffIDs listed by an image config, validated."""
    try:
        config = json.loads(data)
        diff_ids = config["rootfs"]["diff_ids"]
    except (ValueError, KeyError, TypeError) as exc:
        raise KitRefused(f"{what}: image config has no rootfs.diff_ids ({exc})") from exc
    if not isinstance(diff_ids, list):
        raise KitRefused(f"{what}: rootfs.diff_ids is not a list")
    return [check_digest(d, f"{what}: rootfs.diff_ids") for d in diff_ids]


def split_reference(ref: str) -> tuple[Format | None, Path, str | None]:
    """Split ``[transport:]PATH[:NAME]`` at the first prefix that exists."""
    fmt: Format | None = None
    for prefix in ("oci:", "docker-archive:"):
        if ref.startswith(prefix):
            fmt = prefix[:-1]  # type: ignore[assignment]
            ref = ref[len(prefix) :]
    if Path(ref).exists():
        return fmt, Path(ref), None
    for i, ch in enumerate(ref):
        if ch == ":" and Path(ref[:i]).exists():
            return fmt, Path(ref[:i]), ref[i + 1 :] or None
    raise KitRefused(f"image {ref!r} not found: give an OCI layout dir or a docker-archive .tar")


def read_image(ref: str) -> Image:
    """Open an image reference (OCI layout or docker-archive) without a daemon."""
    fmt, path, name = split_reference(ref)
    if fmt is None:
        fmt = "oci" if path.is_dir() else "docker-archive"
    if fmt == "oci":
        from servekit.kit.oci import read_oci

        return read_oci(path, name, ref)
    from servekit.kit.dockerarchive import read_docker_archive

    return read_docker_archive(path, name, ref)
