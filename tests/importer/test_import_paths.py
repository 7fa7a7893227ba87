"""Odd paths given to import are one line and exit 2, never a traceback (issue 36 item 12).

A folder 1,500 levels deep (``os.walk`` and ``copytree`` recurse), a path component
over 255 bytes, a folder where the facts file is expected, a non-UTF-8 name. The
last case of each runs the real process, where the top-level handler is what
stands between an ``OSError`` and a traceback.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from tests.helpers.cli import servekit_cli

from servekit.importer import ImportRefused, extract_folder

ENGINE = "#!/bin/sh\nexec vllm serve /root/model --port 8080\n"


def _deep(top: Path, levels: int) -> None:
    """``levels`` nested folders under ``top``, made relative to a descriptor (no PATH_MAX)."""
    fd = os.open(top, os.O_RDONLY)
    try:
        for _ in range(levels):
            os.mkdir("d", dir_fd=fd)
            inner = os.open("d", os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = inner
    finally:
        os.close(fd)


def _undeep(top: Path) -> None:
    """Remove what ``_deep`` made under ``top``, one level at a time from the top.

    pytest removes old temporary folders recursively: a 1,500-deep tree left behind
    makes a later run's cleanup die of ``RecursionError``.
    """
    fd = os.open(top, os.O_RDONLY)
    try:
        while True:
            try:
                os.rename("d/d", "d.up", src_dir_fd=fd, dst_dir_fd=fd)
            except FileNotFoundError:
                os.rmdir("d", dir_fd=fd)
                return
            os.rmdir("d", dir_fd=fd)
            os.rename("d.up", "d", src_dir_fd=fd, dst_dir_fd=fd)
    finally:
        os.close(fd)


def _layout(tmp_path: Path) -> Path:
    folder = tmp_path / "odd-a3" / "1node"
    folder.mkdir(parents=True)
    (folder / "run.sh").write_text(ENGINE)
    return folder


def test_a_folder_1500_levels_deep_is_one_line(tmp_path: Path) -> None:
    folder = _layout(tmp_path)
    (folder / "deep").mkdir()
    _deep(folder / "deep", 1500)
    try:
        with pytest.raises(ImportRefused, match="nested more than 32 deep"):
            extract_folder(folder, time_limit_s=30)
    finally:
        _undeep(folder / "deep")


def test_a_path_component_over_255_bytes_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ImportRefused, match="File name too long") as refused:
        extract_folder(tmp_path / ("a" * 300) / "1node")
    assert "\n" not in str(refused.value)


def _run(tmp_path: Path, *args: str) -> tuple[int, str]:
    (tmp_path / "catalog").mkdir(exist_ok=True)
    done = servekit_cli("layouts", "import", *args, timeout=60)
    return done.returncode, done.stderr


@pytest.mark.slow
def test_import_cli_paths_are_one_line_exit_2(tmp_path: Path) -> None:
    folder = _layout(tmp_path)
    catalog = str(tmp_path / "catalog")
    cases = [
        (str(tmp_path / ("a" * 300)), "--catalog", catalog),  # folder: name too long
        (str(folder), "--catalog", str(tmp_path / ("c" * 300))),  # catalog: name too long
        (str(folder), "--facts", str(tmp_path), "--catalog", catalog),  # a folder for a file
        (str(folder), "--facts", str(tmp_path / ("f" * 300)), "--catalog", catalog),
        (str(tmp_path / "odd-a3" / "\udcff"), "--catalog", catalog),  # not UTF-8
    ]
    _deep(folder, 1500)
    cases.append((str(folder), "--catalog", catalog))  # 1,500 levels deep
    try:
        for args in cases:
            code, err = _run(tmp_path, *args)
            assert code == 2, (args, err)
            assert "Traceback" not in err, (args, err)
            assert len(err.strip().splitlines()) == 1, (args, err)
    finally:
        _undeep(folder)


@pytest.mark.parametrize(
    "args",
    [
        ("render", "local/single", "--out", "a" * 300),
        ("kit", "inspect", "a" * 300),
        ("layouts", "check", "--catalog", "a" * 300),
        ("layouts", "drift", "a3/1node", "--upstream", "a" * 300),
    ],
    ids=["render-out", "kit-inspect", "layouts-check-catalog", "layouts-drift-upstream"],
)
def test_other_commands_given_a_name_over_255_bytes_say_one_line(
    args: tuple[str, ...], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The CLI's last resort (servekit.cli.main), in process: one line, exit 2."""
    from servekit.cli import main

    monkeypatch.setattr("sys.argv", ["servekit", *args])
    with pytest.raises(SystemExit) as done:
        main()
    err = capsys.readouterr().err
    assert done.value.code == 2, err
    assert len(err.strip().splitlines()) == 1, err
    assert "over 255 bytes" in err, err
