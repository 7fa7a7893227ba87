"""The options of the catalog commands: ``layouts list|show|check``, ``defaults``, ``catalog site``.

One model per command (:mod:`servekit.cliopts` turns each into its typer
command and its docs table), so a flag, its default and its help exist once.
Light on purpose: ``servekit --help`` imports this module, so it needs nothing
but pydantic.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field

from servekit.vocabulary import EngineKind, Role, StrictModel

CATALOG_HELP = "catalog folder (default: SERVEKIT_CATALOG or the packaged catalog)"


def catalog_field() -> Any:
    """``--catalog DIR``, the same on every command that reads layouts."""
    return Field(None, description=CATALOG_HELP)


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
        description="a layout folder in the source's convention (run.sh, role scripts, meta.yaml)"
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
    repo: str = Field("xuopoj/ma-vllm-samples", description="the source repository (owner/name)")
    commit: str | None = Field(None, description="the source commit the folder was taken at")
    catalog: Path | None = catalog_field()
