"""The options of ``servekit kit build|verify|rebuild|inspect``: one model per command.

Each model is the command's options and its capability's argument at once:
:func:`~servekit.kit.build.build_kit`, :func:`~servekit.kit.verify.verify_kit`
and :func:`~servekit.kit.rebuild.rebuild_kit` take it as it is, so a flag is
one field and nothing copies it. :mod:`servekit.cliopts` generates each typer
command and its docs table from these models, so a flag's default and help
exist once. Light on purpose: ``servekit --help`` imports this module, so it
needs only pydantic (the kit machinery is imported when a command runs).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import Field, field_validator, model_validator

from servekit.vocabulary import ROLES, EngineKind, Role, StrictModel

if TYPE_CHECKING:
    from servekit.kit.streams import Limits

DEFAULT_MAX_SIZE = 64 << 30
DEFAULT_MAX_RATIO = 1000
_ENGINE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.-]*")
_FAMILY_NAME = re.compile(r"(?:[a-z0-9][a-z0-9_-]*/)?[a-z0-9][a-z0-9_.-]*")


def max_size_field() -> Any:
    return Field(
        DEFAULT_MAX_SIZE, ge=1, description="Largest size (bytes) a stream may decompress to"
    )


def max_ratio_field() -> Any:
    return Field(DEFAULT_MAX_RATIO, ge=1, description="Largest decompression ratio")


class _Bounded(StrictModel):
    """A command that reads compressed streams: ``--max-size``/``--max-ratio`` bound them.

    Each subclass declares the two fields last (where its help lists them); this
    base only reads them.
    """

    if TYPE_CHECKING:
        max_size: int
        max_ratio: int

    @property
    def limits(self) -> Limits:
        """The stream bounds these flags ask for (the other bounds keep their defaults)."""
        from servekit.kit.streams import Limits

        return Limits(max_total=self.max_size, max_ratio=self.max_ratio)


class KitBuildOptions(_Bounded):
    """``servekit kit build``."""

    base: str = Field(description="Base image: OCI dir or docker-archive .tar")
    out: Path = Field(description="Kit file to write (NAME.tar.zst)")
    source: str | None = Field(None, description="Source image built on the base")
    payload: Path | None = Field(None, description="Payload spec (YAML/JSON)")
    payload_root: Path | None = Field(
        None, description="Project root for payload sources (default: spec's folder)"
    )
    name: str | None = Field(None, description="Kit folder name (default: from --out)")
    base_ref: str | None = Field(
        None, description="Reference to record for the base, e.g. repo/img:tag"
    )
    repo: Path | None = Field(None, description="Git repo for the repo_rev stamp")
    engine: tuple[str, ...] = Field((), description="Engine version NAME=VERSION (repeatable)")
    date: str | None = Field(None, description="'created' stamp (default: repo HEAD date)")
    expect: Path | None = Field(
        None, description="YAML of the kit's promises (the expect: section), for --source"
    )
    max_size: int = max_size_field()
    max_ratio: int = max_ratio_field()

    @field_validator("engine")
    @classmethod
    def _engines(cls, items: tuple[str, ...]) -> tuple[str, ...]:
        for item in items:
            key, sep, value = item.partition("=")
            if not sep or not _ENGINE_NAME.fullmatch(key) or not value.isprintable():
                raise ValueError(f"--engine {item!r}: write NAME=VERSION, e.g. vllm=0.27.1")
        return items

    def engines(self) -> dict[str, str]:
        """``--engine`` pairs as name -> version."""
        return dict(item.split("=", 1) for item in self.engine)


class KitVerifyOptions(_Bounded):
    """``servekit kit verify ARCHIVE``."""

    archive: Path = Field(description="Kit .tar.zst (or unpacked folder)")
    repo: Path | None = Field(
        None, description="Git checkout: every payload file against it at the stamped repo_rev"
    )
    baseline: str | None = Field(
        None, description="Release baseline repo_rev (7497a06+0dirty or a commit)"
    )
    base: str | None = Field(None, description="Base image: rebuild onto it and prove the result")
    smoke: Path | None = Field(
        None, description="Log of 'selftest.sh image NONCE' run in the rebuilt image"
    )
    nonce: Path | None = Field(
        None,
        description="smoke-nonce.txt that an earlier kit verify --out issued for --smoke's run",
    )
    out: Path | None = Field(
        None, description="Folder for the release table (Markdown, JSON) and its evidence"
    )
    kind: EngineKind | None = Field(
        None, description="Also compare script defaults with servekit's table for this kind"
    )
    family: str | None = Field(
        None,
        description="Compare script defaults with this catalog family's row instead"
        " (a profile, see servekit defaults)",
    )
    role: Role | None = Field(
        None, description="Role for --kind/--family (default: from each script's name)"
    )
    catalog: str | None = Field(
        None, description="Catalog folder for --family (default: the packaged one)"
    )
    as_json: bool = Field(
        False, description="Print the report as JSON", json_schema_extra={"flag": "--json"}
    )
    max_size: int = max_size_field()
    max_ratio: int = max_ratio_field()

    @field_validator("role", mode="before")
    @classmethod
    def _known_role(cls, value: object) -> object:
        if value is not None and value not in ROLES:
            raise ValueError(f"--role {value!r}: choose decode, prefill or mixed")
        return value

    @model_validator(mode="after")
    def _role_needs_kind(self) -> KitVerifyOptions:
        if self.role is not None and self.kind is None and self.family is None:
            raise ValueError(
                "--role applies to the servekit table check: give --kind KIND or --family NAME too"
            )
        if self.catalog is not None and self.family is None:
            raise ValueError("--catalog applies to --family: give --family NAME too")
        if self.nonce is not None and self.smoke is None:
            raise ValueError("--nonce applies to --smoke: give --smoke LOG too")
        if self.family is not None and not _FAMILY_NAME.fullmatch(self.family):
            raise ValueError(f"--family {self.family[:40]!r}: write a profile name, e.g. a3/NAME")
        return self


class KitRebuildOptions(_Bounded):
    """``servekit kit rebuild KIT``."""

    kit: Path = Field(description="Kit .tar.zst or unpacked folder")
    base: str = Field(description="Base image: OCI dir or docker-archive .tar")
    out: Path = Field(description="OCI layout dir, or FILE.tar for docker-archive")
    tag: str | None = Field(None, description="Tag (OCI ref name or repo:tag)")
    gzip: bool = Field(False, description="Gzip the working layers (OCI output)")
    max_size: int = max_size_field()
    max_ratio: int = max_ratio_field()


class KitInspectOptions(StrictModel):
    """``servekit kit inspect TARGET``."""

    target: str = Field(description="Kit (.tar.zst or folder) or image reference")
    fs: bool = Field(False, description="Print the filesystem manifest instead")
    exclude: tuple[str, ...] = Field(
        (), description="Rootfs path to skip with --fs, e.g. /proc (repeatable)"
    )
    as_json: bool = Field(False, description="Print JSON", json_schema_extra={"flag": "--json"})
