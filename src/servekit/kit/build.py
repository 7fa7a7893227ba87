"""``kit build``: base + (source image | payload spec) -> a deterministic kit.

Both routes end in the same place: working layer tars in a staging folder, the
source image's applied filesystem state, the target config bytes. From those
:mod:`servekit.kit.kitwrite` writes MANIFEST.json, the side files and the archive.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

import servekit
from servekit.errors import UsageError, first_error
from servekit.kit.apply import apply_image, apply_layer, first_difference
from servekit.kit.configdelta import apply_delta, compute_delta
from servekit.kit.fsmanifest import FILE, Entry, FsState
from servekit.kit.image import read_image
from servekit.kit.imagetypes import Image, canonical_json
from servekit.kit.kitwrite import write_archive, write_stage
from servekit.kit.layertar import LayerScan, ScanOptions, scan_layer
from servekit.kit.models import (
    KIT_NAME,
    BaseInfo,
    CodeBaseline,
    ConfigDelta,
    Generator,
    ImageInfo,
    KitExpect,
    KitManifest,
    LayerInfo,
    PayloadFile,
)
from servekit.kit.options import KitBuildOptions
from servekit.kit.scratch import scratch_dir
from servekit.kit.stamp import REPO_REV_LABEL


@dataclass(frozen=True)
class BuildResult:
    """The archive written, its digest and the manifest it carries."""

    archive: Path
    sha256: str
    manifest: KitManifest


@dataclass
class _Working:
    """What a build route hands to the kit writer."""

    state: FsState
    config_bytes: bytes
    delta: ConfigDelta
    layers: list[LayerInfo] = field(default_factory=list)
    files: set[str] = field(default_factory=set)
    sources: dict[str, Path] = field(default_factory=dict)
    expect: KitExpect | None = None

    def shipped(self) -> dict[str, Entry]:
        """The regular files the working layers deliver, by path (sorted)."""
        entries = {path: self.state.get(path) for path in sorted(self.files)}
        return {p: e for p, e in entries.items() if e is not None and e.kind == FILE}


def _layer_info(scan: LayerScan, file: str) -> LayerInfo:
    return LayerInfo(
        file=file,
        diff_id=scan.diff_id,
        sha256=scan.blob_sha256,
        compressed_size=scan.compressed_size,
        raw_size=scan.raw_size,
        entries=scan.entries,
        whiteouts=sorted(scan.whiteouts),
        opaque_dirs=sorted(scan.opaque_dirs),
    )


def _from_source(req: KitBuildOptions, base: Image, stage: Path) -> _Working:
    assert req.source is not None
    source = read_image(req.source)
    problem = first_difference(base.diff_ids, source.diff_ids, "source")
    if problem is not None:
        raise UsageError(f"--base is not the base of --source: {problem}")
    work = _Working(FsState(), source.config_bytes, compute_delta(base.config, source.config))
    for i in range(len(source.layers)):
        working = i >= len(base.layers)
        file = f"layers/{source.layers[i].diff_id.split(':', 1)[1]}.tar"
        what = f"{req.source} layer {i + 1}"
        if not working:
            apply_layer(source, i, work.state, ScanOptions(what, limits=req.limits))
            continue
        with (stage / file).open("wb") as tee:
            scan = apply_layer(
                source, i, work.state, ScanOptions(what, True, req.limits, None, tee)
            )
        work.layers.append(_layer_info(scan, file))
        work.files.update(scan.files)
    return work


def _from_payload(
    req: KitBuildOptions, base: Image, stage: Path, code: CodeBaseline | None
) -> _Working:
    from servekit.kit.layerwrite import write_layer
    from servekit.kit.payload import expand, load_spec

    assert req.payload is not None
    spec = load_spec(req.payload)
    state = apply_image(base, req.limits)
    members = expand(spec, req.payload_root or req.payload.parent, state)
    sources = {m.path: m.source for m in members if m.source is not None}
    tmp = stage / "layers" / ".new.tar"
    with tmp.open("wb") as out:
        write_layer(out, members)
    with tmp.open("rb") as blob:
        scan = scan_layer(blob, state, ScanOptions("payload layer", True, req.limits))
    file = f"layers/{scan.diff_id.split(':', 1)[1]}.tar"
    tmp.replace(stage / file)
    delta = spec.config
    if code is not None:
        delta = delta.model_copy(update={"labels": {**delta.labels, REPO_REV_LABEL: code.repo_rev}})
    config = _payload_config(base.config, delta, scan.diff_id, req, spec.name)
    layers = [_layer_info(scan, file)]
    return _Working(
        state, canonical_json(config), delta, layers, set(scan.files), sources, spec.expect
    )


def _payload_config(
    base: dict[str, Any], delta: ConfigDelta, diff_id: str, req: KitBuildOptions, name: str | None
) -> dict[str, Any]:
    config = apply_delta(base, delta)
    config.setdefault("rootfs", {"type": "layers", "diff_ids": []})["diff_ids"].append(diff_id)
    entry: dict[str, Any] = {"created_by": f"servekit kit build {name or req.out.name}"}
    if req.date:
        entry["created"] = config["created"] = req.date
    config.setdefault("history", []).append(entry)
    return config


def _payload_files(work: _Working, sources: dict[str, str]) -> list[PayloadFile]:
    return [
        PayloadFile(
            path=path,
            sha256=entry.sha256,
            size=entry.size,
            mode=f"{entry.mode:04o}",
            uid=entry.uid,
            gid=entry.gid,
            source=sources.get(path),
        )
        for path, entry in work.shipped().items()
    ]


def kit_name(req: KitBuildOptions) -> str:
    """The kit's folder name: --name, else the archive name without .tar.zst."""
    if req.name:
        name = req.name
    else:
        name = req.out.name
        for suffix in (".tar.zst", ".tzst"):
            name = name.removesuffix(suffix)
    if not KIT_NAME.fullmatch(name):
        raise UsageError(
            f"--name {name[:40]!r}: give a plain kit name (letters, digits, . _ + -)"
            " such as mykit-v1"
        )
    return name


