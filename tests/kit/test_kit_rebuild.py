"""kit rebuild: exact base required, result proven, only a proven image lands."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servekit.errors import UsageError
from servekit.kit.build import BuildResult
from servekit.kit.errors import KitRefused
from servekit.kit.image import read_image
from servekit.kit.kitarchive import unpack
from servekit.kit.options import KitBuildOptions, KitRebuildOptions
from servekit.kit.rebuild import rebuild_kit
from servekit.kit.streams import Limits

from .imagegen import M, base_layers, layer_tar, write_oci
from .kitedit import edit_kit


@pytest.mark.parametrize("base_key", ["base_oci", "base_plain", "base_tar"])
@pytest.mark.parametrize("out_name", ["img-oci", "img.tar"])
def test_rebuild_reproduces_the_source_image(
    kit: BuildResult, images: dict[str, Path], tmp_path: Path, base_key: str, out_name: str
) -> None:
    out = tmp_path / out_name
    report = rebuild_kit(KitRebuildOptions(kit=kit.archive, base=str(images[base_key]), out=out))
    assert report.ok, report.checks
    assert [c.name for c in report.checks] == ["diffids", "image id", "filesystem", "payload"]
    assert "0 differences" in report.checks[2].detail
    rebuilt, source = read_image(str(out)), read_image(str(images["src_oci"]))
    assert rebuilt.image_id == source.image_id == kit.manifest.image.image_id
    assert rebuilt.diff_ids == source.diff_ids


def test_rebuild_from_an_unpacked_folder(
    kit: BuildResult, images: dict[str, Path], tmp_path: Path
) -> None:
    root = unpack(kit.archive, tmp_path / "u", Limits())
    assert rebuild_kit(
        KitRebuildOptions(kit=root, base=str(images["base_tar"]), out=tmp_path / "o")
    ).ok


def test_wrong_base_is_fatal_and_names_the_first_difference(
    kit: BuildResult, tmp_path: Path
) -> None:
    other = write_oci(tmp_path / "other", [base_layers()[0], layer_tar([M("x", "f", b"x")])])
    with pytest.raises(UsageError, match="layer 2: expected sha256:"):
        rebuild_kit(KitRebuildOptions(kit=kit.archive, base=str(other), out=tmp_path / "o"))
    assert not (tmp_path / "o").exists()


def test_base_with_extra_layers_is_refused(kit: BuildResult, tmp_path: Path) -> None:
    longer = write_oci(tmp_path / "longer", [*base_layers(), layer_tar([M("x", "f", b"x")])])
    with pytest.raises(UsageError, match="3 layers"):
        rebuild_kit(KitRebuildOptions(kit=kit.archive, base=str(longer), out=tmp_path / "o"))


def test_existing_out_is_not_overwritten(
    kit: BuildResult, images: dict[str, Path], tmp_path: Path
) -> None:
    (tmp_path / "o").mkdir()
    with pytest.raises(UsageError, match="exists"):
        rebuild_kit(
            KitRebuildOptions(kit=kit.archive, base=str(images["base_oci"]), out=tmp_path / "o")
        )


def test_fs_manifest_that_disagrees_fails_the_proof_and_leaves_nothing(
    kit: BuildResult, images: dict[str, Path], tmp_path: Path
) -> None:
    def change(root: Path) -> None:
        path = root / "fs-manifest.txt"
        lines = path.read_text().splitlines()
        path.write_text("\n".join(lines[:-1]) + "\n")

    tampered = edit_kit(kit.archive, tmp_path / "t.tar.zst", change)
    report = rebuild_kit(
        KitRebuildOptions(kit=tampered, base=str(images["base_oci"]), out=tmp_path / "o")
    )
    assert not report.ok
    fs = next(c for c in report.checks if c.name == "filesystem")
    assert fs.status == "fail" and "entries, the source had" in fs.detail
    assert not (tmp_path / "o").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".o.")]


def test_kit_whose_members_do_not_match_sums_is_refused(
    kit: BuildResult, images: dict[str, Path], tmp_path: Path
) -> None:
    def change(root: Path) -> None:
        (root / "config.json").write_bytes(b"{}")

    tampered = edit_kit(kit.archive, tmp_path / "t.tar.zst", change, sums=False)
    with pytest.raises(KitRefused, match="SHA256SUMS"):
        rebuild_kit(
            KitRebuildOptions(kit=tampered, base=str(images["base_oci"]), out=tmp_path / "o")
        )


def test_oci_output_carries_the_repo_rev_annotation_without_changing_the_id(
    images: dict[str, Path], tmp_path: Path, git_repo: Path
) -> None:
    from servekit.kit.build import build_kit

    result = build_kit(
        KitBuildOptions(
            base=str(images["base_oci"]),
            source=str(images["src_oci"]),
            out=tmp_path / "r.tar.zst",
            repo=git_repo,
        )
    )
    out = tmp_path / "o"
    assert rebuild_kit(
        KitRebuildOptions(kit=result.archive, base=str(images["base_oci"]), out=out, tag="v3")
    ).ok
    index = json.loads((out / "index.json").read_text())
    digest = index["manifests"][0]["digest"].split(":")[1]
    manifest = json.loads((out / "blobs" / "sha256" / digest).read_text())
    assert manifest["annotations"]["org.opencontainers.image.revision"].endswith("+0dirty")
    assert read_image(f"{out}:v3").image_id == result.manifest.image.image_id


def test_payload_kit_rebuilds_onto_a_docker_archive_base(
    images: dict[str, Path], tmp_path: Path
) -> None:
    from servekit.kit.build import build_kit

    project = tmp_path / "proj"
    project.mkdir()
    (project / "f.py").write_text("X = 1\n")
    spec = project / "kit.yaml"
    spec.write_text("files:\n  - {src: f.py, dest: /opt/f.py}\nremove: [/etc/old.conf]\n")
    result = build_kit(
        KitBuildOptions(base=str(images["base_tar"]), payload=spec, out=tmp_path / "p.tar.zst")
    )
    report = rebuild_kit(
        KitRebuildOptions(kit=result.archive, base=str(images["base_oci"]), out=tmp_path / "o.tar")
    )
    assert report.ok, report.checks


def test_gzip_working_layers_keep_diff_ids_and_image_id(
    kit: BuildResult, images: dict[str, Path], tmp_path: Path
) -> None:
    out = tmp_path / "gz"
    report = rebuild_kit(
        KitRebuildOptions(kit=kit.archive, base=str(images["base_tar"]), out=out, gzip=True)
    )
    assert report.ok, report.checks
    image = read_image(str(out))
    top = image.layers[-1]
    assert top.media_type.endswith("+gzip") and top.digest != top.diff_id
    assert image.image_id == kit.manifest.image.image_id
    again = tmp_path / "gz2"
    rebuild_kit(
        KitRebuildOptions(kit=kit.archive, base=str(images["base_tar"]), out=again, gzip=True)
    )
    assert read_image(str(again)).layers[-1].digest == top.digest  # deterministic gzip


def test_gzip_with_docker_archive_output_is_a_usage_error(
    kit: BuildResult, images: dict[str, Path], tmp_path: Path
) -> None:
    with pytest.raises(UsageError, match="--gzip"):
        rebuild_kit(
            KitRebuildOptions(
                kit=kit.archive, base=str(images["base_tar"]), out=tmp_path / "o.tar", gzip=True
            )
        )
