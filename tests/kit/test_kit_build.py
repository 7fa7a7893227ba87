"""kit build: from a source image or a payload spec; deterministic archives."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest
import zstandard

from servekit.errors import UsageError
from servekit.kit.build import BuildResult, build_kit
from servekit.kit.errors import KitRefused
from servekit.kit.options import KitBuildOptions

from .imagegen import M, base_layers, layer_tar, sha, source_layers, write_oci


def members(archive: Path) -> dict[str, tarfile.TarInfo]:
    with archive.open("rb") as fh:
        stream = zstandard.ZstdDecompressor().stream_reader(fh)
        with tarfile.open(fileobj=stream, mode="r|") as tar:
            return {m.name: m for m in tar}


def read_member(archive: Path, name: str) -> bytes:
    with archive.open("rb") as fh:
        stream = zstandard.ZstdDecompressor().stream_reader(fh)
        with tarfile.open(fileobj=stream, mode="r|") as tar:
            for m in tar:
                if m.name == name:
                    return tar.extractfile(m).read()  # type: ignore[union-attr]
    raise AssertionError(name)


def test_same_inputs_give_a_byte_identical_archive(images: dict[str, Path], tmp_path: Path) -> None:
    outs = []
    for i in range(2):
        req = KitBuildOptions(
            base=str(images["base_oci"]),
            source=str(images["src_oci"]),
            out=tmp_path / f"run{i}" / "same.tar.zst",
        )
        outs.append(build_kit(req))
    a, b = (o.archive.read_bytes() for o in outs)
    assert a == b
    assert outs[0].sha256 == outs[1].sha256
    side = (tmp_path / "run0" / "same.tar.zst.sha256").read_text()
    assert side == f"{outs[0].sha256}  same.tar.zst\n"


def test_archive_members_are_sorted_with_fixed_mtime_and_numeric_owners(kit: BuildResult) -> None:
    infos = members(kit.archive)
    names = list(infos)
    assert names == sorted(names)
    assert {(m.mtime, m.uid, m.gid, m.uname, m.gname) for m in infos.values()} == {
        (0, 0, 0, "", "")
    }
    expected = {
        "k1/MANIFEST.json",
        "k1/SHA256SUMS",
        "k1/README.md",
        "k1/Dockerfile",
        "k1/rebuild.sh",
        "k1/selftest.sh",
        "k1/fs-manifest.txt",
        "k1/payload.sha256",
        "k1/base-diffids.txt",
        "k1/config.json",
    }
    assert expected <= set(names)
    assert infos["k1/rebuild.sh"].mode == 0o755


def test_manifest_records_base_layers_payload_and_delta(
    kit: BuildResult, images: dict[str, Path]
) -> None:
    m = kit.manifest
    assert m.base.diff_ids == [sha(layer) for layer in base_layers()]
    assert m.base.layer_count == 2
    (layer,) = m.layers
    assert layer.diff_id == sha(source_layers()[2])
    assert layer.whiteouts == ["/etc/old.conf"] and layer.opaque_dirs == ["/var/cache"]
    assert layer.raw_size == len(source_layers()[2]) and layer.compressed_size < layer.raw_size
    assert layer.sha256 != layer.diff_id  # gzip blob digest of the source
    paths = [p.path for p in m.payload]
    assert "/opt/app/serve.sh" in paths and "/opt/app/patch2.py" in paths
    assert m.image.source == str(images["src_oci"]) and m.image.layer_count == 3
    assert m.generator.name == "servekit"
    raw = json.loads(read_member(kit.archive, "k1/MANIFEST.json"))
    assert raw["image"]["fs_entries"] == len(
        read_member(kit.archive, "k1/fs-manifest.txt").decode().splitlines()
    )


def test_source_config_delta_lists_changed_env_labels_and_cmd(tmp_path: Path) -> None:
    from .imagegen import config_for

    layers = source_layers()
    config = config_for(
        layers, env=["PATH=/usr/bin:/bin", "V41_FLAG=1"], Labels={"rev": "x"}, WorkingDir="/opt/app"
    )
    base = write_oci(tmp_path / "b", base_layers())
    src = write_oci(tmp_path / "s", layers, config=config)
    m = build_kit(
        KitBuildOptions(base=str(base), source=str(src), out=tmp_path / "d.tar.zst")
    ).manifest
    assert m.config_delta.env == {"V41_FLAG": "1"}
    assert m.config_delta.labels == {"rev": "x"}
    assert m.config_delta.working_dir == "/opt/app" and m.config_delta.cmd is None


def test_wrong_base_names_the_first_differing_layer(
    images: dict[str, Path], tmp_path: Path
) -> None:
    other = write_oci(tmp_path / "other", [base_layers()[0], layer_tar([M("z", "f", b"z")])])
    req = KitBuildOptions(
        base=str(other), source=str(images["src_oci"]), out=tmp_path / "x.tar.zst"
    )
    with pytest.raises(UsageError, match="layer 2: expected"):
        build_kit(req)
    assert not (tmp_path / "x.tar.zst").exists()


def test_repo_rev_stamp_counts_dirty_files(
    images: dict[str, Path], tmp_path: Path, git_repo: Path
) -> None:
    def build(out: str) -> BuildResult:
        req = KitBuildOptions(
            base=str(images["base_oci"]),
            source=str(images["src_oci"]),
            out=tmp_path / out,
            repo=git_repo,
            engine=("vllm=0.27.1",),
        )
        return build_kit(req)

    clean = build("clean.tar.zst").manifest
    assert clean.code is not None
    assert clean.code.repo_rev == f"{clean.code.commit[:7]}+0dirty"
    assert clean.code.engines == {"vllm": "0.27.1"}
    assert clean.created == "2026-10-05T12:00:00+00:00"  # HEAD's commit date: reproducible
    (git_repo / "a.txt").write_text("changed\n")
    dirty = build("dirty.tar.zst").manifest
    assert dirty.code is not None and dirty.code.repo_rev.endswith("+1dirty")
    assert dirty.code.dirty_files == ["a.txt"]


def test_repo_that_is_not_git_is_a_usage_error(images: dict[str, Path], tmp_path: Path) -> None:
    req = KitBuildOptions(
        base=str(images["base_oci"]),
        source=str(images["src_oci"]),
        out=tmp_path / "x.tar.zst",
        repo=tmp_path,
    )
    with pytest.raises(UsageError, match="--repo"):
        build_kit(req)


@pytest.mark.parametrize(
    ("out", "message"), [("kit.zip", "must end in .tar.zst"), (".tar.zst", "--name")]
)
def test_bad_out_names_are_usage_errors(
    images: dict[str, Path], tmp_path: Path, out: str, message: str
) -> None:
    req = KitBuildOptions(
        base=str(images["base_oci"]), source=str(images["src_oci"]), out=tmp_path / out
    )
    with pytest.raises(UsageError, match=message):
        build_kit(req)


def test_source_with_a_device_node_in_a_working_layer_is_refused(tmp_path: Path) -> None:
    base = write_oci(tmp_path / "b", base_layers())
    src = write_oci(tmp_path / "s", [*base_layers(), layer_tar([M("dev/evil", "c")])])
    with pytest.raises(KitRefused, match="device node"):
        build_kit(KitBuildOptions(base=str(base), source=str(src), out=tmp_path / "x.tar.zst"))


def test_base_layers_may_hold_device_nodes(tmp_path: Path) -> None:
    layers = [layer_tar([M("dev", "d", mode=0o755), M("dev/null", "c", mode=0o666)])]
    base = write_oci(tmp_path / "b", layers)
    src = write_oci(tmp_path / "s", [*layers, layer_tar([M("x", "f", b"x")])])
    result = build_kit(KitBuildOptions(base=str(base), source=str(src), out=tmp_path / "x.tar.zst"))
    assert result.manifest.image.fs_entries == 3
