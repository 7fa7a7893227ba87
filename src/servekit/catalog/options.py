"""The options of the catalog commands: ``layouts list|show|check|import|new|diff|drift``,
``defaults``, ``catalog site``.

One model per command (:mod:`servekit.cliopts` turns each into its typer
command and its docs table), so a flag, its default and its help exist once.
Light on purpose: ``servekit --help`` imports this module, so it needs nothing
but pydantic.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from servekit.vocabulary import EngineKind, Role, StrictModel


def catalog_field() -> Any:
    """``--catalog DIR``, the same on every command that reads layouts."""
    return Field(
        None, description="catalog folder (default: SERVEKIT_CATALOG or the packaged catalog)"
    )


class LayoutsListOptions(StrictModel):
    """``servekit layouts list``."""

    as_json: bool = Field(
        False,
        description="print each layout's source (repository, commit, folder), the source's "
        "claim, servekit's status and the derived date as JSON",
        json_schema_extra={"flag": "--json"},
    )
    catalog: Path | None = catalog_field()


class LayoutsShowOptions(StrictModel):
    """``servekit layouts show NAME``."""

    name: str = Field(description="layout name, e.g. a3/1p1d")
    catalog: Path | None = catalog_field()


class LayoutsCheckOptions(StrictModel):
    """``servekit layouts check [NAMES...]``."""

    names: tuple[str, ...] = Field((), description="layouts to check (default: all)")
    strict: bool = Field(False, description="warnings fail too")
    catalog: Path | None = catalog_field()


class DefaultsOptions(StrictModel):
    """``servekit defaults``: the defaults table, narrowed."""

    kind: EngineKind | None = Field(None, description="engine kind: vllm-ascend, vllm or vllm-cpu")
    role: Role | None = Field(None, description="mixed, prefill or decode")
    family: str | None = Field(
        None,
        description="a layout family (a profile such as dsv4-flash-a3-pd), or 'generic' for "
        "the rows of engines without one",
    )
    catalog: Path | None = catalog_field()


class CatalogSiteOptions(StrictModel):
    """``servekit catalog site``."""

    out: Path = Field(description="folder to write (replaced whole)")
    catalog: Path | None = catalog_field()


class LayoutsImportOptions(StrictModel):
    """``servekit layouts import FOLDER``."""

    folder: Path = Field(
        description="a layout folder the platform runs (its entry script on every node; "
        "role scripts, launchers, meta.yaml optional)"
    )
    name: str | None = Field(
        None,
        description="layout name <hw>/<model>/<topology> (default: from the folder, "
        "models/<model>-<hw>/<topology>)",
    )
    facts: Path | None = Field(
        None,
        description="import these recorded facts (a source.json) instead of running the folder",
    )
    nodes: int | None = Field(
        None,
        ge=1,
        le=250,
        description="the node count, when nothing in the folder says it (default: found by "
        "running the entry on more nodes and counting the ranks that start something)",
    )
    entry: str = Field(
        "run.sh", description="the script every node runs (sh /root/script/ENTRY on the platform)"
    )
    repo: str | None = Field(
        None, description="the source repository (owner/name); default: unknown"
    )
    commit: str | None = Field(
        None, description="the source commit the folder was taken at; default: unknown"
    )
    catalog: Path | None = catalog_field()


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
