"""OCI image layouts: ``oci-layout``, ``index.json`` and ``blobs/sha256``.

Reading picks one manifest (by ``org.opencontainers.image.ref.name`` or the only
one), checks every JSON blob against its digest and leaves layer blobs to be
checked by :func:`~servekit.kit.layertar.scan_layer` as they stream. Writing
produces compact, key-sorted JSON so the same image gives the same bytes.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from servekit.kit.errors import KitRefused
from servekit.kit.imagetypes import (
    DOCKER_MANIFEST,
    MAX_JSON,
    OCI_CONFIG,
    OCI_INDEX,
    OCI_MANIFEST,
    REF_NAME,
    Image,
    LayerBlob,
    canonical_json,
    check_digest,
    oci_layer_type,
    parse_config,
)
from servekit.kit.jsonsafe import load_json
from servekit.kit.streams import CHUNK
from servekit.vocabulary import read_at_most


def _blob_path(root: Path, digest: object, what: str) -> Path:
    digest = check_digest(digest, what)
    path = root / "blobs" / "sha256" / digest.split(":", 1)[1]
    if not path.is_file():
        raise KitRefused(f"{what}: blob {digest} is missing from {root}")
    return path


def _read_small(path: Path, what: str) -> bytes:
    """A JSON file's bytes, refused past MAX_JSON (read at most that much)."""
    return read_at_most(
        path, MAX_JSON, what, f"{path.name} is too large for JSON", error=KitRefused
    )


def _json_blob(root: Path, digest: object, what: str) -> bytes:
    path = _blob_path(root, digest, what)
    data = _read_small(path, what)
    if "sha256:" + hashlib.sha256(data).hexdigest() != digest:
        raise KitRefused(f"{what}: blob {digest} does not match its digest")
    return data


def _load_json(data: bytes, what: str) -> dict[str, Any]:
    value = load_json(data, what)
    if not isinstance(value, dict):
        raise KitRefused(f"{what}: expected a JSON object")
    return value


def _field(obj: dict[str, Any], key: str, kind: type, what: str) -> Any:
    """``obj[key]`` when it has the JSON type ``kind``; an empty one when absent."""
    value = obj.get(key)
    if value is None:
        return kind()
    if not isinstance(value, kind):
        raise KitRefused(f"{what}: {key} is not a JSON {kind.__name__}")
    return value


