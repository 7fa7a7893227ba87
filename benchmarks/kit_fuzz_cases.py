"""The kit the fuzz campaign damages, its byte regions, and the structured mutations.

Used by ``benchmarks/kit_fuzz.py``: :func:`make_fixture` builds a small real kit
(a two-layer base, a payload spec with launch scripts, Python patches, a
symlink, a whiteout, an opaque folder, non-ASCII and long names, a repo stamp
and promises); :func:`tar_regions` / :func:`zst_regions` name every byte of the
kit's tar stream and compressed file; :data:`MUTATIONS` are the named
structural changes (truncation, reordering, manifest edits, nesting, bad UTF-8,
path tricks), each a function from the fixture to the bytes of a damaged kit.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import random
import subprocess
import tarfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml
import zstandard

from servekit.kit import canonical
from servekit.kit.build import build_kit
from servekit.kit.options import KitBuildOptions

BLOCK = 512


# ---------------------------------------------------------------- the fixture kit


def _tar(members: list[tuple[str, str, bytes, str]]) -> bytes:
    """A layer tar from (name, kind f/d/l/h, data, link) tuples."""
    kinds = {"f": tarfile.REGTYPE, "d": tarfile.DIRTYPE, "l": tarfile.SYMTYPE, "h": tarfile.LNKTYPE}
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, kind, data, link in members:
            info = tarfile.TarInfo(name)
            info.type, info.linkname, info.mtime = kinds[kind], link, 1_700_000_000
            info.mode = 0o755 if kind == "d" else 0o644
            info.size = len(data) if kind == "f" else 0
            tar.addfile(info, io.BytesIO(data) if kind == "f" else None)
    return buf.getvalue()


BASE = [
    [
        ("bin", "d", b"", ""),
        ("bin/sh", "f", b"#!shell\n", ""),
        ("etc", "d", b"", ""),
        ("etc/old.conf", "f", b"old\n", ""),
        ("opt", "d", b"", ""),
        ("opt/app", "d", b"", ""),
        ("opt/app/model.py", "f", b'GATE = os.environ.get("V41_CED_GRAPH_GATE", "0")\n', ""),
        ("usr", "d", b"", ""),
        ("usr/lib", "d", b"", ""),
        ("usr/lib/libx.so.1", "f", b"\x7fELF" + bytes(200), ""),
        ("usr/lib/libx.so", "l", b"", "libx.so.1"),
    ],
    [
        ("usr/bin", "d", b"", ""),
        ("usr/bin/python3", "f", b"python" * 40, ""),
        ("usr/bin/python3.11", "h", b"", "usr/bin/python3"),
        ("var", "d", b"", ""),
        ("var/cache", "d", b"", ""),
        ("var/cache/a", "f", b"a", ""),
    ],
]


def _oci(root: Path, layers: list[bytes]) -> Path:
    blobs = root / "blobs" / "sha256"
    blobs.mkdir(parents=True)

    def put(data: bytes) -> dict[str, object]:
        digest = hashlib.sha256(data).hexdigest()
        (blobs / digest).write_bytes(data)
        return {"digest": f"sha256:{digest}", "size": len(data)}

    gz = [gzip.compress(layer, mtime=0) for layer in layers]
    diffs = ["sha256:" + hashlib.sha256(layer).hexdigest() for layer in layers]
    config = {"rootfs": {"type": "layers", "diff_ids": diffs}, "config": {"Cmd": ["/bin/sh"]}}
    layer_type = "application/vnd.oci.image.layer.v1.tar+gzip"
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            **put(json.dumps(config).encode()),
        },
        "layers": [{"mediaType": layer_type, **put(blob)} for blob in gz],
    }
    desc = {
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        **put(json.dumps(manifest).encode()),
    }
    (root / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [desc]}))
    (root / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    return root


DECODE = (
    "#!/bin/sh\nSPEC=${SPEC:-1}\nDRAFT_GRAPH=${DRAFT_GRAPH:-1}\nSTATIC_KERNEL=${STATIC_KERNEL:-1}\n"
)
PREFILL = "#!/bin/sh\nPREFIX=${PREFIX:-1}\nSTATIC_KERNEL=${STATIC_KERNEL:-0}\n"


def _project(root: Path) -> Path:
    files = {
        "scripts/serve_decode.sh": DECODE,
        "scripts/serve_prefill.sh": PREFILL,
        "patches/model.py": 'import os\nGATE = os.environ.get("V41_CED_GRAPH_GATE", "1")\n',
        "patches/guard.py": "class DecodeGuard:\n    pass\n",
        "patches/größe_ü.py": "X = 'non-ascii name'\n",
        "patches/" + "long_" * 30 + ".py": "Y = 'a name past 100 bytes'\n",
        "patches/data.bin": "".join(chr(i % 128) for i in range(3000)),
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    (root / "scripts/serve_decode.sh").chmod(0o755)
    spec = {
        "name": "fuzzkit",
        "files": [
            {"src": "scripts", "dest": "/opt/app/scripts"},
            {"src": "patches", "dest": "/opt/app/patches", "uid": 1000, "gid": 1000},
            {"src": "patches/model.py", "dest": "/opt/app/model.py"},
            {"dest": "/opt/app/current", "symlink": "patches"},
        ],
        "remove": ["/etc/old.conf"],
        "opaque": ["/var/cache"],
        "config": {
            "env": {"V41_CED_ALLOW_DSPARK": "1"},
            "cmd": ["/opt/app/scripts/serve_decode.sh"],
        },
        "expect": {
            "defaults": {
                "SPEC": "1",
                "DRAFT_GRAPH": "1",
                "PREFIX": "1",
                "STATIC_KERNEL": {"decode": "1", "prefill": "0"},
            },
            "gates": [{"file": "/opt/app/model.py", "name": "V41_CED_GRAPH_GATE", "default": "1"}],
            "markers": [{"file": "/opt/app/patches/guard.py", "contains": "DecodeGuard"}],
        },
    }
    path = root / "kit.yaml"
    path.write_text(yaml.safe_dump(spec, allow_unicode=True))
    return path


def _git_repo(root: Path) -> Path:
    env = {
        **os.environ,
        "GIT_AUTHOR_DATE": "2026-10-05T12:00:00+00:00",
        "GIT_COMMITTER_DATE": "2026-10-05T12:00:00+00:00",
        "GIT_AUTHOR_NAME": "f",
        "GIT_AUTHOR_EMAIL": "f@example.com",
        "GIT_COMMITTER_NAME": "f",
        "GIT_COMMITTER_EMAIL": "f@example.com",
    }
    for args in (["init", "-q"], ["add", "."], ["commit", "-q", "-m", "fuzz"]):
        subprocess.run(["git", "-C", str(root), *args], check=True, env=env, capture_output=True)
    return root


@dataclass(frozen=True)
class Fixture:
    """The good kit and what the mutations need from it."""

    dir: Path
    kit: Path
    base: Path
    data: bytes
    tar: bytes


def make_fixture(top: Path) -> Fixture:
    """Build the fuzz kit in ``top`` (a fresh folder)."""
    top.mkdir(parents=True)
    base = _oci(top / "base", [_tar(layer) for layer in BASE])
    project = top / "project"
    spec = _project(project)
    repo = _git_repo(project)
    kit = top / "fuzzkit.tar.zst"
    build_kit(
        KitBuildOptions(
            base=str(base),
            payload=spec,
            out=kit,
            repo=repo,
            engine=("vllm=0.27.1",),
            base_ref="example/base:1",
        )
    )
    data = kit.read_bytes()
    return Fixture(top, kit, base, data, decompress(data))


def decompress(data: bytes) -> bytes:
    reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data), read_across_frames=True)
    return reader.read()


def compress(tar: bytes, checksum: bool = True) -> bytes:
    """As the packer compresses (so only the change itself can be noticed), or without a checksum."""
    if checksum:
        return canonical.compress(tar)
    return zstandard.ZstdCompressor(level=3, write_checksum=False).compress(tar)


# ---------------------------------------------------------------- byte regions


def _category(name: str) -> str:
    leaf = name.split("/", 1)[1] if "/" in name else ""
    if leaf.startswith("layers/"):
        return "layer tar"
    if leaf in ("README.md", "Dockerfile", "rebuild.sh", "selftest.sh"):
        return "generated file"
    return leaf or "top folder"


def tar_regions(tar: bytes) -> list[tuple[int, int, str]]:
    """``(start, end, region)`` covering every byte of the kit's tar stream."""
    out: list[tuple[int, int, str]] = []
    with tarfile.open(fileobj=io.BytesIO(tar)) as archive:
        members = archive.getmembers()
    for m in members:
        out.append((m.offset, m.offset_data, "header"))
        if m.size:
            out.append((m.offset_data, m.offset_data + m.size, "content: " + _category(m.name)))
        end = m.offset_data + m.size
        if end % BLOCK:
            out.append((end, end + (-end % BLOCK), "member padding"))
    last = out[-1][1]
    out.append((last, last + 2 * BLOCK, "end-of-archive blocks"))
    out.append((last + 2 * BLOCK, len(tar), "record padding"))
    return out


