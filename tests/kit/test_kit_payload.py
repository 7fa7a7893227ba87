"""kit build from a payload spec: files, modes, owners, symlinks, removals, config."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from servekit.errors import UsageError
from servekit.kit.build import build_kit
from servekit.kit.errors import KitRefused
from servekit.kit.image import read_image
from servekit.kit.options import KitBuildOptions


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / "scripts").mkdir(parents=True)
    (root / "patches" / "sub").mkdir(parents=True)
    (root / "scripts" / "serve.sh").write_text("#!/bin/bash\nMAX_SEQS=${MAX_SEQS:-32}\n")
    (root / "scripts" / "serve.sh").chmod(0o755)
    (root / "patches" / "a.py").write_text("A = 1\n")
    (root / "patches" / "sub" / "b.py").write_text("B = 2\n")
    return root


def write_spec(root: Path, spec: dict[str, object]) -> Path:
    path = root / "kit.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


SPEC: dict[str, object] = {
    "name": "demo",
    "files": [
        {"src": "scripts/serve.sh", "dest": "/opt/app/serve.sh"},
        {"src": "patches", "dest": "/opt/app/patches", "uid": 1000, "gid": 1000},
        {"dest": "/opt/app/current", "symlink": "patches"},
        {"src": "patches/a.py", "dest": "/etc/a.py", "mode": "0600"},
    ],
    "remove": ["/etc/old.conf"],
    "opaque": ["/var/cache"],
    "config": {"env": {"V41_FLAG": "1"}, "cmd": ["/opt/app/serve.sh"], "working_dir": "/opt/app"},
}


def test_payload_build_makes_one_layer_with_modes_owners_and_whiteouts(
    images: dict[str, Path], project: Path, tmp_path: Path, git_repo: Path
) -> None:
    req = KitBuildOptions(
        base=str(images["base_tar"]),
        payload=write_spec(project, SPEC),
        out=tmp_path / "p.tar.zst",
        repo=git_repo,
    )
    m = build_kit(req).manifest
    (layer,) = m.layers
    assert layer.whiteouts == ["/etc/old.conf"] and layer.opaque_dirs == ["/var/cache"]
    by_path = {p.path: p for p in m.payload}
    assert by_path["/opt/app/serve.sh"].mode == "0755"
    assert by_path["/etc/a.py"].mode == "0600"
    assert (by_path["/opt/app/patches/sub/b.py"].uid, by_path["/opt/app/patches/sub/b.py"].gid) == (
        1000,
        1000,
    )
    assert m.config_delta.env == {"V41_FLAG": "1"}
    assert m.config_delta.labels["servekit.repo_rev"] == m.code.repo_rev  # type: ignore[union-attr]
    assert m.base.reference == "test/base:1"


def test_payload_config_is_base_config_plus_delta_and_layer(
    images: dict[str, Path], project: Path, tmp_path: Path
) -> None:
    out = tmp_path / "p.tar.zst"
    m = build_kit(
        KitBuildOptions(base=str(images["base_tar"]), payload=write_spec(project, SPEC), out=out)
    ).manifest
    base = read_image(str(images["base_tar"]))
    from servekit.kit.kitdir import open_kit
    from servekit.kit.streams import Limits

    with open_kit(out, Limits()) as kit:
        config = json.loads(kit.member("config.json").read_bytes())
    assert config["rootfs"]["diff_ids"] == [*base.diff_ids, m.layers[0].diff_id]
    assert (
        "V41_FLAG=1" in config["config"]["Env"] and "PATH=/usr/bin:/bin" in config["config"]["Env"]
    )
    assert config["config"]["Cmd"] == ["/opt/app/serve.sh"]
    assert len(config["history"]) == len(base.diff_ids) + 1


def test_payload_build_is_deterministic(
    images: dict[str, Path], project: Path, tmp_path: Path
) -> None:
    spec = write_spec(project, SPEC)
    a = build_kit(
        KitBuildOptions(
            base=str(images["base_oci"]), payload=spec, out=tmp_path / "1" / "p.tar.zst"
        )
    )
    os.utime(project / "patches" / "a.py", (1, 1))  # mtimes must not matter
    b = build_kit(
        KitBuildOptions(
            base=str(images["base_oci"]), payload=spec, out=tmp_path / "2" / "p.tar.zst"
        )
    )
    assert a.archive.read_bytes() == b.archive.read_bytes()


def test_parent_dirs_keep_the_base_metadata(
    images: dict[str, Path], project: Path, tmp_path: Path
) -> None:
    spec = write_spec(project, {"files": [{"src": "patches/a.py", "dest": "/opt/app/keep/new.py"}]})
    out = tmp_path / "p.tar.zst"
    build_kit(KitBuildOptions(base=str(images["base_oci"]), payload=spec, out=out))
    from servekit.kit.kitdir import open_kit
    from servekit.kit.streams import Limits

    with open_kit(out, Limits()) as kit:
        lines = kit.member("fs-manifest.txt").read_text().splitlines()
    keep = next(line for line in lines if line.split("\t")[5] == "/opt/app/keep")
    assert keep.split("\t")[1:4] == ["0750", "1000", "1000"]


@pytest.mark.parametrize(
    ("item", "error", "message"),
    [
        ({"src": "../outside.txt", "dest": "/x"}, KitRefused, "outside the project root"),
        ({"src": "scripts/serve.sh", "dest": "relative/x"}, UsageError, "absolute image path"),
        ({"src": "scripts/serve.sh", "dest": "/opt/../../etc/x"}, KitRefused, "'..'"),
        ({"dest": "/opt/l", "symlink": "../../../etc/shadow"}, KitRefused, "climbs out"),
        ({"src": "nothing", "dest": "/x"}, UsageError, "does not exist"),
        ({"dest": "/x"}, UsageError, "exactly one of src or symlink"),
        ({"src": "scripts/serve.sh", "dest": "/x", "mode": "999"}, UsageError, "files.0.mode"),
        ({"src": "scripts/serve.sh", "dest": "/x", "colour": "red"}, UsageError, "files.0.colour"),
    ],
)
def test_bad_payload_items_are_refused(
    images: dict[str, Path],
    project: Path,
    tmp_path: Path,
    item: dict[str, object],
    error: type[Exception],
    message: str,
) -> None:
    (tmp_path / "outside.txt").write_text("secret")
    spec = write_spec(project, {"files": [item]})
    with pytest.raises(error, match=message):
        build_kit(
            KitBuildOptions(base=str(images["base_oci"]), payload=spec, out=tmp_path / "p.tar.zst")
        )


def test_source_symlink_escaping_the_project_is_refused(
    images: dict[str, Path], project: Path, tmp_path: Path
) -> None:
    (tmp_path / "secret").write_text("s")
    os.symlink(tmp_path / "secret", project / "patches" / "leak.py")
    spec = write_spec(project, {"files": [{"src": "patches", "dest": "/p"}]})
    with pytest.raises(KitRefused, match="outside the project root"):
        build_kit(
            KitBuildOptions(base=str(images["base_oci"]), payload=spec, out=tmp_path / "p.tar.zst")
        )


def test_fifo_in_a_payload_tree_is_refused(
    images: dict[str, Path], project: Path, tmp_path: Path
) -> None:
    os.mkfifo(project / "patches" / "pipe")
    spec = write_spec(project, {"files": [{"src": "patches", "dest": "/p"}]})
    with pytest.raises(KitRefused, match="device node, FIFO or socket"):
        build_kit(
            KitBuildOptions(base=str(images["base_oci"]), payload=spec, out=tmp_path / "p.tar.zst")
        )


def test_source_and_payload_together_is_a_usage_error(
    images: dict[str, Path], project: Path, tmp_path: Path
) -> None:
    req = KitBuildOptions(
        base=str(images["base_oci"]),
        source=str(images["src_oci"]),
        payload=write_spec(project, SPEC),
        out=tmp_path / "p.tar.zst",
    )
    with pytest.raises(UsageError, match="exactly one of --source"):
        build_kit(req)
