"""docker-archive tarballs, as ``docker save`` writes and ``docker load`` reads.

``manifest.json`` lists per image its config member, repo tags and layer
members (each the uncompressed layer tar). Layers are read in place as slices of
the outer tar. Written archives use the classic ``<diffid>/layer.tar`` names,
fixed mtimes and numeric owners.
"""

from __future__ import annotations

import hashlib
import io
import posixpath
import shutil
import tarfile
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

from servekit.kit.canonical import member_info
from servekit.kit.errors import KitRefused
from servekit.kit.imagetypes import (
    MAX_JSON,
    OCI_LAYER_TAR,
    Image,
    LayerBlob,
    canonical_json,
    parse_config,
    sniff_media_type,
)
from servekit.kit.jsonsafe import load_json
from servekit.kit.layertar import open_plain
from servekit.kit.paths import member_path
from servekit.kit.streams import CHUNK, Limits, SliceReader, as_binary

MAX_MEMBERS = 100_000


def _members(path: Path, what: str) -> dict[str, tarfile.TarInfo]:
    """The outer tar's members by canonical path (headers only: data is seeked over)."""
    if not path.is_file():
        raise KitRefused(f"{what}: not a regular file")
    out: dict[str, tarfile.TarInfo] = {}
    try:
        with tarfile.open(path, "r:") as tar:
            while (member := tar.next()) is not None:
                if len(out) >= MAX_MEMBERS:
                    raise KitRefused(f"{what}: more than {MAX_MEMBERS} members")
                out[member_path(member.name, what)] = member
    except (tarfile.TarError, EOFError, OSError) as exc:
        if isinstance(exc, KitRefused):
            raise
        raise KitRefused(f"{what}: not an uncompressed tar ({exc})") from exc
    return out


def _resolve(members: dict[str, tarfile.TarInfo], name: str, what: str) -> tarfile.TarInfo:
    path = member_path(name, what)
    for _ in range(8):
        info = members.get(path)
        if info is None:
            raise KitRefused(f"{what}: member {name!r} is missing")
        if info.isreg():
            return info
        if not info.issym():
            raise KitRefused(f"{what}: member {name!r} is not a regular file")
        joined = posixpath.normpath(posixpath.join(posixpath.dirname(path), info.linkname))
        if info.linkname.startswith("/") or not joined.startswith("/") or joined == "/":
            raise KitRefused(f"{what}: member {name!r} links outside the archive")
        path = joined
    raise KitRefused(f"{what}: member {name!r} has too many symlink hops")


def _read_member(path: Path, info: tarfile.TarInfo, what: str) -> bytes:
    if info.size > MAX_JSON:
        raise KitRefused(f"{what}: {info.name} is too large for JSON")
    with path.open("rb") as fh:
        fh.seek(info.offset_data)
        data = fh.read(info.size)
    if len(data) != info.size:
        raise KitRefused(
            f"{what}: {info.name}: header says {info.size} bytes, archive holds {len(data)}"
        )
    return data


def _pick(entries: list[dict[str, Any]], name: str | None, what: str) -> dict[str, Any]:
    if name is not None:
        for entry in entries:
            if name in _tags(entry):
                return entry
        raise KitRefused(f"{what}: no image tagged {name!r} in manifest.json")
    if len(entries) != 1:
        raise KitRefused(f"{what}: manifest.json holds {len(entries)} images; add :REPO:TAG")
    return entries[0]


def read_docker_archive(path: Path, name: str | None, reference: str) -> Image:
    """Read a docker-archive tarball."""
    what = f"docker-archive {path}"
    members = _members(path, what)
    data = _read_member(path, _resolve(members, "manifest.json", what), what)
    entries = load_json(data, f"{what}: manifest.json")
    if (
        not isinstance(entries, list)
        or not entries
        or not all(isinstance(e, dict) for e in entries)
    ):
        raise KitRefused(f"{what}: manifest.json lists no image")
    entry = _pick(entries, name, what)
    config_bytes = _read_member(path, _resolve(members, str(entry.get("Config")), what), what)
    diff_ids = parse_config(config_bytes, what)
    names = entry.get("Layers") or []
    if not isinstance(names, list):
        raise KitRefused(f"{what}: manifest.json Layers is not a list")
    if len(names) != len(diff_ids):
        raise KitRefused(f"{what}: {len(names)} layers but config lists {len(diff_ids)} diffIDs")
    layers = tuple(
        _layer(path, _resolve(members, str(n), what), d)
        for n, d in zip(names, diff_ids, strict=True)
    )
    tags = _tags(entry)
    return Image(
        reference, "docker-archive", name or (tags[0] if tags else None), config_bytes, layers
    )


def _tags(entry: dict[str, Any]) -> list[str]:
    tags = entry.get("RepoTags") or []
    return [t for t in tags if isinstance(t, str)] if isinstance(tags, list) else []


def _layer(path: Path, info: tarfile.TarInfo, diff_id: str) -> LayerBlob:
    offset, size = info.offset_data, info.size

    @contextmanager
    def opener() -> Iterator[BinaryIO]:
        with path.open("rb") as fh:
            yield as_binary(SliceReader(fh, offset, size))

    with path.open("rb") as fh:
        fh.seek(offset)
        head = fh.read(4)
    return LayerBlob(opener, size, sniff_media_type(head), None, diff_id)


@contextmanager
def _plain_layer(layer: LayerBlob, limits: Limits) -> Iterator[tuple[BinaryIO, int]]:
    """The layer as an uncompressed tar stream and its size (spooled if compressed)."""
    if layer.media_type == OCI_LAYER_TAR:
        with layer.opener() as fh:
            yield fh, layer.size
        return
    with tempfile.TemporaryFile() as spool, layer.opener() as fh:
        with open_plain(fh, limits, "layer") as plain:
            shutil.copyfileobj(plain, spool, CHUNK)
        size = spool.tell()
        spool.seek(0)
        yield spool, size


def write_docker_archive(
    dest: BinaryIO, config_bytes: bytes, layers: list[LayerBlob], tag: str | None, limits: Limits
) -> None:
    """Write a docker-archive (uncompressed layers) to an open file."""
    config_name = hashlib.sha256(config_bytes).hexdigest() + ".json"
    layer_names: list[str] = []
    with tarfile.open(fileobj=dest, mode="w", format=tarfile.PAX_FORMAT) as tar:
        tar.addfile(member_info(config_name, False, len(config_bytes)), io.BytesIO(config_bytes))
        for layer in layers:
            name = layer.diff_id.split(":", 1)[1] + "/layer.tar"
            if name not in layer_names:
                with _plain_layer(layer, limits) as (stream, size):
                    tar.addfile(member_info(name, False, size), stream)
            layer_names.append(name)
        manifest = [
            {"Config": config_name, "RepoTags": [tag] if tag else None, "Layers": layer_names}
        ]
        data = canonical_json(manifest)
        tar.addfile(member_info("manifest.json", False, len(data)), io.BytesIO(data))
        if tag and ":" in tag:
            repo, _, label = tag.rpartition(":")
            top = layers[-1].diff_id.split(":", 1)[1] if layers else ""
            data = canonical_json({repo: {label: top}})
            tar.addfile(member_info("repositories", False, len(data)), io.BytesIO(data))


__all__ = ["read_docker_archive", "write_docker_archive"]