def _descriptors(obj: dict[str, Any], key: str, what: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = _field(obj, key, list, what)
    if not all(isinstance(item, dict) for item in items):
        raise KitRefused(f"{what}: {key} holds something that is not a descriptor object")
    return items


def _ref_name(desc: dict[str, Any]) -> object:
    annotations = desc.get("annotations")
    return annotations.get(REF_NAME) if isinstance(annotations, dict) else None


def _pick(manifests: list[dict[str, Any]], name: str | None, what: str) -> dict[str, Any]:
    if name is not None:
        for desc in manifests:
            if _ref_name(desc) == name:
                return desc
        raise KitRefused(f"{what}: no manifest named {name!r} in index.json")
    if len(manifests) != 1:
        names = [_ref_name(d) for d in manifests][:10]
        raise KitRefused(f"{what}: index.json holds {len(manifests)} manifests {names}; add :NAME")
    return manifests[0]


def _is_amd64(desc: dict[str, Any]) -> bool:
    platform = desc.get("platform")
    return isinstance(platform, dict) and platform.get("architecture") == "amd64"


def _resolve_manifest(root: Path, desc: dict[str, Any], what: str) -> dict[str, Any]:
    """Follow nested indexes down to one image manifest (linux/amd64 or the only one)."""
    for _ in range(4):
        data = _load_json(_json_blob(root, desc.get("digest"), what), what)
        if data.get("mediaType", desc.get("mediaType")) != OCI_INDEX:
            return data
        subs = _descriptors(data, "manifests", what)
        amd64 = [d for d in subs if _is_amd64(d)]
        desc = _pick(amd64 or subs, None, what)
    raise KitRefused(f"{what}: nested indexes go too deep")


def read_oci(root: Path, name: str | None, reference: str) -> Image:
    """Read an OCI image layout directory."""
    what = f"OCI layout {root}"
    if not (root / "oci-layout").is_file() or not (root / "index.json").is_file():
        raise KitRefused(f"{what}: missing oci-layout or index.json")
    index = _load_json(_read_small(root / "index.json", what), what)
    desc = _pick(_descriptors(index, "manifests", what), name, what)
    manifest = _resolve_manifest(root, desc, what)
    if manifest.get("mediaType", OCI_MANIFEST) not in (OCI_MANIFEST, DOCKER_MANIFEST):
        raise KitRefused(
            f"{what}: manifest media type {str(manifest.get('mediaType'))[:80]!r} unsupported"
        )
    config_desc = _field(manifest, "config", dict, what)
    config_bytes = _json_blob(root, config_desc.get("digest"), what)
    diff_ids = parse_config(config_bytes, what)
    descs = _descriptors(manifest, "layers", what)
    if len(descs) != len(diff_ids):
        raise KitRefused(f"{what}: {len(descs)} layers but config lists {len(diff_ids)} diffIDs")
    layers = tuple(_layer(root, d, diff, what) for d, diff in zip(descs, diff_ids, strict=True))
    ref_name = name or _ref_name(desc)
    return Image(
        reference, "oci", ref_name if isinstance(ref_name, str) else None, config_bytes, layers
    )


def _layer(root: Path, desc: dict[str, Any], diff_id: str, what: str) -> LayerBlob:
    digest = check_digest(desc.get("digest"), what)
    path = _blob_path(root, digest, what)
    media = oci_layer_type(str(desc.get("mediaType", "")))
    return LayerBlob(lambda: path.open("rb"), path.stat().st_size, media, digest, diff_id)


def _put_blob(blobs: Path, data: bytes) -> tuple[str, int]:
    digest = hashlib.sha256(data).hexdigest()
    (blobs / digest).write_bytes(data)
    return "sha256:" + digest, len(data)


def _copy_blob(blobs: Path, layer: LayerBlob) -> tuple[str, int]:
    """Copy a layer blob in, hashing it; returns the digest and size actually written."""
    tmp = blobs / ".incoming"
    sha = hashlib.sha256()
    with layer.opener() as src, tmp.open("wb") as dst:
        while block := src.read(CHUNK):
            sha.update(block)
            dst.write(block)
        size = dst.tell()
    digest = sha.hexdigest()
    tmp.replace(blobs / digest)
    return "sha256:" + digest, size


def write_oci(
    root: Path,
    config_bytes: bytes,
    layers: list[LayerBlob],
    tag: str | None,
    annotations: dict[str, str] | None = None,
) -> None:
    """Write an OCI layout into the empty directory ``root``.

    ``annotations`` go on the image manifest (not the config), so stamps such as
    the code revision never change the image id.
    """
    blobs = root / "blobs" / "sha256"
    blobs.mkdir(parents=True)
    (root / "oci-layout").write_bytes(canonical_json({"imageLayoutVersion": "1.0.0"}))
    config_digest, config_size = _put_blob(blobs, config_bytes)
    descs = []
    for layer in layers:
        digest, size = _copy_blob(blobs, layer)
        descs.append(
            {"mediaType": oci_layer_type(layer.media_type), "digest": digest, "size": size}
        )
    manifest: dict[str, Any] = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {"mediaType": OCI_CONFIG, "digest": config_digest, "size": config_size},
        "layers": descs,
    }
    if annotations:
        manifest["annotations"] = annotations
    man_digest, man_size = _put_blob(blobs, canonical_json(manifest))
    entry: dict[str, Any] = {"mediaType": OCI_MANIFEST, "digest": man_digest, "size": man_size}
    if tag:
        entry["annotations"] = {REF_NAME: tag}
    index = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [entry]}
    (root / "index.json").write_bytes(canonical_json(index))
