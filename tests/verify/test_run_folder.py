"""verify's default run folder is named after the layout, whichever of its names was given."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from servekit.verify import run
from servekit.verify.options import VerifyOptions


class _Chosen(Exception):
    pass


@pytest.mark.parametrize(
    ("given", "folder"),
    [
        ("a3/1p1d", "a3__deepseekv4-flash__1p1d"),  # an alias (aliases.yaml)
        ("a3/deepseekv4-flash/1p1d", "a3__deepseekv4-flash__1p1d"),
        ("local/1p1d", "local__1p1d"),  # positive control: a name that is no alias
    ],
)
def test_the_default_run_folder_is_the_layouts(
    given: str, folder: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("SERVEKIT_REPORTS", str(tmp_path))
    chosen: list[Path] = []
    real = run.default_run_dir

    def default_run_dir(name: str, started: dt.datetime) -> Path:
        chosen.append(real(name, started))
        raise _Chosen  # stop before anything is written or started

    monkeypatch.setattr(run, "default_run_dir", default_run_dir)
    with pytest.raises(_Chosen):
        run.verify(VerifyOptions(name=given, engine="sim"), parts=None)  # type: ignore[arg-type]
    assert [p.parent for p in chosen] == [tmp_path / folder]