def zst_regions(data: bytes) -> list[tuple[int, int, str]]:
    head = zstandard.frame_header_size(data)
    return [
        (0, head, "frame header"),
        (head, len(data) - 4, "blocks"),
        (len(data) - 4, len(data), "content checksum"),
    ]


def region_of(regions: list[tuple[int, int, str]], offset: int) -> str:
    return next(name for start, end, name in regions if start <= offset < end)


# ---------------------------------------------------------------- structured mutations


Mutation = Callable[[Fixture], bytes]


def _members(fx: Fixture) -> list[tuple[tarfile.TarInfo, bytes]]:
    out = []
    with tarfile.open(fileobj=io.BytesIO(fx.tar)) as archive:
        for m in archive.getmembers():
            fh = archive.extractfile(m)
            out.append((m, fh.read() if fh else b""))
    return out


def _repack(items: list[tuple[tarfile.TarInfo, bytes]], fmt: int = tarfile.PAX_FORMAT) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as tar:
        for info, data in items:
            info.size = len(data) if info.isreg() else 0
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return buf.getvalue()


def _sums(items: list[tuple[tarfile.TarInfo, bytes]]) -> list[tuple[tarfile.TarInfo, bytes]]:
    """Rewrite SHA256SUMS so only the deeper checks can notice a change."""
    lines = [
        f"{hashlib.sha256(data).hexdigest()}  {info.name.split('/', 1)[1]}\n"
        for info, data in items
        if info.isreg() and not info.name.endswith("/SHA256SUMS")
    ]
    body = "".join(sorted(lines, key=lambda line: line.split("  ", 1)[1])).encode()
    return [(i, body if i.name.endswith("/SHA256SUMS") else d) for i, d in items]


