"""Property tests for archive handling: whatever the bytes, a refusal or a sound result.

Hypothesis drives the manifest line parser, the path escaping, the JSON
loader, the filesystem state, and single-byte changes anywhere in a real
kit's tar stream (recompressed, honest sidecar): verify must fail and must
never raise anything but a refusal.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from servekit.kit.build import BuildResult
from servekit.kit.errors import KitRefused
from servekit.kit.fsmanifest import DIR, Entry, FsState, parse_line
from servekit.kit.jsonsafe import load_json
from servekit.kit.options import KitVerifyOptions
from servekit.kit.paths import escape_field, image_path, unescape_field
from servekit.kit.verify import verify_kit

from .kitedit import tar_stream, write_tar_stream

FAST = settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)

fields = st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=12)
segments = st.text(
    alphabet=st.characters(blacklist_categories=["Cs"], blacklist_characters="/\0"),
    min_size=1,
    max_size=8,
).filter(lambda s: s not in (".", ".."))


@FAST
@given(parts=st.lists(fields, min_size=0, max_size=10))
def test_any_manifest_line_is_an_entry_or_a_refusal(parts: list[str]) -> None:
    line = "\t".join(parts)
    try:
        entry = parse_line(line)
    except KitRefused:
        return
    assert image_path(entry.path, "test") == entry.path and entry.path != "/"
    assert parse_line(entry.line()) == entry


@FAST
@given(path=st.lists(segments, min_size=1, max_size=6).map(lambda p: "/" + "/".join(p)))
def test_escaping_round_trips_and_keeps_one_field(path: str) -> None:
    escaped = escape_field(path)
    assert not any(ch in escaped for ch in " \t\n")
    assert unescape_field(escaped) == path
    entry = Entry("f", 0o644, 0, 0, 1, path, "", "-")
    assert parse_line(entry.line()) == entry


@FAST
@given(
    data=st.binary(max_size=300)
    | st.text(alphabet='[]{}":,0123456789 ', max_size=300).map(str.encode)
)
def test_json_from_any_bytes_is_a_value_or_a_refusal(data: bytes) -> None:
    try:
        load_json(data, "t", max_depth=8)
    except KitRefused as exc:
        assert str(exc).startswith("t: ")


@FAST
@given(
    ops=st.lists(
        st.tuples(
            st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=4),
            st.sampled_from(["f", "d", "l"]),
            st.booleans(),
        ),
        max_size=25,
    )
)
def test_filesystem_state_keeps_every_parent_a_folder(
    ops: list[tuple[list[str], str, bool]],
) -> None:
    state = FsState()
    for parts, kind, remove in ops:
        path = "/" + "/".join(parts)
        if remove:
            state.remove_tree(path)
        else:
            state.put(Entry(kind, 0o755, 0, 0, 0, path, "x" if kind == "l" else ""))
    for path in state.entries:
        parent = path.rsplit("/", 1)[0]
        assert parent == "" or state.entries[parent].kind == DIR


@pytest.fixture
def tar_of(kit: BuildResult) -> tuple[BuildResult, bytes]:
    return kit, tar_stream(kit.archive)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(where=st.floats(0, 1, exclude_max=True), flip=st.integers(1, 255))
def test_any_flipped_tar_byte_fails_verify_with_an_honest_sidecar(
    tar_of: tuple[BuildResult, bytes], where: float, flip: int
) -> None:
    kit, tar = tar_of
    damaged = bytearray(tar)
    damaged[int(where * len(tar))] ^= flip
    with tempfile.TemporaryDirectory() as tmp:
        archive = write_tar_stream(Path(tmp) / kit.archive.name, bytes(damaged))
        report = verify_kit(KitVerifyOptions(archive=archive))
    assert report.checks[0].name == "sidecar" and report.checks[0].status == "pass"
    assert not report.ok


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(order=st.permutations(range(12)))
def test_members_in_any_other_order_fail_verify(
    tar_of: tuple[BuildResult, bytes], order: list[int]
) -> None:
    import io
    import tarfile

    _, tar = tar_of
    with tarfile.open(fileobj=io.BytesIO(tar)) as archive:
        members = [
            (m, (archive.extractfile(m) or io.BytesIO()).read()) for m in archive.getmembers()
        ]
    head, rest = members[0], members[1:]
    moved = [rest[i] for i in order if i < len(rest)] + [m for i, m in enumerate(rest) if i >= 12]
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as out:
        for info, data in [head, *moved]:
            out.addfile(info, io.BytesIO(data) if info.isreg() else None)
    with tempfile.TemporaryDirectory() as tmp:
        report = verify_kit(
            KitVerifyOptions(archive=write_tar_stream(Path(tmp) / "k.tar.zst", buf.getvalue()))
        )
    assert report.ok == (moved == rest)


json_like = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=12,
)
image_json = st.one_of(
    st.binary(max_size=200),
    json_like.map(lambda v: json.dumps(v).encode()),
    st.just(b"[" * 5000 + b"]" * 5000),
)


@FAST
@given(index=image_json)
def test_an_oci_layout_with_any_index_is_read_or_refused(index: bytes) -> None:
    from servekit.kit.image import read_image

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "blobs" / "sha256").mkdir(parents=True)
        (root / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
        (root / "index.json").write_bytes(index)
        with pytest.raises(KitRefused):
            read_image(str(root))


@FAST
@given(manifest=image_json, config=image_json)
def test_a_docker_archive_with_any_manifest_is_read_or_refused(
    manifest: bytes, config: bytes
) -> None:
    import io
    import tarfile

    from servekit.kit.image import read_image

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "img.tar"
        with tarfile.open(path, "w") as tar:
            for name, data in (("manifest.json", manifest), ("c.json", config)):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        try:
            image = read_image(str(path))
        except KitRefused:
            return
        assert all(layer.diff_id.startswith("sha256:") for layer in image.layers)
