"""Atomic writes (issue 25): one implementation, a reader never sees half a file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from servekit.vocabulary import atomic_write_bytes, atomic_write_text, atomic_writer


def test_the_file_appears_whole_with_its_mode_and_no_temp_left(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "out.json"
    atomic_write_text(path, "{}\n", mode=0o600)
    assert path.read_text() == "{}\n" and (path.stat().st_mode & 0o777) == 0o600
    assert sorted(p.name for p in path.parent.iterdir()) == ["out.json"]


def test_a_failure_midway_leaves_the_old_file_and_no_temp(tmp_path: Path) -> None:
    path = tmp_path / "out.bin"
    atomic_write_bytes(path, b"old")
    with pytest.raises(RuntimeError), atomic_writer(path) as fh:
        fh.write(b"half")
        raise RuntimeError("crash while writing")
    assert path.read_bytes() == b"old" and os.listdir(tmp_path) == ["out.bin"]


def test_every_write_is_synced_file_and_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[int] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        synced.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    atomic_write_bytes(tmp_path / "x", b"data")
    assert len(synced) == 2  # the temp file before the rename, the folder after it


@settings(deadline=None, max_examples=25)  # each write syncs to disk
@given(st.binary(max_size=2048))
def test_what_is_written_is_what_is_read(data: bytes) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "f"
        atomic_write_bytes(path, data)
        assert path.read_bytes() == data
