"""Opening an image reference: OCI image layout or docker-archive, no daemon.

References follow skopeo's spelling: ``oci:DIR[:REF]``,
``docker-archive:FILE[:REPO:TAG]`` or a bare path. The readers return an
:class:`~servekit.kit.imagetypes.Image` whose layers open lazily as byte
streams, so a 1 GiB base is never held in memory.
"""

from __future__ import annotations

from pathlib import Path

from servekit.kit.dockerarchive import read_docker_archive
from servekit.kit.errors import KitRefused
from servekit.kit.imagetypes import Format, Image
from servekit.kit.oci import read_oci


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
        return read_oci(path, name, ref)
    return read_docker_archive(path, name, ref)
