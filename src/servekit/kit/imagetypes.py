"""What both image readers share: the Image and LayerBlob types, media types, digests.

:mod:`servekit.kit.oci` and :mod:`servekit.kit.dockerarchive` both produce an
:class:`Image`; :mod:`servekit.kit.image` picks the reader. The types and
constants live here, below all three, so no reader imports another.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, BinaryIO, Literal

from servekit.kit.errors import KitRefused
from servekit.kit.jsonsafe import load_json

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
MAX_JSON = 16 << 20

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
        """The config as a JSON object (the readers already proved it parses)."""
        data = load_json(self.config_bytes, f"image {self.reference}: config")
        return data if isinstance(data, dict) else {}

    @property
    def image_id(self) -> str:
        return "sha256:" + hashlib.sha256(self.config_bytes).hexdigest()

    @property
    def diff_ids(self) -> list[str]:
        return [layer.diff_id for layer in self.layers]


def canonical_json(data: object) -> bytes:
    """Compact, key-sorted JSON: the same value always gives the same bytes."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


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
        raise KitRefused(f"{what}: digest {str(digest)[:80]!r} is not sha256:<64 hex digits>")
    return digest


def parse_config(data: bytes, what: str) -> list[str]:
    """The diffIDs listed by an image config, validated."""
    config = load_json(data, f"{what}: image config")
    rootfs = config.get("rootfs") if isinstance(config, dict) else None
    diff_ids = rootfs.get("diff_ids") if isinstance(rootfs, dict) else None
    if not isinstance(diff_ids, list):
        raise KitRefused(f"{what}: image config has no rootfs.diff_ids list")
    return [check_digest(d, f"{what}: rootfs.diff_ids") for d in diff_ids]
