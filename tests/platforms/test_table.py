"""One platform table: the CLI's --target choices are its rows, each a folder with a renderer."""

from __future__ import annotations

import typing
from pathlib import Path

from servekit.platforms import PLATFORMS, TARGETS, RenderOptions

SRC = Path(__file__).resolve().parents[2] / "src" / "servekit" / "platforms"


def test_the_target_choices_are_the_table() -> None:
    choices = typing.get_args(RenderOptions.model_fields["target"].annotation)
    assert tuple(PLATFORMS) == TARGETS == choices == ("modelarts", "nodes", "k8s")


def test_each_platform_is_one_folder_whose_row_is_its_own() -> None:
    for name, row in PLATFORMS.items():
        folder = SRC / name
        assert (folder / "__init__.py").is_file(), name
        assert row.name == name
        parts = [row.render, row.start, row.fake, row.refused, row.requirements, row.flags]
        parts += [row.attach.hosts] if row.attach else []
        for part in [p for p in parts if p is not None]:
            module = part.__module__
            assert module.partition(".")[2].startswith(f"platforms.{name}"), (name, module)
