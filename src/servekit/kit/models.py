"""MANIFEST.json: the kit's record of what it holds and what it was built from.

Frozen pydantic models with ``extra="forbid"``: a kit whose manifest has an
unknown or missing field is refused at the boundary, not half-understood.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION = 1


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Generator(_Frozen):
    """The tool that wrote the kit."""

    name: str
    version: str


class BaseInfo(_Frozen):
    """The base image the working layers go on top of."""

    reference: str = Field(description="Name or reference of the base image as given")
    image_id: str = Field(description="sha256 of the base image config")
    layer_count: int
    diff_ids: list[str]


class LayerInfo(_Frozen):
    """One working layer shipped in the kit."""

    file: str = Field(description="Member path inside the kit (uncompressed tar)")
    diff_id: str
    sha256: str = Field(description="Digest of the layer blob in the source image")
    compressed_size: int
    raw_size: int
    entries: int
    whiteouts: list[str]
    opaque_dirs: list[str]


class PayloadFile(_Frozen):
    """A file the working layers deliver, with its content digest."""

    path: str
    sha256: str
    size: int
    mode: str
    uid: int
    gid: int


class ConfigDelta(_Frozen):
    """What the image config changes relative to the base (None: unchanged)."""

    env: dict[str, str] = Field(default_factory=dict)
    env_removed: list[str] = Field(default_factory=list)
    labels: dict[str, str] = Field(default_factory=dict)
    labels_removed: list[str] = Field(default_factory=list)
    cmd: list[str] | None = None
    entrypoint: list[str] | None = None
    working_dir: str | None = None


class CodeBaseline(_Frozen):
    """The source tree the kit was built from."""

    repo_rev: str = Field(description="short commit + '+' + dirty file count + 'dirty'")
    commit: str
    dirty_files: list[str]
    engines: dict[str, str] = Field(default_factory=dict)


class ImageInfo(_Frozen):
    """The image the kit reproduces (base + working layers)."""

    source: str | None = Field(description="Source image reference, None when built from a payload")
    image_id: str = Field(description="sha256 of config.json; a rebuild gives the same id")
    layer_count: int
    fs_entries: int
    payload_count: int


class KitManifest(_Frozen):
    """The whole MANIFEST.json."""

    schema_version: int = SCHEMA_VERSION
    name: str
    generator: Generator
    created: str | None
    base: BaseInfo
    image: ImageInfo
    layers: list[LayerInfo]
    payload: list[PayloadFile]
    config_delta: ConfigDelta
    code: CodeBaseline | None
