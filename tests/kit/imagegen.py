"""Small images made by hand for the kit tests (independent of servekit's writers).

Layers are tar bytes built from :class:`M` member specs; images are written as
OCI layouts (gzip or plain blobs) or docker-archive tarballs the way
``docker save`` lays them out.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class M:
    """One tar member: f=file d=dir l=symlink h=hardlink c=char device p=fifo."""

    path: str
    kind: str = "f"
    data: bytes = b""
    mode: int = 0o644
    uid: int = 0
    gid: int = 0
    link: str = ""
    mtime: int = 1_700_000_000


TYPES = {
    "f": tarfile.REGTYPE,
    "d": tarfile.DIRTYPE,
    "l": tarfile.SYMTYPE,
    "h": tarfile.LNKTYPE,
    "c": tarfile.CHRTYPE,
    "p": tarfile.FIFOTYPE,
}


def layer_tar(members: list[M], fmt: int = tarfile.GNU_FORMAT) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as tar:
        for m in members:
            info = tarfile.TarInfo(m.path)
            info.type = TYPES[m.kind]
            info.mode, info.uid, info.gid, info.mtime = m.mode, m.uid, m.gid, m.mtime
            info.linkname = m.link
            if m.kind == "c":
                info.devmajor, info.devminor = 1, 3
            if m.kind == "f":
                info.size = len(m.data)
                tar.addfile(info, io.BytesIO(m.data))
            else:
                tar.addfile(info)
    return buf.getvalue()


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def gz(data: bytes) -> bytes:
    return gzip.compress(data, mtime=0)


def config_for(layers: list[bytes], env: list[str] | None = None, **extra: Any) -> bytes:
    config: dict[str, Any] = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Env": env or ["PATH=/usr/bin:/bin"], "Cmd": ["/bin/sh"], **extra},
        "rootfs": {"type": "layers", "diff_ids": [sha(layer) for layer in layers]},
        "history": [{"created_by": f"layer {i}"} for i in range(len(layers))],
    }
    return json.dumps(config, indent=1).encode()


def write_oci(
    root: Path,
    layers: list[bytes],
    *,
    gzip_layers: bool = False,
    tag: str | None = "latest",
    config: bytes | None = None,
) -> Path:
    blobs = root / "blobs" / "sha256"
    blobs.mkdir(parents=True)
    (root / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')

    def put(data: bytes) -> str:
        digest = sha(data)
        (blobs / digest[7:]).write_bytes(data)
        return digest

    config = config or config_for(layers)
    descs = []
    for layer in layers:
        blob = gz(layer) if gzip_layers else layer
        media = "application/vnd.oci.image.layer.v1.tar" + ("+gzip" if gzip_layers else "")
        descs.append({"mediaType": media, "digest": put(blob), "size": len(blob)})
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": put(config),
            "size": len(config),
        },
        "layers": descs,
    }
    data = json.dumps(manifest).encode()
    entry: dict[str, Any] = {
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "digest": put(data),
        "size": len(data),
    }
    if tag:
        entry["annotations"] = {"org.opencontainers.image.ref.name": tag}
    (root / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [entry]}))
    return root


def write_docker_archive(
    path: Path, layers: list[bytes], *, tag: str | None = "test/base:1", config: bytes | None = None
) -> Path:
    config = config or config_for(layers)
    config_name = sha(config)[7:] + ".json"
    names = [f"{sha(layer)[7:]}/layer.tar" for layer in layers]
    manifest = [{"Config": config_name, "RepoTags": [tag] if tag else None, "Layers": names}]
    with tarfile.open(path, "w") as tar:

        def add(name: str, data: bytes) -> None:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))

        for name, layer in zip(names, layers, strict=True):
            add(name, layer)
        add(config_name, config)
        add("manifest.json", json.dumps(manifest).encode())
    return path


BASE_LAYERS = [
    [
        M("bin", "d", mode=0o755),
        M("bin/sh", "f", b"#!shell\n", 0o755),
        M("etc", "d", mode=0o755),
        M("etc/passwd", "f", b"root:x:0:0\n"),
        M("etc/old.conf", "f", b"old\n"),
        M("opt", "d", mode=0o755),
        M("opt/app", "d", mode=0o755),
        M("opt/app/legacy.py", "f", b"x = 1\n"),
        M("opt/app/keep", "d", mode=0o750, uid=1000, gid=1000),
        M("opt/app/keep/data.bin", "f", bytes(range(256)) * 8, 0o600, 1000, 1000),
        M("usr", "d", mode=0o755),
        M("usr/lib", "d", mode=0o755),
        M("usr/lib/libx.so.1", "f", b"\x7fELF" + b"\0" * 100, 0o755),
        M("usr/lib/libx.so", "l", link="libx.so.1"),
        M("bin/python", "l", link="/usr/bin/python3"),
    ],
    [
        M("usr/bin", "d", mode=0o755),
        M("usr/bin/python3", "f", b"python" * 50, 0o755),
        M("usr/bin/python3.11", "h", link="usr/bin/python3"),
        M("var", "d", mode=0o755),
        M("var/cache", "d", mode=0o755),
        M("var/cache/a", "f", b"a"),
        M("var/cache/b", "f", b"b"),
    ],
]

WORKING_LAYER = [
    M("etc", "d", mode=0o755),
    M("etc/.wh.old.conf", "f"),
    M("var", "d", mode=0o755),
    M("var/cache", "d", mode=0o755),
    M("var/cache/.wh..wh..opq", "f"),
    M("var/cache/new", "f", b"fresh\n"),
    M("opt", "d", mode=0o755),
    M("opt/app", "d", mode=0o755),
    M("opt/app/serve.sh", "f", b"#!/bin/bash\nGPU_UTIL=${GPU_UTIL:-0.9}\n", 0o755),
    M("opt/app/patch.py", "f", b"def f():\n    return 2\n"),
    M("opt/app/link", "l", link="patch.py"),
    M("opt/app/patch2.py", "h", link="opt/app/patch.py"),
    M("opt/app/dir with space", "d", mode=0o755),
    M("opt/app/dir with space/note.txt", "f", b"hello\n", 0o640, 1000, 100),
]


def base_layers() -> list[bytes]:
    return [layer_tar(spec) for spec in BASE_LAYERS]


def source_layers() -> list[bytes]:
    return [*base_layers(), layer_tar(WORKING_LAYER)]
