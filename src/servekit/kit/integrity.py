"""The kit against itself: config, layers, payload, compile, generated files.

Each function is one row of ``kit verify``. The working layers are read once
(:func:`scan_layers`), which also keeps the bytes of the files later checks
read: Python sources (``compile``), shell scripts (defaults) and the files the
kit's promises name. Nothing read here is ever run or imported.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field

from servekit.kit.checks import CheckResult, failed, outcome, passed, skipped
from servekit.kit.errors import KitRefused
from servekit.kit.fsmanifest import Entry, FsState, parse_line, parse_manifest
from servekit.kit.jsonsafe import load_json
from servekit.kit.kitdir import KitDir
from servekit.kit.layertar import LayerScan, ScanOptions, scan_layer
from servekit.kit.models import KitManifest
from servekit.kit.render import render_all
from servekit.kit.scriptdefaults import is_shell_script


@dataclass
class Scanned:
    """Working layers read back from the kit."""

    files: dict[str, LayerScan] = field(default_factory=dict)
    captured: dict[str, bytes] = field(default_factory=dict)
    too_large: list[str] = field(default_factory=list)
    final: dict[str, Entry] = field(default_factory=dict)
    recorded: dict[str, Entry] = field(default_factory=dict)


def guarded(name: str, check: Callable[[], CheckResult]) -> CheckResult:
    """Run one check; a refused input is that check's failure, not the end of verify."""
    try:
        return check()
    except KitRefused as exc:
        return failed(name, [str(exc)])


def config_row(kit: KitDir, m: KitManifest) -> CheckResult:
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


def _wanted(m: KitManifest) -> Callable[[str, bytes], bool]:
    """Python sources, shell scripts and files a promise names: what later checks read."""
    promised = m.expect.files() if m.expect else set()
    return lambda path, head: (
        path.endswith(".py") or path in promised or is_shell_script(path, head)
    )


def scan_layers(kit: KitDir, m: KitManifest) -> tuple[Scanned, CheckResult]:
    """Read every working layer once: digests, counts, safety rules, kept file bytes."""
    scanned = Scanned()
    problems: list[str] = []
    try:
        scanned.recorded = _recorded(kit)
        state = FsState()  # the recorded filesystem, so hardlinks into base layers resolve
        for entry in scanned.recorded.values():
            state.put(entry)
        for layer in m.layers:
            path = kit.member(layer.file)
            with path.open("rb") as blob:
                opts = ScanOptions(f"kit layer {layer.file}", True, kit.limits, _wanted(m))
                scan = scan_layer(blob, state, opts)
            problems += _layer_problems(layer.file, scan, layer.model_dump())
            scanned.files[layer.file] = scan
            scanned.captured.update(scan.captured)
            scanned.too_large += scan.too_large
            scanned.final.update(scan.files)
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


def _facts(entry: Entry | None) -> tuple[str, int, str, int, int] | None:
    if entry is None:
        return None
    return entry.sha256, entry.size, f"{entry.mode:04o}", entry.uid, entry.gid


def payload_row(kit: KitDir, m: KitManifest, scanned: Scanned) -> CheckResult:
    problems = []
    recorded = scanned.recorded
    if len(recorded) != m.image.fs_entries:
        problems.append(
            f"fs-manifest.txt has {len(recorded)} entries, MANIFEST says {m.image.fs_entries}"
        )
    for item in m.payload:
        want = (item.sha256, item.size, item.mode, item.uid, item.gid)
        if _facts(scanned.final.get(item.path)) != want:
            problems.append(f"{item.path}: the layer's file (sha256, size, mode, owner) differs")
        if _facts(recorded.get(item.path)) != want:
            problems.append(f"{item.path}: fs-manifest.txt disagrees with MANIFEST payload")
    listed = kit.text("payload.sha256").splitlines()
    if listed != [f"{p.sha256}  {p.path.lstrip('/')}" for p in m.payload]:
        problems.append("payload.sha256 disagrees with MANIFEST payload")
    if len(m.payload) != m.image.payload_count:
        problems.append("image.payload_count disagrees with the payload list")
    return outcome("payload", problems, f"{len(m.payload)} file(s) sha256 equal")


def compile_row(scanned: Scanned) -> CheckResult:
    """``compile()`` every Python payload file (bytes only: nothing is imported or run)."""
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
        return skipped("compile", "no Python payload files")
    return outcome("compile", problems, f"{len(sources)} Python file(s) compile")


def generated_row(kit: KitDir, m: KitManifest) -> CheckResult:
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


def manifest_row(m: KitManifest) -> CheckResult:
    return passed("manifest", f"{m.name}: {len(m.layers)} working layer(s)")
