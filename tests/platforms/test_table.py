"""One platform table: the CLI's --target choices are its rows, each a folder with a renderer."""

from __future__ import annotations

import typing
from pathlib import Path

from servekit.platforms import PLATFORMS, TARGETS, RenderOptions

SRC = Path(__file__).resolve().parents[2] / "src" / "servekit" / "platforms"


def test_the_target_choices_are_the_table() -> None:
    choices = typing.get_args(RenderOptions.model_fields["target"].annotation)
    assert tuple(PLATFORMS) == TARGETS == choices == ("modelarts", "nodes", "k8s")


def test_each_platform_is_one_folder_with_a_renderer() -> None:
    for name in PLATFORMS:
        folder = SRC / ("k8s" if name == "k8s" else name)
        assert (folder / "__init__.py").is_file(), name
        assert "def render(" in (folder / "__init__.py").read_text(), name
