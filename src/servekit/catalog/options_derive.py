"""The options of ``servekit layouts new``, ``layouts diff`` and ``layouts drift``.

One model per command, as :mod:`servekit.catalog.options` keeps the others (kept
apart so the derive commands merge without touching that file); light on purpose.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from servekit.catalog.options import catalog_field
from servekit.vocabulary import StrictModel


class LayoutsNewOptions(StrictModel):
    """``servekit layouts new NAME --from BASE``."""

    name: str = Field(description="the new layout's name <hw>/<model>/<topology>")
    base: str = Field(
        description="the layout to derive from (read from --catalog)",
        json_schema_extra={"flag": "--from"},
    )
    topology: str | None = Field(
        None, description="<A>x<B>p<C>x<D>d (default: NAME's own topology)"
    )
    prefill: int | None = Field(None, description="prefill instances (instead of --topology)")
    decode: int | None = Field(None, description="decode instances (instead of --topology)")
    prefill_nodes: int = Field(1, description="nodes each prefill instance spans")
    decode_nodes: int = Field(1, description="nodes each decode instance spans")
    model: str | None = Field(None, description="model path in the container (default: BASE's)")
    hardware: Literal["a2", "a3"] | None = Field(
        None, description="a2 (8 NPUs per node) or a3 (16); default: BASE's"
    )
    set: tuple[str, ...] = Field(
        (),
        description="KEY=VALUE on the derived layout (engines.decode0.tp=2), or on every "
        "instance of a role before they are computed (prefill.tp=8, decode.dp_size_per_node=8)",
    )
    force: bool = Field(False, description="replace an existing layout of that name")
    dry_run: bool = Field(False, description="print the layout instead of writing it")
    catalog: Path | None = catalog_field()


class LayoutsDiffOptions(StrictModel):
    """``servekit layouts diff A B``."""

    a: str = Field(description="a layout name, a rendered folder (plan.json) or a source folder")
    b: str = Field(description="the same kinds as A")
    json_out: bool = Field(False, description="print JSON", json_schema_extra={"flag": "--json"})
    catalog: Path | None = catalog_field()


class LayoutsDriftOptions(StrictModel):
    """``servekit layouts drift NAME --upstream FILE``."""

    name: str = Field(description="layout name")
    upstream: Path = Field(
        description="a newer reference: the tutorial's commands saved as a file, or a "
        "vllm-ascend docs markdown file"
    )
    json_out: bool = Field(False, description="print JSON", json_schema_extra={"flag": "--json"})
    catalog: Path | None = catalog_field()
