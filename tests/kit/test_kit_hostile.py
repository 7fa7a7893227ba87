"""Hostile layers and kits: refused with KitRefused, never a crash, never a write outside.

Hypothesis generates member names with absolute paths and ``..`` components,
links that escape, special files, truncated members, decompression bombs and
random corruption of a good kit.
"""

from __future__ import annotations

import gzip
import io
import tarfile
import tempfile
from pathlib import Path

import pytest
import zstandard
from hypothesis import HealthCheck, given, settings, strategies as st

from servekit.kit.errors import KitRefused
from servekit.kit.fsmanifest import FsState
from servekit.kit.kitarchive import unpack, write_sidecar
from servekit.kit.layertar import ScanOptions, scan_layer
from servekit.kit.options import KitVerifyOptions
from servekit.kit.streams import Limits
from servekit.kit.verify import verify_kit

from .imagegen import M, layer_tar

FAST = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)

segment = st.text(alphabet="abcxyz.-_ ", min_size=1, max_size=6).filter(
    lambda s: s not in (".", "..")
)


@st.composite
def escaping_names(draw: st.DrawFn) -> str:
    parts = draw(st.lists(segment, min_size=1, max_size=4))
    where = draw(st.integers(0, len(parts)))
    parts.insert(where, "..")
    name = "/".join(parts)
    return draw(st.sampled_from(["", "./", "/"])) + name


def scan(data: bytes, strict: bool = True, limits: Limits | None = None) -> FsState:
    state = FsState()
    scan_layer(io.BytesIO(data), state, ScanOptions("t", strict, limits or Limits()))
    return state


@FAST
@given(name=escaping_names())
def test_dotdot_member_names_are_refused(name: str) -> None:
    with pytest.raises(KitRefused, match=r"'\.\.'|absolute"):
        scan(layer_tar([M(name, "f", b"x")]))


@FAST
@given(parts=st.lists(segment, min_size=1, max_size=4))
def test_absolute_member_names_are_refused(parts: list[str]) -> None:
    with pytest.raises(KitRefused, match="absolute"):
        scan(layer_tar([M("/" + "/".join(parts), "f", b"x")]))


@FAST
@given(depth=st.integers(0, 3), ups=st.integers(1, 6), tail=segment)
def test_relative_symlinks_climbing_out_are_refused_in_kit_layers(
    depth: int, ups: int, tail: str
) -> None:
    path = "/".join(["d"] * depth + ["link"])
    target = "/".join([".."] * ups + [tail])
    layer = layer_tar([M(path, "l", link=target)])
    if ups > depth:
        with pytest.raises(KitRefused, match="climbs out"):
            scan(layer)
    else:
        assert scan(layer).get("/" + path) is not None
    scan(layer, strict=False)  # base images may carry such links; they resolve at the root


@FAST
@given(target=st.one_of(escaping_names(), st.just("/etc/passwd"), st.just("missing")))
def test_hardlink_escapes_are_refused(target: str) -> None:
    with pytest.raises(KitRefused, match=r"hardlink|'\.\.'"):
        scan(layer_tar([M("a", "f", b"x"), M("b", "h", link=target)]), strict=False)


@FAST
@given(via=st.sampled_from(["/etc", "../..", "/"]), leaf=segment)
def test_members_through_a_symlink_are_refused(via: str, leaf: str) -> None:
    layer = layer_tar([M("link", "l", link=via), M(f"link/{leaf}", "f", b"pwned")])
    with pytest.raises(KitRefused, match="passes through symlink"):
        scan(layer, strict=False)


@pytest.mark.parametrize("kind", ["c", "p"])
def test_device_nodes_and_fifos_are_refused_in_kit_layers(kind: str) -> None:
    with pytest.raises(KitRefused, match=r"device node|FIFO"):
        scan(layer_tar([M("x", kind)]))
    assert scan(layer_tar([M("x", kind)]), strict=False).get("/x") is not None


@FAST
@given(data=st.binary(min_size=1, max_size=4096), cut=st.integers(1, 4095))
def test_truncated_members_are_refused(data: bytes, cut: int) -> None:
    whole = layer_tar([M("f", "f", data)])
    cut = 512 + min(cut, len(data) - 1) if len(data) > 1 else 512
    with pytest.raises(KitRefused):
        scan(whole[:cut])


def test_header_size_larger_than_the_archive_is_refused() -> None:
    info = tarfile.TarInfo("f")
    info.size = 10_000
    header = info.tobuf(tarfile.GNU_FORMAT)
    with pytest.raises(KitRefused):
        scan(header + b"x" * 100)


@FAST
@given(junk=st.binary(min_size=0, max_size=2048))
def test_random_bytes_as_a_layer_are_refused_or_read_never_crash(junk: bytes) -> None:
    try:
        state = scan(junk)
    except KitRefused as exc:
        assert str(exc).startswith("t:")  # one line naming the layer
        return
    assert all(p.startswith("/") and "/../" not in p + "/" for p in state.entries)


