"""Rebuilt images checked by real tools: skopeo, umoci, shellcheck (marker: tools).

Debian's skopeo reads and converts the OCI layout servekit wrote, umoci unpacks
it into a rootfs whose walked filesystem manifest equals the kit's, and the
generated shell scripts pass shellcheck and run.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from tests.helpers.cli import servekit_cli

from servekit.kit.apply import apply_image
from servekit.kit.build import BuildResult
from servekit.kit.fsmanifest import walk_dir
from servekit.kit.image import read_image
from servekit.kit.kitarchive import unpack
from servekit.kit.options import KitRebuildOptions
from servekit.kit.rebuild import rebuild_kit
from servekit.kit.streams import Limits

pytestmark = pytest.mark.tools


def need(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        pytest.fail(f"{tool} is not installed: run scripts/bootstrap.sh tools")
    return path


def run(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        list(args), capture_output=True, text=True, check=False, timeout=120, cwd=cwd, env=env
    )
    assert done.returncode == 0, f"{args}: {done.stderr}{done.stdout}"
    return done.stdout


@pytest.fixture
def rebuilt(kit: BuildResult, images: dict[str, Path], tmp_path: Path) -> Path:
    out = tmp_path / "rebuilt"
    assert rebuild_kit(
        KitRebuildOptions(kit=kit.archive, base=str(images["base_tar"]), out=out, tag="v1")
    ).ok
    return out


def fs_lines(ref: str) -> list[str]:
    return apply_image(read_image(ref), Limits()).lines()


def kit_fs(kit: BuildResult, tmp_path: Path) -> list[str]:
    root = unpack(kit.archive, tmp_path / "kit-unpacked", Limits())
    return (root / "fs-manifest.txt").read_text().splitlines()


def test_skopeo_inspects_the_rebuilt_oci_layout(rebuilt: Path, kit: BuildResult) -> None:
    need("skopeo")
    config = json.loads(run("skopeo", "inspect", "--config", f"oci:{rebuilt}:v1"))
    want = kit.manifest.base.diff_ids + [layer.diff_id for layer in kit.manifest.layers]
    assert config["rootfs"]["diff_ids"] == want
    info = json.loads(run("skopeo", "inspect", f"oci:{rebuilt}:v1"))
    assert len(info["Layers"]) == len(want)


def test_skopeo_converts_to_docker_archive_that_servekit_reads_back(
    rebuilt: Path, kit: BuildResult, tmp_path: Path
) -> None:
    need("skopeo")
    out = tmp_path / "converted.tar"
    run(
        "skopeo",
        "--insecure-policy",
        "copy",
        f"oci:{rebuilt}:v1",
        f"docker-archive:{out}:servekit/test:v1",
    )
    image = read_image(str(out))
    assert image.diff_ids == read_image(f"{rebuilt}:v1").diff_ids
    assert image.name == "docker.io/servekit/test:v1"
    assert fs_lines(str(out)) == kit_fs(kit, tmp_path)


def test_skopeo_reads_servekit_docker_archive_output(
    kit: BuildResult, images: dict[str, Path], tmp_path: Path
) -> None:
    need("skopeo")
    out = tmp_path / "img.tar"
    assert rebuild_kit(
        KitRebuildOptions(kit=kit.archive, base=str(images["base_oci"]), out=out, tag="x/y:1")
    ).ok
    raw = subprocess.run(
        ["skopeo", "inspect", "--raw", "--config", f"docker-archive:{out}"],
        capture_output=True,
        check=True,
        timeout=120,
    ).stdout
    assert "sha256:" + hashlib.sha256(raw).hexdigest() == kit.manifest.image.image_id
    assert json.loads(raw)["rootfs"]["diff_ids"] == read_image(str(out)).diff_ids


def test_umoci_unpack_matches_the_kit_filesystem_manifest(
    rebuilt: Path, kit: BuildResult, tmp_path: Path
) -> None:
    need("umoci")
    if os.geteuid() != 0:
        pytest.fail("umoci unpack needs root here to keep owners (run the tools tests as root)")
    bundle = tmp_path / "bundle"
    run("umoci", "unpack", "--image", f"{rebuilt}:v1", str(bundle))
    walked = sorted(
        (e.line() for e in walk_dir(bundle / "rootfs")),
        key=lambda line: line.split("\t")[5].encode(),
    )
    assert walked == kit_fs(kit, tmp_path)
    shown = servekit_cli("kit", "inspect", str(bundle / "rootfs"), "--fs", check=True)
    assert shown.stdout.splitlines() == walked


def test_generated_scripts_pass_shellcheck(kit: BuildResult, tmp_path: Path) -> None:
    need("shellcheck")
    root = unpack(kit.archive, tmp_path / "u", Limits())
    run("shellcheck", str(root / "rebuild.sh"), str(root / "selftest.sh"))


def test_selftest_and_rebuild_scripts_run(
    kit: BuildResult, images: dict[str, Path], tmp_path: Path
) -> None:
    need("sha256sum")
    root = unpack(kit.archive, tmp_path / "u", Limits())
    assert "payload: 5 files ok" in run("bash", str(root / "selftest.sh"))
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    out = run(
        "bash", str(root / "rebuild.sh"), str(images["base_tar"]), str(tmp_path / "o"), env=env
    )
    assert "0 differences" in out
    assert read_image(str(tmp_path / "o")).image_id == kit.manifest.image.image_id


def test_umoci_unpacks_gzip_working_layers_to_the_same_rootfs(
    kit: BuildResult, images: dict[str, Path], tmp_path: Path
) -> None:
    need("umoci")
    out = tmp_path / "gz"
    assert rebuild_kit(
        KitRebuildOptions(
            kit=kit.archive, base=str(images["base_oci"]), out=out, tag="v1", gzip=True
        )
    ).ok
    bundle = tmp_path / "bundle-gz"
    run("umoci", "unpack", "--image", f"{out}:v1", str(bundle))
    walked = sorted(
        (e.line() for e in walk_dir(bundle / "rootfs")),
        key=lambda line: line.split("\t")[5].encode(),
    )
    assert walked == kit_fs(kit, tmp_path)
