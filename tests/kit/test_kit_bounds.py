"""MANIFEST.json past its bounds, and payload files named like OCI whiteouts.

A MANIFEST listing 10^6 files used to cost 28 s and 3 GB before a MemoryError
(``kit verify``) or exit 0 (``kit inspect``); it must be one line and exit 2,
read in bounded memory. A payload named ``.wh.x`` became a whiteout hiding base
files while verify passed; it must be refused at build and at verify.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from tests.helpers.cli import servekit_cli
from tests.helpers.refusal import one_line_error

from servekit.errors import UsageError
from servekit.kit.build import BuildResult, build_kit
from servekit.kit.models import MAX_MANIFEST_BYTES, MAX_PAYLOAD_FILES
from servekit.kit.options import KitBuildOptions, KitVerifyOptions
from servekit.kit.verify import verify_kit

from .kitedit import edit_kit


def with_payload(entries: int, path_width: int = 8):  # type: ignore[no-untyped-def]
    def change(root: Path) -> None:
        data = json.loads((root / "MANIFEST.json").read_text())
        one = data["payload"][0]
        data["payload"] = [{**one, "path": f"/opt/{i:0{path_width}d}"} for i in range(entries)]
        (root / "MANIFEST.json").write_text(json.dumps(data))

    return change


@pytest.mark.parametrize(
    ("entries", "width", "needle"),
    [
        (MAX_PAYLOAD_FILES + 1, 8, f"more than the {MAX_PAYLOAD_FILES} a kit may list"),
        (40_000, 1_000, f"larger than {MAX_MANIFEST_BYTES} bytes"),
    ],
)
def test_a_manifest_past_its_bounds_is_one_line_and_exit_2(
    kit: BuildResult, tmp_path: Path, entries: int, width: int, needle: str
) -> None:
    hostile = edit_kit(kit.archive, tmp_path / "big.tar.zst", with_payload(entries, width))
    one_line_error(
        servekit_cli("kit", "verify", str(hostile), timeout=300), "MANIFEST.json", needle
    )
    one_line_error(
        servekit_cli("kit", "inspect", str(hostile), timeout=300), "MANIFEST.json", needle
    )


def test_a_manifest_just_inside_the_entry_bound_is_read(kit: BuildResult, tmp_path: Path) -> None:
    """Positive control: the count alone is what refuses (this one reads, and fails a check)."""
    near = edit_kit(kit.archive, tmp_path / "near.tar.zst", with_payload(1_000))
    report = verify_kit(KitVerifyOptions(archive=near))
    assert not report.ok
    assert {c.name for c in report.checks} >= {"manifest", "payload"}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / "tree").mkdir(parents=True)
    (root / "tree" / "ok.py").write_text("A = 1\n")
    (root / "serve.sh").write_text("#!/bin/sh\n")
    return root


@pytest.mark.parametrize(
    ("files", "make"),
    [
        ([{"src": "serve.sh", "dest": "/etc/.wh.passwd"}], None),
        ([{"src": "serve.sh", "dest": "/var/cache/.wh..wh..opq"}], None),
        ([{"dest": "/opt/.wh.app", "symlink": "x"}], None),
        ([{"src": "tree", "dest": "/opt/app"}], "tree/.wh.lib"),
        ([{"src": "tree", "dest": "/opt/app"}], "tree/sub/.wh..wh..opq"),
    ],
)
def test_payload_files_named_like_whiteouts_are_refused_at_build(
    images: dict[str, Path],
    project: Path,
    tmp_path: Path,
    files: list[dict[str, str]],
    make: str | None,
) -> None:
    if make is not None:
        (project / make).parent.mkdir(parents=True, exist_ok=True)
        (project / make).write_text("x")
    spec = project / "kit.yaml"
    spec.write_text(yaml.safe_dump({"files": files}))
    req = KitBuildOptions(base=str(images["base_oci"]), payload=spec, out=tmp_path / "p.tar.zst")
    with pytest.raises(UsageError, match="reads as a whiteout"):
        build_kit(req)
    assert not (tmp_path / "p.tar.zst").exists()


def test_the_same_spec_without_the_whiteout_name_builds(
    images: dict[str, Path], project: Path, tmp_path: Path
) -> None:
    """Positive control: only the name refuses the spec above."""
    (project / "tree" / "wh.lib").write_text("x")
    spec = project / "kit.yaml"
    spec.write_text(yaml.safe_dump({"files": [{"src": "tree", "dest": "/opt/app"}]}))
    req = KitBuildOptions(base=str(images["base_oci"]), payload=spec, out=tmp_path / "p.tar.zst")
    assert build_kit(req).archive.exists()


@pytest.mark.parametrize("name", [".wh.passwd", ".wh..wh..opq"])
def test_a_kit_whose_manifest_ships_a_whiteout_name_fails_verify(
    kit: BuildResult, tmp_path: Path, name: str
) -> None:
    def change(root: Path) -> None:
        data = json.loads((root / "MANIFEST.json").read_text())
        data["payload"][0]["path"] = f"/etc/{name}"
        (root / "MANIFEST.json").write_text(json.dumps(data))

    report = verify_kit(
        KitVerifyOptions(archive=edit_kit(kit.archive, tmp_path / "wh.tar.zst", change))
    )
    manifest = next(c for c in report.checks if c.name == "manifest")
    assert manifest.status == "fail" and "whiteout name" in " ".join(manifest.problems)
    assert not report.ok
