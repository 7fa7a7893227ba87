"""``kit verify ARCHIVE``: prove a kit is intact, safe and true to its promises, without running it.

The rows, in order: the ``.sha256`` sidecar, safe unpacking (zstd checksum,
canonical tar form), every member against SHA256SUMS, MANIFEST.json, the
config and diffID lists, each working layer (digest, size, counts, safety),
payload sha256, ``compile()`` of Python payload files (never imported), the
generated files, then the kit's own promises (``defaults``, ``gates``,
``markers``, see :mod:`servekit.kit.expect`). Options add the release rows:
``table`` (``kind``: scripts against servekit's defaults table),
``consistency`` (``repo``), ``rebuild`` (``base``), ``smoke`` (a selftest
log) and ``repo_rev`` (a baseline). Nothing from the archive runs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from servekit.kit.checks import CheckReport, CheckResult, failed, outcome, passed, skipped
from servekit.kit.errors import KitRefused, KitTooLarge
from servekit.kit.expect import Shipped, check_expect
from servekit.kit.fsmanifest import FsState
from servekit.kit.integrity import (
    Scanned,
    compile_row,
    config_row,
    generated_row,
    guarded,
    manifest_row,
    payload_row,
    scan_layers,
)
from servekit.kit.jsonsafe import load_json
from servekit.kit.kitarchive import read_sidecar
from servekit.kit.kitdir import KitDir, open_kit
from servekit.kit.models import KitManifest
from servekit.kit.options import KitVerifyOptions
from servekit.vocabulary import sha256_file

DefaultsTable = Callable[[str], Mapping[str, str]]


@dataclass
class Verified:
    """A verify run: the report, and the extra evidence its release rows produced."""

    report: CheckReport
    rebuild: CheckReport | None = None
    manifest: KitManifest | None = None
    rootfs: FsState | None = None


def verify_kit(options: KitVerifyOptions, table: DefaultsTable | None = None) -> CheckReport:
    """Run every check on a kit archive (or unpacked folder) and report.

    ``table`` (role -> NAME -> value) replaces servekit's defaults table for ``kind``.
    """
    return run_verify(options, table).report


def run_verify(options: KitVerifyOptions, table: DefaultsTable | None = None) -> Verified:
    """:func:`verify_kit`, keeping the rebuild proof for the evidence files."""
    path = options.archive
    nonce = _check_inputs(options)
    verified = Verified(CheckReport(subject=str(path), checks=[]))
    asked = _Asked(options, table, nonce)
    try:
        with open_kit(path, options.limits) as kit:
            checks = [_sidecar(path, kit.archive_sha256), _archive(kit)]
            checks += _inside(kit, asked, verified)
    except KitRefused as exc:
        if path.is_dir() or isinstance(exc, KitTooLarge):
            raise
        checks = [_sidecar(path, None), failed("archive", [str(exc)])]
    verified.report = CheckReport(subject=str(path), checks=checks)
    return verified


@dataclass(frozen=True)
class _Asked:
    """The options with what they resolve to once: the table lookup and the nonce read."""

    options: KitVerifyOptions
    table: DefaultsTable | None
    nonce: str | None


def _check_inputs(options: KitVerifyOptions) -> str | None:
    """Bad input is exit 2 before any work: a missing kit, base, repo, log or nonce.

    Returns the nonce ``--nonce`` holds (read here so that a bad file fails first).
    """
    path = options.archive
    if not path.exists():
        raise KitRefused(f"kit {path}: no such file or folder; give a kit .tar.zst or its folder")
    if options.repo is not None and not options.repo.is_dir():
        raise KitRefused(f"--repo {options.repo}: not a folder; give the git checkout")
    if options.smoke is not None and not options.smoke.is_file():
        raise KitRefused(f"--smoke {options.smoke}: no such file; give the selftest.sh image log")
    if options.base is not None:
        from servekit.kit.image import read_image

        read_image(options.base)
    if options.nonce is None:
        return None
    from servekit.kit.smokeproof import read_nonce

    return read_nonce(options.nonce)


def _archive(kit: KitDir) -> CheckResult:
    if kit.archive_sha256 is None:
        return skipped("archive", "a folder: nothing to unpack")
    return outcome(
        "archive",
        list(kit.format_problems),
        "unpacked: files and folders only, within limits, zstd checksum and tar form canonical",
    )


def _sidecar(path: Path, have: str | None) -> CheckResult:
    if path.is_dir():
        return skipped("sidecar", "a folder has no .sha256 sidecar")
    want = read_sidecar(path)
    if want is None:
        return failed("sidecar", [f"{path.name}.sha256 is missing"])
    have = have or sha256_file(str(path))
    if want != have:
        return failed("sidecar", [f"archive sha256 {have} != sidecar {want}"])
    return passed("sidecar", f"sha256 {have}")


def _members(kit: KitDir, hashed: dict[str, str] | None = None) -> CheckResult:
    return guarded(
        "members",
        lambda: outcome("members", kit.sum_problems(hashed), "every member matches SHA256SUMS"),
    )


def _inside(kit: KitDir, asked: _Asked, verified: Verified) -> list[CheckResult]:
    try:
        manifest = kit.read_manifest()
    except KitTooLarge:
        raise
    except KitRefused as exc:
        return [_members(kit), failed("manifest", [str(exc)])]
    verified.manifest = manifest
    scanned, layer_check = scan_layers(kit, manifest)
    hashed = {file: scan.blob_sha256.split(":", 1)[1] for file, scan in scanned.files.items()}
    shipped = Shipped(scanned.captured, {p.path for p in manifest.payload}, scanned.too_large)
    rows = [
        _members(kit, hashed),
        manifest_row(manifest),
        guarded("config", lambda: config_row(kit, manifest)),
        layer_check,
        guarded("payload", lambda: payload_row(kit, manifest, scanned)),
        compile_row(scanned),
        guarded("generated", lambda: generated_row(kit, manifest)),
        *check_expect(manifest.expect, shipped),
    ]
    return rows + _release_rows(kit, manifest, scanned, asked, verified)


def _release_rows(
    kit: KitDir, m: KitManifest, scanned: Scanned, asked: _Asked, verified: Verified
) -> list[CheckResult]:
    """The rows the options ask for (each bad input fails its own row)."""
    options = asked.options
    rows: list[CheckResult] = []
    if options.kind is not None or asked.table is not None:
        rows.append(_table(scanned, asked))
    if options.repo is not None:
        from servekit.kit.consistency import consistency_row

        repo = options.repo
        rows.append(guarded("consistency", lambda: consistency_row(m, repo)))
    if options.base is not None:
        from servekit.kit.rebuild import rebuild_row

        row, verified.rebuild, verified.rootfs = rebuild_row(kit.root, options)
        rows.append(row)
    if options.smoke is not None:
        from servekit.kit.smoke import Challenge, smoke_row

        smoke = options.smoke
        challenge = Challenge(asked.nonce, verified.rootfs, options.base)
        rows.append(guarded("smoke", lambda: smoke_row(m, smoke, challenge)))
    baseline = _baseline(kit, m, options.baseline)
    return rows + ([baseline] if baseline is not None else [])


def _table(scanned: Scanned, asked: _Asked) -> CheckResult:
    from servekit.kit.scriptdefaults import script_role, table, table_row

    kind, role = asked.options.kind or "vllm-ascend", asked.options.role
    lookup = asked.table or (lambda r: table(kind, r))
    return table_row(scanned.captured, lambda path: lookup(role or script_role(path)))


def _baseline(kit: KitDir, m: KitManifest, baseline: str | None) -> CheckResult | None:
    from servekit.kit.consistency import repo_rev_row
    from servekit.kit.stamp import REPO_REV_LABEL

    try:
        config = load_json(kit.read_bytes("config.json"), "config.json")
    except KitRefused:
        config = {}
    section = config.get("config") if isinstance(config, dict) else None
    labels = section.get("Labels") if isinstance(section, dict) else None
    label = labels.get(REPO_REV_LABEL) if isinstance(labels, dict) else None
    return repo_rev_row(m, baseline, label if isinstance(label, str) else None)
