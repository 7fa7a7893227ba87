"""Reading and writing OCI layouts and docker-archives, gzip and plain layers."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from servekit.kit.apply import apply_image
from servekit.kit.dockerarchive import write_docker_archive as sk_write_docker
from servekit.kit.errors import KitRefused
from servekit.kit.image import read_image, split_reference
from servekit.kit.oci import write_oci as sk_write_oci
from servekit.kit.streams import Limits

from .imagegen import base_layers, sha, source_layers, write_docker_archive, write_oci


def fs_lines(ref: str) -> list[str]:
    return apply_image(read_image(ref), Limits()).lines()


def test_both_formats_and_both_compressions_give_the_same_image(images: dict[str, Path]) -> None:
    refs = [str(images[k]) for k in ("base_oci", "base_plain", "base_tar")]
    loaded = [read_image(r) for r in refs]
    assert {img.image_id for img in loaded} == {loaded[0].image_id}
    assert loaded[0].diff_ids == [sha(layer) for layer in base_layers()]
    assert [img.fmt for img in loaded] == ["oci", "oci", "docker-archive"]
    assert fs_lines(refs[0]) == fs_lines(refs[1]) == fs_lines(refs[2])


def test_gzip_blob_digest_differs_from_diff_id_and_both_are_checked(
    images: dict[str, Path],
) -> None:
    image = read_image(str(images["base_oci"]))
    assert image.layers[0].digest != image.layers[0].diff_id
    blob = images["base_oci"] / "blobs" / "sha256" / image.layers[0].digest.split(":")[1]  # type: ignore[union-attr]
    blob.write_bytes(blob.read_bytes()[:-8] + b"\0" * 8)
    with pytest.raises(KitRefused):
        fs_lines(str(images["base_oci"]))


def test_a_layer_whose_content_does_not_match_the_config_diff_id_is_refused(tmp_path: Path) -> None:
    layers = base_layers()
    config = json.dumps(
        {"rootfs": {"type": "layers", "diff_ids": [sha(b"other"), sha(layers[1])]}}
    ).encode()
    write_docker_archive(tmp_path / "bad.tar", layers, config=config)
    with pytest.raises(KitRefused, match="diffID"):
        fs_lines(str(tmp_path / "bad.tar"))


def test_references_pick_by_name_and_transport(images: dict[str, Path], tmp_path: Path) -> None:
    assert read_image(f"oci:{images['base_oci']}:latest").name == "latest"
    assert read_image(f"docker-archive:{images['src_tar']}:test/src:1").name == "test/src:1"
    assert split_reference(str(images["base_tar"])) == (None, images["base_tar"], None)
    with pytest.raises(KitRefused, match="no manifest named"):
        read_image(f"{images['base_oci']}:nope")
    with pytest.raises(KitRefused, match="not found"):
        read_image(str(tmp_path / "missing"))


def test_servekit_writers_round_trip_to_the_same_image(
    images: dict[str, Path], tmp_path: Path
) -> None:
    src = read_image(str(images["src_oci"]))
    sk_write_oci(tmp_path / "out", src.config_bytes, list(src.layers), "v1", {"a": "b"})
    with (tmp_path / "out.tar").open("wb") as fh:
        sk_write_docker(fh, src.config_bytes, list(src.layers), "x/y:1", Limits())
    again_oci = read_image(f"{tmp_path / 'out'}:v1")
    again_tar = read_image(str(tmp_path / "out.tar"))
    assert again_oci.image_id == again_tar.image_id == src.image_id
    assert again_oci.layers[0].digest == src.layers[0].digest  # gzip blob copied as is
    assert again_tar.name == "x/y:1"
    assert fs_lines(str(tmp_path / "out")) == fs_lines(str(tmp_path / "out.tar"))
    index = json.loads((tmp_path / "out" / "index.json").read_text())
    assert index["manifests"][0]["annotations"]["org.opencontainers.image.ref.name"] == "v1"


def test_docker_archive_with_symlinked_duplicate_layer_is_followed(tmp_path: Path) -> None:
    import tarfile

    layers = source_layers()
    path = write_docker_archive(tmp_path / "d.tar", layers)
    with tarfile.open(path) as tar:
        manifest = json.loads(tar.extractfile("manifest.json").read())  # type: ignore[union-attr]
    with tarfile.open(path, "a") as tar:
        info = tarfile.TarInfo("dup/layer.tar")
        info.type = tarfile.SYMTYPE
        info.linkname = "../" + manifest[0]["Layers"][0]
        tar.addfile(info)
        manifest[0]["Layers"][0] = "dup/layer.tar"
        data = json.dumps(manifest).encode()
        info = tarfile.TarInfo("manifest.json")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    assert read_image(str(path)).diff_ids == [sha(layer) for layer in layers]


def test_oci_layout_with_two_images_needs_a_name(tmp_path: Path) -> None:
    root = write_oci(tmp_path / "two", base_layers())
    index = json.loads((root / "index.json").read_text())
    second = dict(index["manifests"][0], annotations={"org.opencontainers.image.ref.name": "b"})
    index["manifests"].append(second)
    (root / "index.json").write_text(json.dumps(index))
    with pytest.raises(KitRefused, match="holds 2 manifests"):
        read_image(str(root))
    assert read_image(f"{root}:b").name == "b"


def test_blob_digest_with_path_characters_is_refused(tmp_path: Path) -> None:
    root = write_oci(tmp_path / "o", base_layers())
    index = json.loads((root / "index.json").read_text())
    index["manifests"][0]["digest"] = "sha256:../../etc/passwd"
    (root / "index.json").write_text(json.dumps(index))
    with pytest.raises(KitRefused, match="digest"):
        read_image(str(root))


def test_docker_archive_with_gzip_layer_members_is_read_and_rewritten_plain(tmp_path: Path) -> None:
    import gzip
    import tarfile

    layers = base_layers()
    config = json.dumps(
        {"rootfs": {"type": "layers", "diff_ids": [sha(x) for x in layers]}}
    ).encode()
    path = tmp_path / "gz.tar"
    names = [f"l{i}.tar.gz" for i in range(len(layers))]
    manifest = json.dumps([{"Config": "c.json", "RepoTags": None, "Layers": names}]).encode()
    with tarfile.open(path, "w") as tar:
        for name, data in [
            *zip(names, [gzip.compress(x, mtime=0) for x in layers], strict=True),
            ("c.json", config),
            ("manifest.json", manifest),
        ]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    image = read_image(str(path))
    assert {layer.media_type for layer in image.layers} == {
        "application/vnd.oci.image.layer.v1.tar+gzip"
    }
    assert fs_lines(str(path)) == fs_lines(str(write_oci(tmp_path / "o", layers)))
    with (tmp_path / "plain.tar").open("wb") as fh:
        sk_write_docker(fh, image.config_bytes, list(image.layers), None, Limits())
    again = read_image(str(tmp_path / "plain.tar"))
    assert {layer.media_type for layer in again.layers} == {
        "application/vnd.oci.image.layer.v1.tar"
    }
    assert fs_lines(str(tmp_path / "plain.tar")) == fs_lines(str(path))
