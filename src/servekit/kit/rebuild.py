"""``kit rebuild KIT --base IMAGE --out OCI_DIR|FILE.tar``: the image, proven.

The base's diffIDs must equal the kit's record (fatal otherwise, naming the
first difference). The result is written to a staging place next to ``--out``,
read back, and proven: its diffIDs, its image id, a filesystem manifest equal to
the source's entry for entry, and the payload sha256. Only a proven image is
moved into place.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from servekit.errors import UsageError
from servekit.kit.apply import apply_image, first_difference
from servekit.kit.checks import CheckReport, CheckResult, counted, failed, outcome
from servekit.kit.errors import KitRefused
from servekit.kit.fsmanifest import FsState, diff_lines, parse_manifest
from servekit.kit.image import read_image
from servekit.kit.imagetypes import OCI_LAYER_GZIP, OCI_LAYER_TAR, Image, LayerBlob
from servekit.kit.kitdir import KitDir, open_kit
from servekit.kit.models import KitManifest
from servekit.kit.options import KitRebuildOptions, KitVerifyOptions
from servekit.kit.streams import Limits

REVISION = "org.opencontainers.image.revision"


def _kit_layer(path: Path, diff_id: str, compress: bool) -> LayerBlob:
    """A kit layer as a blob: the plain tar, or gzip (mtime 0, no name) for OCI output."""

    @contextlib.contextmanager
    def gzipped() -> Iterator[BinaryIO]:
        with tempfile.TemporaryFile() as spool, path.open("rb") as src:
            with gzip.GzipFile(filename="", mode="wb", fileobj=spool, mtime=0) as zout:
                shutil.copyfileobj(src, zout, 1 << 20)
            spool.seek(0)
            yield spool

    if compress:
        return LayerBlob(gzipped, 0, OCI_LAYER_GZIP, None, diff_id)
    return LayerBlob(lambda: path.open("rb"), path.stat().st_size, OCI_LAYER_TAR, diff_id, diff_id)


def check_base(manifest: KitManifest, base: Image) -> None:
    """Refuse a base whose diffIDs are not exactly the kit's record."""
    problem = first_difference(manifest.base.diff_ids, base.diff_ids, "--base")
    if problem is None and len(base.diff_ids) != len(manifest.base.diff_ids):
        problem = f"--base has {len(base.diff_ids)} layers, the kit's base has {manifest.base.layer_count}"
    if problem is not None:
        raise UsageError(f"--base is not this kit's base: {problem}")


def rebuild_kit(req: KitRebuildOptions, keep: list[FsState] | None = None) -> CheckReport:
    """Rebuild, prove, and move into place only when every check passes.

    ``keep`` receives the rebuilt image's filesystem as it was read back (the
    smoke proof is recomputed from it).
    """
    if req.out.exists():
        raise UsageError(f"--out {req.out} exists; give a new path")
    if req.gzip and req.out.name.endswith(".tar"):
        raise UsageError("--gzip applies to OCI output; docker-archive layers are written plain")
    with open_kit(req.kit, req.limits) as kit:
        problems = kit.sum_problems()
        if problems:
            raise KitRefused(f"kit members do not match SHA256SUMS: {problems[0]}; run kit verify")
        manifest = kit.read_manifest()
        base = read_image(req.base)
        check_base(manifest, base)
        layers = list(base.layers) + [
            _kit_layer(kit.member(layer.file), layer.diff_id, req.gzip) for layer in manifest.layers
        ]
        config = kit.read_bytes("config.json")
        with _staging(req.out) as staged:
            _write(staged, req, manifest, config, layers)
            report = prove(kit, manifest, staged, req.limits, keep).model_copy(
                update={"subject": str(req.out)}
            )
            if report.ok:
                os.replace(staged, req.out)
    return report