def edit_member(name: str, change: Callable[[bytes], bytes], resum: bool = True) -> Mutation:
    def mutate(fx: Fixture) -> bytes:
        items = [(i, change(d) if i.name.endswith("/" + name) else d) for i, d in _members(fx)]
        return compress(_repack(_sums(items) if resum else items))

    return mutate


def edit_manifest(change: Callable[[dict[str, object]], None]) -> Mutation:
    def edit(data: bytes) -> bytes:
        doc = json.loads(data)
        change(doc)
        return json.dumps(doc, indent=2).encode()

    return edit_member("MANIFEST.json", edit)


def _set(path: str, value: object) -> Callable[[dict[str, object]], None]:
    def change(doc: dict[str, object]) -> None:
        keys = path.split(".")
        node: object = doc
        for key in keys[:-1]:
            node = node[int(key)] if isinstance(node, list) else node[key]  # type: ignore[index]
        if isinstance(node, list):
            node[int(keys[-1])] = value
        elif value is _DELETE:
            del node[keys[-1]]  # type: ignore[attr-defined]
        else:
            node[keys[-1]] = value  # type: ignore[index]

    return change


class _Delete:
    def __repr__(self) -> str:
        return "<deleted>"


_DELETE = _Delete()


def add_member(info: tarfile.TarInfo, data: bytes = b"", fmt: int = tarfile.PAX_FORMAT) -> Mutation:
    def mutate(fx: Fixture) -> bytes:
        return compress(_repack([*_members(fx), (info, data)], fmt))

    return mutate


