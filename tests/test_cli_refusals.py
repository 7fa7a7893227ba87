"""Hostile paths and arguments are one line naming the option, exit 2, across the commands.

Issue 36, item 12: a path component over 255 bytes gave a traceback in every
command that opens a path, a folder nested 1,500 deep a RecursionError
(Python 3.11's ``os.walk`` recurses per level). ``servekit.cli.main`` maps
what bad input causes wherever it is read (``servekit.errors.refusal_of``),
and the kit walkers keep their own stack. Run in this process through
``main`` itself (the entry point that does the mapping), so each case costs
milliseconds; the import paths are the import helper's.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from servekit.cli import main
from servekit.errors import UsageError, refusal_of

LONG = "a" * 300
L = "local/1p1d"


def _run(
    argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> str:
    monkeypatch.setattr(sys, "argv", ["servekit", *argv])
    with pytest.raises(SystemExit) as done:
        main()
    err = capsys.readouterr().err
    assert done.value.code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    return lines[0]


COMMANDS = [
    ["defaults", "--catalog", "{}"],
    ["layouts", "list", "--catalog", "{}"],
    ["layouts", "show", "{}"],
    ["layouts", "check", "{}"],
    ["layouts", "diff", "{}", L],
    ["layouts", "drift", L, "--upstream", "{}"],
    ["catalog", "site", "--catalog", "{}", "--out", "{tmp}/site"],
    ["render", L, "--out", "{}"],
    ["bench", "--target", "http://127.0.0.1:9", "--trace", "{}"],
    ["bench", "--target", "http://127.0.0.1:9", "--baseline", "{}"],
    ["kit", "verify", "{}"],
    ["kit", "inspect", "{}"],
    ["kit", "rebuild", "{}", "--base", "{tmp}/b", "--out", "{tmp}/r"],
    ["kit", "build", "--base", "{}", "--out", "{tmp}/k.tar.zst", "--source", "{tmp}"],
    ["sim", "--spec", "{}"],
]


@pytest.mark.parametrize("argv", COMMANDS, ids=lambda a: " ".join(a[:3]))
def test_a_path_component_over_255_bytes_is_one_line_naming_the_option(
    argv: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    bad = str(tmp_path / LONG / "x.yaml")
    args = [a.replace("{tmp}", str(tmp_path)).replace("{}", bad) for a in argv]
    line = _run(args, monkeypatch, capsys)
    flag = argv[argv.index("{}") - 1] if argv[argv.index("{}") - 1].startswith("--") else ""
    assert flag in line and "give a shorter path" in line, line


@pytest.fixture(scope="module")
def deep(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("deep")
    levels = [root]
    for _ in range(1_100):  # os.makedirs recurses per level too
        levels.append(levels[-1] / "d")
        levels[-1].mkdir()
    (levels[-1] / "f").write_text("x\n")
    yield root
    # pytest's own rmtree recurses per level: take the tree down from the bottom here.
    (levels[-1] / "f").unlink()
    for level in reversed(levels[1:]):
        level.rmdir()


def test_a_folder_1100_levels_deep_is_walked(
    deep: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "argv", ["servekit", "kit", "inspect", str(deep), "--fs"])
    with pytest.raises(SystemExit) as done:
        main()
    out = capsys.readouterr().out
    assert done.value.code == 0 and out.count("\n") == 1_101


@pytest.mark.parametrize(
    "argv",
    [
        ["sim", "--spec", "{dir}"],
        ["bench", "--target", "http://127.0.0.1:9", "--baseline", "{dir}"],
        ["bench", "--target", "http://127.0.0.1:9", "--trace", "{dir}"],
        ["kit", "verify", "{tmp}", "--smoke", "{dir}"],
        ["layouts", "show", "\udcff\udcfe"],
        ["accept", "--target", "http://127.0.0.1:9", "--only", "\udcff"],
        [
            "kit",
            "build",
            "--base",
            "{tmp}",
            "--out",
            "{tmp}/k",
            "--name",
            "\udcff",
            "--source",
            "x",
        ],
    ],
    ids=lambda a: " ".join(a[:2]),
)
def test_a_folder_for_a_file_and_non_utf8_arguments_stay_one_line(
    argv: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    (tmp_path / "dir.json").mkdir()
    args = [
        a.replace("{dir}", str(tmp_path / "dir.json")).replace("{tmp}", str(tmp_path)) for a in argv
    ]
    _run(args, monkeypatch, capsys)


def test_the_net_maps_each_kind_and_lets_others_through() -> None:
    """Positive controls for refusal_of: each kind becomes its line; anything else is None."""
    long = OSError(36, "File name too long", "/x/" + LONG)
    got = refusal_of(long, ["--upstream", "/x/" + LONG])
    assert isinstance(got, UsageError) and str(got).startswith("--upstream /x/aaa")
    folder = refusal_of(IsADirectoryError(21, "Is a directory", "/d/spec.yaml"), ["--spec", "/d"])
    assert folder is not None and str(folder) == "--spec /d: it is a folder; give a file"
    assert "nested too deeply" in str(refusal_of(RecursionError(), []))
    bad = refusal_of(UnicodeEncodeError("utf-8", "\udcff", 0, 1, "x"), ["show", "\udcff"])
    assert bad is not None and "not UTF-8" in str(bad)
    assert refusal_of(OSError(98, "Address in use"), []) is None
    assert refusal_of(UnicodeEncodeError("utf-8", "x", 0, 1, "x"), ["plain"]) is None
    assert refusal_of(ValueError("x"), []) is None