def build_kit(req: KitBuildOptions) -> BuildResult:
    """Build a kit archive and its sidecar; return what was written."""
    if (req.source is None) == (req.payload is None):
        raise UsageError("kit build: give exactly one of --source IMAGE or --payload SPEC")
    if not req.out.name.endswith((".tar.zst", ".tzst")):
        raise UsageError(f"--out {req.out}: the kit file name must end in .tar.zst")
    name = kit_name(req)
    code = _code(req)
    req = req.model_copy(update={"date": _created(req)})
    base = read_image(req.base)
    with scratch_dir() as tmp:
        stage = tmp / name
        (stage / "layers").mkdir(parents=True)
        if req.source is not None:
            work = _from_source(req, base, stage)
        else:
            work = _from_payload(req, base, stage, code)
        work.expect = _expect(req, work)
        manifest = _manifest(req, name, base, work, code)
        write_stage(stage, manifest, work.config_bytes, work.state.lines())
        return BuildResult(req.out, write_archive(req.out, stage, name), manifest)


def _expect(req: KitBuildOptions, work: _Working) -> KitExpect | None:
    """The kit's promises (payload spec or --expect), every file they name a payload file."""
    from servekit.kit.payload import load_expect

    if req.expect is not None and work.expect is not None:
        raise UsageError("--expect: the payload spec has an expect: section already; give one")
    expect = load_expect(req.expect) if req.expect is not None else work.expect
    if expect is None:
        return None
    missing = sorted(expect.files() - work.shipped().keys())
    if missing:
        raise UsageError(
            f"expect: {missing[0]} is not a file this kit ships; promises can name payload files only"
        )
    return expect


def _created(req: KitBuildOptions) -> str | None:
    """The 'created' stamp: --date, else SOURCE_DATE_EPOCH, else the repo's HEAD date."""
    if req.date:
        return req.date
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    if epoch:
        if not epoch.isdigit():
            raise UsageError(f"SOURCE_DATE_EPOCH={epoch!r}: give whole seconds since 1970")
        return datetime.fromtimestamp(int(epoch), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    if req.repo is not None:
        from servekit.kit.stamp import commit_date

        return commit_date(req.repo)
    return None


def _code(req: KitBuildOptions) -> CodeBaseline | None:
    if req.repo is None:
        if req.engines():
            raise UsageError("--engine needs --repo (engine versions belong to the code baseline)")
        return None
    from servekit.kit.stamp import code_baseline

    return code_baseline(req.repo, req.engines())


def _base_reference(req: KitBuildOptions, base: Image) -> str:
    """--base-ref, else the image's own name when it is a full reference, else --base."""
    if req.base_ref:
        return req.base_ref
    if base.name and (":" in base.name or "/" in base.name):
        return base.name
    return req.base


def _manifest(
    req: KitBuildOptions, name: str, base: Image, work: _Working, code: CodeBaseline | None
) -> KitManifest:
    """The MANIFEST; a value it refuses (say a base reference over two lines) is exit 2."""
    try:
        payload = _payload_files(work, _repo_sources(req, work))
        return KitManifest(
            name=name,
            generator=Generator(name="servekit", version=servekit.__version__),
            created=req.date,
            base=BaseInfo(
                reference=_base_reference(req, base),
                image_id=base.image_id,
                layer_count=len(base.layers),
                diff_ids=base.diff_ids,
            ),
            image=ImageInfo(
                source=req.source,
                image_id="sha256:" + hashlib.sha256(work.config_bytes).hexdigest(),
                layer_count=len(base.layers) + len(work.layers),
                fs_entries=len(work.state.entries),
                payload_count=len(payload),
            ),
            layers=work.layers,
            payload=payload,
            config_delta=work.delta,
            code=code,
            expect=work.expect,
        )
    except ValidationError as exc:
        where, msg = first_error(exc, "")
        raise UsageError(f"kit build: {where} {msg} (fix the input that gives it)") from None


def _repo_sources(req: KitBuildOptions, work: _Working) -> dict[str, str]:
    """Payload path -> its file in the repository (for ``kit verify --repo``)."""
    if req.repo is None:
        return {}
    from servekit.kit.sources import by_content, by_path

    if work.sources:
        return by_path(req.repo, work.sources)
    return by_content(req.repo, {p: e.sha256 for p, e in work.shipped().items()})