def _info(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    return info


def reorder(how: str) -> Mutation:
    def mutate(fx: Fixture) -> bytes:
        items = _members(fx)
        if how == "reverse":
            items = [items[0], *reversed(items[1:])]
        else:
            items[2], items[3] = items[3], items[2]
        return compress(_repack(items))

    return mutate


def raw(make: Callable[[Fixture], bytes]) -> Mutation:
    return make


def _layer_edit(change: Callable[[bytes], bytes]) -> Mutation:
    def mutate(fx: Fixture) -> bytes:
        items = [(i, change(d) if "/layers/" in i.name else d) for i, d in _members(fx)]
        return compress(_repack(_sums(items)))

    return mutate


def _pax_size(fx: Fixture) -> bytes:
    """A PAX header whose length field claims 2 GiB."""
    tar = bytearray(fx.tar)
    header = tarfile.TarInfo("fuzzkit/x")
    header.type = tarfile.XHDTYPE
    header.size = 2 << 30
    block = header.tobuf(tarfile.USTAR_FORMAT)
    end = tar_regions(fx.tar)[-2][0]
    return compress(bytes(tar[:end]) + block + b"30 path=" + b"a" * 600 + bytes(10240))


def _sparse(fx: Fixture) -> bytes:
    info = _info("fuzzkit/sparse", tarfile.GNUTYPE_SPARSE)
    return compress(_repack([*_members(fx), (info, b"")], tarfile.GNU_FORMAT))


def _zstd_bomb(fx: Fixture) -> bytes:
    return zstandard.ZstdCompressor(level=19).compress(fx.tar[:-10240] + bytes(256 << 20))


def _layer_with(members: list[tuple[str, str, bytes, str]]) -> Callable[[bytes], bytes]:
    return lambda layer: _tar(members)


def _flip_layer_header(layer: bytes) -> bytes:
    out = bytearray(layer)
    out[600] ^= 0x20
    return bytes(out)


MUTATIONS: dict[str, Mutation] = {
    "empty file": raw(lambda fx: b""),
    "random bytes": raw(lambda fx: random.Random(1).randbytes(4096)),
    "zstd of random bytes": raw(lambda fx: compress(random.Random(2).randbytes(8192))),
    "zstd of nothing": raw(lambda fx: compress(b"")),
    "no zstd checksum": raw(lambda fx: compress(fx.tar, checksum=False)),
    "trailing garbage after the frame": raw(lambda fx: fx.data + b"garbage!"),
    "a second frame of zeros": raw(lambda fx: fx.data + compress(bytes(4096))),
    "a skippable frame appended": raw(
        lambda fx: fx.data + b"\x50\x2a\x4d\x18" + (8).to_bytes(4, "little") + bytes(8)
    ),
    "zstd bomb (256 MiB of zeros)": raw(_zstd_bomb),
    "tar in a gzip, not zstd": raw(lambda fx: gzip.compress(fx.tar)),
    "plain tar, not compressed": raw(lambda fx: fx.tar),
    "members reversed": reorder("reverse"),
    "two members swapped": reorder("swap"),
    "gnu format repack": raw(lambda fx: compress(_repack(_members(fx), tarfile.GNU_FORMAT))),
    "member with '..'": add_member(_info("fuzzkit/../evil"), b"x"),
    "absolute member": add_member(_info("/etc/evil"), b"x"),
    "member outside the top folder": add_member(_info("other/x"), b"x"),
    "duplicate member": add_member(_info("fuzzkit/README.md"), b"again"),
    "symlink member": add_member(_info("fuzzkit/link", tarfile.SYMTYPE, "/etc/passwd")),
    "hardlink member": add_member(_info("fuzzkit/hard", tarfile.LNKTYPE, "fuzzkit/README.md")),
    "fifo member": add_member(_info("fuzzkit/fifo", tarfile.FIFOTYPE)),
    "device member": add_member(_info("fuzzkit/dev", tarfile.CHRTYPE)),
    "sparse member": raw(_sparse),
    "pax header claiming 2 GiB": raw(_pax_size),
    "member name of 5000 bytes": add_member(_info("fuzzkit/" + "n" * 5000), b"x"),
    "member 300 folders deep": add_member(_info("fuzzkit/" + "d/" * 300 + "x"), b"x"),
    "extra member not in SHA256SUMS": add_member(_info("fuzzkit/extra.txt"), b"x"),
    "SHA256SUMS line dropped": edit_member(
        "SHA256SUMS", lambda d: b"".join(d.splitlines(keepends=True)[1:]), resum=False
    ),
    "SHA256SUMS line doubled": edit_member(
        "SHA256SUMS", lambda d: d + d.splitlines(keepends=True)[0], resum=False
    ),
    "SHA256SUMS names ../x": edit_member(
        "SHA256SUMS", lambda d: d + b"0" * 64 + b"  ../x\n", resum=False
    ),
    "SHA256SUMS in CRLF": edit_member(
        "SHA256SUMS", lambda d: d.replace(b"\n", b"\r\n"), resum=False
    ),
    "SHA256SUMS upper-case hex": edit_member("SHA256SUMS", lambda d: d.upper(), resum=False),
}

_BAD_UTF8 = {
    f"bad UTF-8 in {name}": edit_member(name, lambda d: d[:30] + b"\xc3\x28\xff" + d[30:])
    for name in (
        "MANIFEST.json",
        "fs-manifest.txt",
        "payload.sha256",
        "base-diffids.txt",
        "config.json",
        "README.md",
        "selftest.sh",
        "rebuild.sh",
        "Dockerfile",
    )
}
_BAD_UTF8["bad UTF-8 in SHA256SUMS"] = edit_member(
    "SHA256SUMS", lambda d: d[:30] + b"\xff" + d[30:], resum=False
)

_NESTED = {
    f"MANIFEST.json nested {depth} deep": edit_member(
        "MANIFEST.json", lambda d, n=depth: b"[" * n + b"]" * n
    )
    for depth in (10, 100, 1000, 100_000)
}
_NESTED["config.json nested 100000 deep"] = edit_member(
    "config.json", lambda d: b'{"a":' * 100_000 + b"1" + b"}" * 100_000
)
_NESTED["MANIFEST.json nested inside a field"] = edit_manifest(
    _set("config_delta.env", {"X": json.loads("[" * 50 + "]" * 50)})
)

_MANIFEST = {
    f"MANIFEST {path} = {value!r:.30}": edit_manifest(_set(path, value))
    for path, value in [
        ("name", "other"),
        ("created", "2099-01-01T00:00:00Z"),
        ("schema_version", 99),
        ("base.image_id", "sha256:" + "0" * 64),
        ("base.layer_count", 7),
        ("base.diff_ids.0", "sha256:" + "1" * 64),
        ("image.image_id", "sha256:" + "2" * 64),
        ("image.fs_entries", 1),
        ("image.payload_count", 0),
        ("layers.0.entries", 0),
        ("layers.0.diff_id", "sha256:" + "3" * 64),
        ("layers.0.raw_size", -1),
        ("layers.0.file", "../../etc/passwd"),
        ("layers.0.whiteouts", []),
        ("payload.0.sha256", "4" * 64),
        ("payload.0.path", "opt/app/relative"),
        ("payload.0.mode", "0777"),
        ("payload.0.size", 10**30),
        ("config_delta.env", {"NEW": "1"}),
        ("code.repo_rev", "0000000+0dirty"),
        ("code", None),
        ("expect", None),
        ("expect.defaults.SPEC", "0"),
        ("expect.gates", []),
        ("expect.markers.0.contains", "NotThere"),
        ("surprise", 1),
        ("generator", _DELETE),
        ("layers", "not a list"),
    ]
}

_FS = {
    f"fs-manifest: {what}": edit_member("fs-manifest.txt", change)
    for what, change in [
        ("relative path", lambda d: d.replace(b"\t/opt/app/model.py\t", b"\topt/app/model.py\t")),
        ("double slash", lambda d: d.replace(b"\t/opt/app/model.py\t", b"\t/opt//app/model.py\t")),
        ("dot-dot path", lambda d: d.replace(b"\t/opt/app/model.py\t", b"\t/opt/../model.py\t")),
        ("unknown type", lambda d: b"z" + d[1:]),
        ("missing field", lambda d: d.replace(b"\t", b" ", 3)),
        ("huge size", lambda d: d.replace(b"\t0\t0\t0\t", b"\t0\t0\t" + b"9" * 5000 + b"\t", 1)),
        ("bad escape", lambda d: d.replace(b"/bin/sh", b"/bin/\\xZZ")),
        ("a million extra lines", lambda d: d + b"d\t0755\t0\t0\t0\t/m\t-\t-\n" * 1_000_000),
        ("empty", lambda d: b""),
        ("one line only", lambda d: d.split(b"\n", 1)[0] + b"\n"),
    ]
}

_LAYER = {
    "layer: header byte flipped": _layer_edit(_flip_layer_header),
    "layer: truncated": _layer_edit(lambda d: d[: len(d) // 2]),
    "layer: '..' member": _layer_edit(_layer_with([("../evil", "f", b"x", "")])),
    "layer: symlink climbing out": _layer_edit(_layer_with([("opt/l", "l", b"", "../../../x")])),
    "layer: member through a symlink": _layer_edit(
        _layer_with([("opt/l", "l", b"", "/etc"), ("opt/l/passwd", "f", b"x", "")])
    ),
    "layer: hardlink to nothing": _layer_edit(_layer_with([("opt/h", "h", b"", "nope")])),
    "layer: gzip bomb": _layer_edit(lambda d: gzip.compress(bytes(64 << 20))),
    "layer: random bytes": _layer_edit(lambda d: random.Random(3).randbytes(len(d))),
}

MUTATIONS |= _BAD_UTF8 | _NESTED | _MANIFEST | _FS | _LAYER


def truncations(fx: Fixture, count: int) -> dict[str, Mutation]:
    """Cuts of the compressed file and of the tar stream at evenly spread points."""
    out: dict[str, Mutation] = {}
    for i in range(1, count + 1):
        zcut = len(fx.data) * i // (count + 1)
        tcut = len(fx.tar) * i // (count + 1)
        out[f"compressed file cut at {zcut}"] = raw(lambda fx, n=zcut: fx.data[:n])
        out[f"tar stream cut at {tcut}"] = raw(lambda fx, n=tcut: compress(fx.tar[:n]))
    return out
