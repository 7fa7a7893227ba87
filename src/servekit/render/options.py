"""The options of ``servekit render``: one model for the CLI, the code and the docs."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from servekit.vocabulary import StrictModel


class RenderOptions(StrictModel):
    """What ``servekit render`` is asked."""

    name: str = Field(description="layout name, e.g. a3/1p1d")
    out: Path = Field(
        description="folder to write (a new or empty folder, or an earlier rendering)"
    )
    target: Literal["modelarts", "nodes"] = Field(
        "modelarts",
        description="modelarts: one entry every node runs from the rank table; "
        "nodes: a bash folder per node (export NODE<i>_IP)",
    )
    set: tuple[str, ...] = Field(
        (),
        description="override a field, e.g. engines.decode0.settings.max_num_seqs=64 (repeatable)",
    )
    force: bool = Field(False, description="replace an --out folder that holds other files")
    catalog: Path | None = Field(
        None, description="catalog folder (default: SERVEKIT_CATALOG or the packaged catalog)"
    )
