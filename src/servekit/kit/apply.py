"""Applying an image's layers to a filesystem state, with digest checks.

Shared by build (source image), rebuild (the proof) and inspect (``--fs``):
each layer streams once, its blob digest and diffID are checked against what
the image claims, and the first mismatch is refused.
"""

from __future__ import annotations

from servekit.kit.errors import KitRefused
from servekit.kit.fsmanifest import FsState
from servekit.kit.imagetypes import Image
from servekit.kit.layertar import LayerScan, ScanOptions, scan_layer
from servekit.kit.streams import Limits


def first_difference(expected: list[str], actual: list[str], what: str) -> str | None:
    """A sentence naming the first layer where two diffID lists differ."""
    for i, (want, have) in enumerate(zip(expected, actual, strict=False)):
        if want != have:
            return f"{what} layer {i + 1}: expected {want}, found {have}"
    if len(actual) < len(expected):
        return f"{what} has {len(actual)} layers, expected at least {len(expected)}"
    return None


def apply_layer(image: Image, index: int, state: FsState, opts: ScanOptions) -> LayerScan:
    """Scan layer ``index`` of ``image`` into ``state`` and check its digests."""
    layer = image.layers[index]
    with layer.opener() as blob:
        scan = scan_layer(blob, state, opts)
    if layer.digest is not None and scan.blob_sha256 != layer.digest:
        raise KitRefused(f"{opts.what}: blob digest {scan.blob_sha256} != manifest {layer.digest}")
    if scan.diff_id != layer.diff_id:
        raise KitRefused(f"{opts.what}: diffID {scan.diff_id} != config {layer.diff_id}")
    return scan


def apply_image(image: Image, limits: Limits, strict_from: int | None = None) -> FsState:
    """The applied filesystem of a whole image (layers from ``strict_from`` strict)."""
    state = FsState()
    for i in range(len(image.layers)):
        strict = strict_from is not None and i >= strict_from
        apply_layer(
            image, i, state, ScanOptions(f"{image.reference} layer {i + 1}", strict, limits)
        )
    return state
