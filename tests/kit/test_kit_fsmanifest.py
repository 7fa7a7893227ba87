"""Applied-layer semantics and the manifest line format."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from servekit.kit.errors import KitRefused
from servekit.kit.fsmanifest import FsState, parse_line, walk_dir
from servekit.kit.layertar import ScanOptions, scan_layer
from servekit.kit.paths import MAX_DEPTH, MAX_PATH

from .imagegen import WORKING_LAYER, M, base_layers, layer_tar, source_layers


def apply(layers: list[bytes], strict_from: int = 99) -> FsState:
    state = FsState()
    for i, data in enumerate(layers):
        scan_layer(io.BytesIO(data), state, ScanOptions(f"layer {i}", strict=i >= strict_from))
    return state


def test_whiteout_removes_a_lower_file_and_opaque_dir_hides_lower_children() -> None:
    state = apply(source_layers())
    assert state.get("/etc/old.conf") is None
    assert state.get("/etc/passwd") is not None
    assert state.get("/var/cache/a") is None and state.get("/var/cache/b") is None
    assert state.get("/var/cache/new") is not None  # same-layer entry survives its opaque marker


def test_whiteout_of_a_directory_removes_its_subtree() -> None:
    state = apply([*base_layers(), layer_tar([M("opt/.wh.app", "f")])])
    assert not [p for p in state.entries if p.startswith("/opt/app")]
    assert state.get("/opt") is not None


def test_whiteout_after_sibling_entries_in_the_same_layer_applies_to_lower_only() -> None:
    layer = layer_tar([M("etc/old.conf", "f", b"new"), M("etc/.wh.old.conf", "f")])
    state = apply([*base_layers(), layer])
    entry = state.get("/etc/old.conf")
    assert entry is not None and entry.size == 3


def test_file_replacing_a_directory_drops_the_directory_children() -> None:
    state = apply([*base_layers(), layer_tar([M("opt/app", "f", b"now a file")])])
    assert state.get("/opt/app/legacy.py") is None
    assert state.get("/opt/app").kind == "f"  # type: ignore[union-attr]


def test_hardlink_is_listed_as_the_file_it_shares_content_with() -> None:
    state = apply(base_layers())
    link, target = state.get("/usr/bin/python3.11"), state.get("/usr/bin/python3")
    assert link is not None and target is not None
    assert (link.kind, link.sha256, link.size) == ("f", target.sha256, target.size)


def test_lines_exclude_mtime_and_are_sorted() -> None:
    early = [
        layer_tar([M(m.path, m.kind, m.data, m.mode, m.uid, m.gid, m.link, mtime=1) for m in spec])
        for spec in ([M("a", "d", mode=0o755), M("a/x", "f", b"1")],)
    ]
    late = [layer_tar([M("a", "d", mode=0o755, mtime=99), M("a/x", "f", b"1", mtime=99)])]
    assert apply(early).lines() == apply(late).lines()
    lines = apply(source_layers()).lines()
    paths = [parse_line(line).path for line in lines]
    assert paths == sorted(paths, key=lambda p: p.encode())


def test_line_round_trips_through_parse_line() -> None:
    for line in apply(source_layers()).lines():
        assert parse_line(line).line() == line


def test_implicit_parent_directories_are_created_root_owned() -> None:
    state = apply([layer_tar([M("deep/er/file", "f", b"x")])])
    parent = state.get("/deep/er")
    assert parent is not None and (parent.kind, parent.mode, parent.uid) == ("d", 0o755, 0)


def test_walk_dir_matches_the_tar_view_of_the_same_tree(tmp_path: Path) -> None:
    root = tmp_path / "rootfs"
    (root / "etc").mkdir(parents=True)
    (root / "etc").chmod(0o755)
    (root / "etc" / "conf").write_bytes(b"abc")
    (root / "etc" / "conf").chmod(0o640)
    os.symlink("conf", root / "etc" / "alias")
    os.link(root / "etc" / "conf", root / "etc" / "hard")
    uid, gid = os.getuid(), os.getgid()
    layer = layer_tar(
        [
            M("etc", "d", mode=0o755, uid=uid, gid=gid),
            M("etc/conf", "f", b"abc", 0o640, uid, gid),
            M("etc/alias", "l", link="conf", uid=uid, gid=gid),
            M("etc/hard", "h", link="etc/conf", uid=uid, gid=gid),
        ]
    )
    walked = sorted(e.line() for e in walk_dir(root))
    assert walked == sorted(apply([layer]).lines())


def test_walk_dir_skips_excluded_subtrees(tmp_path: Path) -> None:
    (tmp_path / "proc" / "1").mkdir(parents=True)
    (tmp_path / "keep").mkdir()
    paths = {e.path for e in walk_dir(tmp_path, exclude=["/proc"])}
    assert paths == {"/keep"}


def test_working_layer_constants_cover_whiteouts_and_links() -> None:
    kinds = {m.kind for m in WORKING_LAYER}
    assert {"f", "d", "l", "h"} <= kinds
    assert any(m.path.endswith(".wh..wh..opq") for m in WORKING_LAYER)


def test_hardlink_to_a_missing_file_is_refused() -> None:
    with pytest.raises(KitRefused, match="hardlink"):
        apply([layer_tar([M("x", "h", link="nowhere")])])


def test_a_lower_symlink_replaced_by_a_directory_takes_children() -> None:
    lower = layer_tar([M("x", "l", link="/etc")])
    upper = layer_tar([M("x", "d", mode=0o700), M("x/f", "f", b"1")])
    state = apply([lower, upper])
    x = state.get("/x")
    assert x is not None and (x.kind, x.mode) == ("d", 0o700)
    assert state.get("/x/f") is not None


def test_a_lower_file_under_an_implicit_parent_becomes_a_directory() -> None:
    state = apply([layer_tar([M("a", "f", b"file")]), layer_tar([M("a/b", "f", b"child")])])
    a = state.get("/a")
    assert a is not None and a.kind == "d"
    assert state.get("/a/b") is not None


def test_whiteout_of_a_very_deep_tree_does_not_recurse() -> None:
    deep = "/".join(["d"] * (MAX_DEPTH - 1))
    state = apply([layer_tar([M(deep + "/leaf", "f", b"x")]), layer_tar([M(".wh.d", "f")])])
    assert state.entries == {}


@pytest.mark.parametrize(
    "name", ["/".join(["d"] * MAX_DEPTH) + "/leaf", "x" * (MAX_PATH + 1), "a/" + "b" * MAX_PATH]
)
def test_paths_past_the_depth_or_length_bound_are_refused(name: str) -> None:
    with pytest.raises(KitRefused, match=r"deeper than|longer than"):
        apply([layer_tar([M(name, "f", b"x")])])


def test_walking_a_rootfs_skips_mount_points(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "rootfs"
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "hosts").write_text("x\n")
    (root / "proc" / "1").mkdir(parents=True)
    (root / "proc" / "kcore").write_text("never read\n")
    real = Path.lstat

    def lstat(self: Path) -> os.stat_result:
        st = real(self)
        if self.name == "proc":
            fields = list(st)
            fields[2] = st.st_dev + 1  # st_dev: another filesystem mounted here
            return os.stat_result(fields)
        return st

    monkeypatch.setattr(Path, "lstat", lstat)
    assert [e.path for e in walk_dir(root)] == ["/etc", "/etc/hosts"]