@contextlib.contextmanager
def _staging(out: Path) -> Iterator[Path]:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        yield tmp / out.name
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _write(
    staged: Path, req: KitRebuildOptions, m: KitManifest, config: bytes, layers: list[LayerBlob]
) -> None:
    if req.out.name.endswith(".tar"):
        from servekit.kit.dockerarchive import write_docker_archive

        with staged.open("wb") as fh:
            write_docker_archive(fh, config, layers, req.tag, req.limits)
        return
    from servekit.kit.oci import write_oci

    annotations = {REVISION: m.code.repo_rev} if m.code else None
    write_oci(staged, config, layers, req.tag or "latest", annotations)


def prove(
    kit: KitDir, m: KitManifest, image_ref: Path, limits: Limits, keep: list[FsState] | None = None
) -> CheckReport:
    """Read a rebuilt image back and compare it with the kit's record."""
    image = read_image(str(image_ref))
    want = m.base.diff_ids + [layer.diff_id for layer in m.layers]
    same_id = image.image_id == m.image.image_id
    state = apply_image(image, limits, strict_from=len(m.base.diff_ids))
    if keep is not None:
        keep.append(state)
    checks = [
        outcome(
            "diffids", _diff_problems(want, image.diff_ids), f"{len(want)}/{len(want)} layers equal"
        ),
        outcome(
            "image id",
            [] if same_id else [f"{image.image_id} != {m.image.image_id}"],
            f"equal ({m.image.image_id[:19]})",
        ),
        _fs_check(kit, state),
        _payload_check(m, state),
    ]
    return CheckReport(subject=str(image_ref), checks=checks)


def _diff_problems(want: list[str], have: list[str]) -> list[str]:
    problem = first_difference(want, have, "rebuilt image")
    if problem is None and len(have) != len(want):
        problem = f"rebuilt image has {len(have)} layers, expected {len(want)}"
    return [problem] if problem else []


def _fs_check(kit: KitDir, state: FsState) -> CheckResult:
    want = parse_manifest(kit.text("fs-manifest.txt"), kit.limits.max_entries)
    have = state.lines()
    problems = diff_lines(want, have)
    if len(want) != len(have):
        problems.insert(0, f"{len(have)} entries, the source had {len(want)}")
    return outcome("filesystem", problems, f"{len(have)} entries, 0 differences")


def _payload_check(m: KitManifest, state: FsState) -> CheckResult:
    problems = []
    for item in m.payload:
        entry = state.get(item.path)
        have = (entry.sha256, entry.size, f"{entry.mode:04o}") if entry else None
        if have != (item.sha256, item.size, item.mode):
            problems.append(f"{item.path}: differs from the kit's payload record")
    n = len(m.payload)
    return outcome("payload", problems, f"{n}/{n} file(s) sha256, size and mode equal")


def rebuild_row(
    kit: Path, options: KitVerifyOptions
) -> tuple[CheckResult, CheckReport | None, FsState | None]:
    """``kit verify --base``: rebuild into a scratch folder, prove it, and summarise as one row.

    ``kit`` is the unpacked kit; the base and the stream bounds are verify's own.

    A base that is not the kit's base is this row's failure (not exit 2), so
    the rest of the verify table still shows. The rebuilt filesystem comes
    back only when every rebuild check passed (the smoke proof needs the
    proven image, not a damaged one).
    """
    from servekit.kit.scratch import scratch_dir

    assert options.base is not None, "the rebuild row runs only with --base"
    keep: list[FsState] = []
    with scratch_dir() as tmp:
        try:
            req = KitRebuildOptions(
                kit=kit,
                base=options.base,
                out=tmp / "rebuilt",
                max_size=options.max_size,
                max_ratio=options.max_ratio,
            )
            report = rebuild_kit(req, keep)
        except UsageError as exc:
            return failed("rebuild", [str(exc)]), None, None
    kept = sum(c.status == "pass" for c in report.checks)
    problems = [f"{c.name}: {c.detail}" for c in report.checks if c.status == "fail"]
    items = [f"{c.status} {c.name}: {c.detail}" for c in report.checks]
    detail = "; ".join(f"{c.name} {c.detail}" for c in report.checks)
    row = counted("rebuild", kept, len(report.checks), problems, items, what="rebuild checks")
    state = keep[0] if keep and report.ok else None
    return row.model_copy(update={"detail": f"{row.ratio} checks: {detail}"}), report, state
