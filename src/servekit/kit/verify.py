"""``kit verify ARCHIVE``: prove a kit is intact and safe without running it.

Checks, in order: the ``.sha256`` sidecar, safe unpacking, every member against
SHA256SUMS, MANIFEST.json, the config and diffID lists, each working layer
(digest, size, counts, safety rules), payload sha256, ``compile()`` of Python
payload files (never imported), script defaults against servekit's table, and
the generated files against their manifest. Nothing from the archive runs.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from servekit.errors import UsageError
from servekit.kit.checks import CheckReport, CheckResult, failed, outcome, passed
from servekit.kit.errors import KitRefused
from servekit.kit.fsmanifest import Entry, FsState, parse_line, parse_manifest
from servekit.kit.jsonsafe import load_json
from servekit.kit.kitarchive import read_sidecar
from servekit.kit.kitdir import KitDir, open_kit
from servekit.kit.layertar import LayerScan, ScanOptions, scan_layer
from servekit.kit.models import KitManifest
from servekit.kit.render import render_all
from servekit.kit.scriptdefaults import (
    DEFAULT_KIND,
    find_defaults,
    is_shell_script,
    mismatches,
    script_role,
    table,
)
from servekit.kit.streams import Limits, sha256_file


@dataclass
class _Scanned:
    """Working layers read back from the kit."""

    files: dict[str, LayerScan] = field(default_factory=dict)
    captured: dict[str, bytes] = field(default_factory=dict)
    too_large: list[str] = field(default_factory=list)
    final: dict[str, str] = field(default_factory=dict)
    recorded: dict[str, Entry] = field(default_factory=dict)


DefaultsTable = Callable[[str], Mapping[str, str]]


def verify_kit(
    path: Path,
    limits: Limits | None = None,
    kind: str = DEFAULT_KIND,
    role: str | None = None,
    defaults: DefaultsTable | None = None,
) -> CheckReport:
    """Run every check on a kit archive (or unpacked folder) and report.

    Script defaults are compared with the table for ``kind`` and ``role`` (by
    default each script's role comes from its name: decode, prefill or mixed);
    ``defaults`` replaces servekit's table (role -> NAME -> value).
    """
    limits = limits or Limits()
    lookup = defaults or (lambda r: table(kind, r))
    if not path.exists():
        raise KitRefused(f"kit {path}: no such file or folder; give a kit .tar.zst or its folder")
    try:
        with open_kit(path, limits) as kit:
            checks = [_sidecar(path, kit.archive_sha256), _archive(kit)]
            checks += _inside(kit, limits, lambda p: lookup(role or script_role(p)))
    except KitRefused as exc:
        if path.is_dir():
            raise
        checks = [_sidecar(path, None), failed("archive", [str(exc)])]
    return CheckReport(subject=str(path), checks=checks)


def _archive(kit: KitDir) -> CheckResult:
    if kit.archive_sha256 is None:
        return CheckResult(name="archive", status="skip", detail="a folder: nothing to unpack")
    return outcome(
        "archive",
        list(kit.format_problems),
        "unpacked: files and folders only, within limits, zstd checksum and tar form canonical",
    )


def _guarded(name: str, check: Callable[[], CheckResult]) -> CheckResult:
    """Run one check; a refused input is that check's failure, not the end of verify."""
    try:
        return check()
    except KitRefused as exc:
        return failed(name, [str(exc)])


def _sidecar(path: Path, have: str | None) -> CheckResult:
    if path.is_dir():
        return CheckResult(name="sidecar", status="skip", detail="a folder has no .sha256 sidecar")
    want = read_sidecar(path)
    if want is None:
        return failed("sidecar", [f"{path.name}.sha256 is missing"])
    have = have or sha256_file(str(path))
    if want != have:
        return failed("sidecar", [f"archive sha256 {have} != sidecar {want}"])
    return passed("sidecar", f"sha256 {have}")


def _members(kit: KitDir, hashed: dict[str, str] | None = None) -> CheckResult:
    return _guarded(
        "members",
        lambda: outcome("members", kit.sum_problems(hashed), "every member matches SHA256SUMS"),
    )


def _inside(kit: KitDir, limits: Limits, defaults: DefaultsTable) -> list[CheckResult]:
    try:
        manifest = kit.read_manifest()
    except KitRefused as exc:
        return [_members(kit), failed("manifest", [str(exc)])]
    scanned, layer_check = _layers(kit, manifest, limits)
    hashed = {file: scan.blob_sha256.split(":", 1)[1] for file, scan in scanned.files.items()}
    return [
        _members(kit, hashed),
        passed("manifest", f"{manifest.name}: {len(manifest.layers)} working layer(s)"),
        _guarded("config", lambda: _config(kit, manifest)),
        layer_check,
        _guarded("payload", lambda: _payload(kit, manifest, scanned)),
        _compile(scanned),
        _defaults(scanned, defaults),
        _guarded("generated", lambda: _generated(kit, manifest)),
    ]


def _config(kit: KitDir, m: KitManifest) -> CheckResult:
    problems = []
    data = kit.read_bytes("config.json")
    config = load_json(data, "config.json")
    rootfs = config.get("rootfs") if isinstance(config, dict) else None
    diff_ids = rootfs.get("diff_ids") if isinstance(rootfs, dict) else None
    if not isinstance(diff_ids, list):
        return failed("config", ["config.json has no rootfs.diff_ids list"])
    if "sha256:" + hashlib.sha256(data).hexdigest() != m.image.image_id:
        problems.append("config.json does not hash to image.image_id")
    if diff_ids != m.base.diff_ids + [layer.diff_id for layer in m.layers]:
        problems.append("config rootfs.diff_ids != base diffIDs + working layer diffIDs")
    listed = kit.text("base-diffids.txt").split()
    if listed != m.base.diff_ids or m.base.layer_count != len(m.base.diff_ids):
        problems.append("base-diffids.txt or base.layer_count disagrees with MANIFEST base")
    if m.image.layer_count != len(diff_ids):
        problems.append("image.layer_count disagrees with config")
    return outcome("config", problems, f"image id {m.image.image_id[:19]}, {len(diff_ids)} layers")


def _recorded(kit: KitDir) -> dict[str, Entry]:
    """fs-manifest.txt as path -> entry."""
    lines = parse_manifest(kit.text("fs-manifest.txt"), kit.limits.max_entries)
    entries = (parse_line(line) for line in lines)
    return {entry.path: entry for entry in entries}


def _seed_state(recorded: dict[str, Entry]) -> FsState:
    """The recorded filesystem, so hardlinks into base layers resolve."""
    state = FsState()
    for entry in recorded.values():
        state.put(entry)
    return state


def _wanted(path: str, head: bytes) -> bool:
    """Python sources and shell scripts: the files compile and defaults read."""
    return path.endswith(".py") or is_shell_script(path, head)


def _layers(kit: KitDir, m: KitManifest, limits: Limits) -> tuple[_Scanned, CheckResult]:
    scanned = _Scanned()
    problems: list[str] = []
    try:
        scanned.recorded = _recorded(kit)
        state = _seed_state(scanned.recorded)
        for layer in m.layers:
            path = kit.member(layer.file)
            with path.open("rb") as blob:
                opts = ScanOptions(f"kit layer {layer.file}", True, limits, _wanted)
                scan = scan_layer(blob, state, opts)
            problems += _layer_problems(layer.file, scan, layer.model_dump())
            scanned.files[layer.file] = scan
            scanned.captured.update(scan.captured)
            scanned.too_large += scan.too_large
            scanned.final.update({p: e.sha256 for p, e in scan.files.items()})
    except KitRefused as exc:
        problems.append(str(exc))
    return scanned, outcome("layers", problems, f"{len(m.layers)} layer(s): digests, sizes, safe")


def _layer_problems(file: str, scan: LayerScan, want: dict[str, object]) -> list[str]:
    have = {
        "diff_id": scan.diff_id,
        "raw_size": scan.raw_size,
        "entries": scan.entries,
        "whiteouts": sorted(scan.whiteouts),
        "opaque_dirs": sorted(scan.opaque_dirs),
    }
    return [
        f"{file}: {key} is {value!r}, MANIFEST says {want[key]!r}"
        for key, value in have.items()
        if want[key] != value
    ]


def _payload(kit: KitDir, m: KitManifest, scanned: _Scanned) -> CheckResult:
    problems = []
    recorded = scanned.recorded
    if len(recorded) != m.image.fs_entries:
        problems.append(
            f"fs-manifest.txt has {len(recorded)} entries, MANIFEST says {m.image.fs_entries}"
        )
    for item in m.payload:
        if scanned.final.get(item.path) != item.sha256:
            problems.append(f"{item.path}: layer content sha256 differs from MANIFEST")
        rec = recorded.get(item.path)
        if rec is None or rec.sha256 != item.sha256 or f"{rec.mode:04o}" != item.mode:
            problems.append(f"{item.path}: fs-manifest.txt disagrees with MANIFEST payload")
    listed = kit.text("payload.sha256").splitlines()
    if listed != [f"{p.sha256}  {p.path.lstrip('/')}" for p in m.payload]:
        problems.append("payload.sha256 disagrees with MANIFEST payload")
    if len(m.payload) != m.image.payload_count:
        problems.append("image.payload_count disagrees with the payload list")
    return outcome("payload", problems, f"{len(m.payload)} file(s) sha256 equal")


def _compile(scanned: _Scanned) -> CheckResult:
    sources = {p: d for p, d in scanned.captured.items() if p.endswith(".py")}
    problems = [
        f"{p}: too large to check here (16 MiB per file, 512 MiB in all)" for p in scanned.too_large
    ]
    for path, data in sorted(sources.items()):
        try:
            compile(data, path, "exec", dont_inherit=True)
        except (SyntaxError, ValueError) as exc:
            problems.append(f"{path}: {exc}")
        except (RecursionError, MemoryError):
            problems.append(f"{path}: nests too deeply to compile")
    if not sources and not problems:
        return CheckResult(name="compile", status="skip", detail="no Python payload files")
    return outcome("compile", problems, f"{len(sources)} Python file(s) compile")


def _defaults(scanned: _Scanned, defaults: DefaultsTable) -> CheckResult:
    """Script defaults against the table for each script's role."""
    problems: list[str] = []
    compared = 0
    try:
        for path, data in sorted(scanned.captured.items()):
            if not is_shell_script(path, data):
                continue
            expected = defaults(path)
            found = [
                d
                for d in find_defaults(path, data.decode("utf-8", "replace"))
                if d.name in expected
            ]
            compared += len(found)
            problems += mismatches(found, expected)
    except UsageError as exc:
        return failed("defaults", [str(exc)])
    if not compared:
        return CheckResult(
            name="defaults", status="skip", detail="no shipped script sets a table default"
        )
    return outcome("defaults", problems, f"{compared} script default(s) equal the table")


def _generated(kit: KitDir, m: KitManifest) -> CheckResult:
    problems = []
    for name, text in render_all(m).items():
        try:
            same = kit.read_bytes(name) == text.encode("utf-8")
        except KitRefused:
            same = False
        if not same:
            problems.append(f"{name} differs from what MANIFEST.json generates")
    return outcome(
        "generated", problems, "README, Dockerfile, rebuild.sh, selftest.sh match MANIFEST"
    )