def test_gzip_bomb_is_refused_by_total_size() -> None:
    bomb = gzip.compress(layer_tar([M("zeros", "f", b"\0" * (4 << 20))]), mtime=0)
    with pytest.raises(KitRefused, match="expands past"):
        scan(bomb, limits=Limits(max_total=1 << 20))


def test_zstd_bomb_is_refused_by_ratio() -> None:
    bomb = zstandard.ZstdCompressor(level=19).compress(layer_tar([M("z", "f", b"\0" * (8 << 20))]))
    with pytest.raises(KitRefused, match="expands more than"):
        scan(bomb, limits=Limits(max_ratio=50, ratio_floor=1 << 20))
    assert scan(bomb).get("/z") is not None  # within the default limits it is a fine layer


def kit_archive(members: list[M], top: str = "kit") -> bytes:
    raw = layer_tar([M(top, "d", mode=0o755), *members])
    return zstandard.ZstdCompressor().compress(raw)


def tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@FAST
@given(
    member=st.one_of(
        escaping_names().map(lambda n: M(n, "f", b"x")),
        st.just(M("/abs", "f", b"x")),
        st.just(M("kit/l", "l", link="/etc")),
        st.just(M("kit/h", "h", link="kit/a")),
        st.just(M("kit/dev", "c")),
        st.just(M("kit/fifo", "p")),
        st.just(M("other/a", "f", b"x")),
    )
)
def test_hostile_kit_archives_are_refused_and_write_nothing_outside(member: M) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        archive = root / "k.tar.zst"
        archive.write_bytes(kit_archive([M("kit/a", "f", b"a"), member]))
        dest = root / "dest"
        dest.mkdir()
        with pytest.raises(KitRefused):
            unpack(archive, dest, Limits())
        outside = tree(root) - {"k.tar.zst", "dest"}
        assert all(p.startswith("dest") for p in outside)


def test_kit_bomb_is_refused(tmp_path: Path) -> None:
    archive = tmp_path / "k.tar.zst"
    archive.write_bytes(kit_archive([M("kit/zeros", "f", b"\0" * (4 << 20))]))
    with pytest.raises(KitRefused, match="expands"):
        unpack(archive, tmp_path / "d", Limits(max_total=1 << 20))


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(offset=st.integers(min_value=0), flip=st.integers(1, 255))
def test_corrupting_any_byte_of_a_kit_fails_verify_without_raising(
    good_kit: tuple[Path, bytes], offset: int, flip: int
) -> None:
    path, data = good_kit
    i = offset % len(data)
    damaged = bytearray(data)
    damaged[i] ^= flip
    with tempfile.TemporaryDirectory() as tmp:
        archive = Path(tmp) / path.name
        archive.write_bytes(bytes(damaged))
        Path(tmp, path.name + ".sha256").write_text(
            path.with_name(path.name + ".sha256").read_text()
        )
        report = verify_kit(KitVerifyOptions(archive=archive))
        write_sidecar(archive)  # a forged sidecar: the deeper checks must still fail
        forged = verify_kit(KitVerifyOptions(archive=archive))
    assert not report.ok
    assert report.checks[0].name == "sidecar" and report.checks[0].status == "fail"
    assert forged.checks[0].status == "pass" and not forged.ok


@pytest.fixture
def good_kit(kit: object) -> tuple[Path, bytes]:
    archive = kit.archive  # type: ignore[attr-defined]
    return archive, archive.read_bytes()


@pytest.mark.parametrize("name", ["etc/.wh.", "etc/.wh...", ".wh."])
def test_whiteouts_that_name_nothing_are_refused(name: str) -> None:
    with pytest.raises(KitRefused, match="names no entry"):
        scan(layer_tar([M(name, "f")]), strict=False)


@FAST
@given(layer_name=st.one_of(escaping_names(), st.just("/etc/passwd")))
def test_docker_archive_naming_a_layer_outside_is_refused(layer_name: str) -> None:
    import json

    from servekit.kit.image import read_image

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "evil.tar"
        layer = layer_tar([M("a", "f", b"a")])
        config = json.dumps({"rootfs": {"type": "layers", "diff_ids": ["sha256:" + "0" * 64]}})
        manifest = json.dumps([{"Config": "c.json", "RepoTags": None, "Layers": [layer_name]}])
        with tarfile.open(path, "w") as tar:
            for name, data in (
                ("l.tar", layer),
                ("c.json", config.encode()),
                ("manifest.json", manifest.encode()),
            ):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        with pytest.raises(KitRefused):
            read_image(str(path))


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(fraction=st.floats(0.05, 0.95))
def test_truncated_kit_archives_are_refused(good_kit: tuple[Path, bytes], fraction: float) -> None:
    _, data = good_kit
    with tempfile.TemporaryDirectory() as tmp:
        archive = Path(tmp) / "cut.tar.zst"
        archive.write_bytes(data[: int(len(data) * fraction)])
        with pytest.raises(KitRefused):
            unpack(archive, Path(tmp) / "d", Limits())
