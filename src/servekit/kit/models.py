"""MANIFEST.json: the kit's record of what it holds and what it was built from.

Frozen pydantic models with ``extra="forbid"``: a kit whose manifest has an
unknown or missing field is refused at the boundary, not half-understood.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import (
    BeforeValidator,
    Field,
    ValidationError,
    field_validator,
)

from servekit.errors import first_error
from servekit.kit.errors import KitRefused
from servekit.kit.paths import image_path, whiteout_named
from servekit.vocabulary import ROLES, Role, StrictModel

# 3: selftest.sh image takes the verify run's nonce and prints the smoke proof.
SCHEMA_VERSION: Literal[3] = 3
KIT_ROLES: tuple[Role, ...] = tuple(reversed(ROLES))
"""The order a kit lists per-role values in: decode first (its README, its checks)."""
# An environment variable name as shell scripts and a Dockerfile ENV take it unquoted.
VAR_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# The generated rebuild.sh, selftest.sh and Dockerfile carry these values in shell
# text and comments; a kit whose MANIFEST holds anything else is refused, so a
# kit that passes its "generated" check never ships a script that runs a value.
KIT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,127}")
_TOKEN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+:~-]{0,127}")
_DIGEST = re.compile(r"(sha256:)?[0-9a-f]{64}")
_MEMBER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*(/[A-Za-z0-9_][A-Za-z0-9._-]*)*")
_MAX_TEXT = 1024
# Bounds on MANIFEST.json, checked before it is parsed (bytes) and before it is
# validated (entries), so a kit listing 10^6 files is one line in bounded memory
# rather than gigabytes of models. A payload is the files a project adds (scripts,
# patches, a Python package or two): tens to thousands; an image's own files are
# in fs-manifest.txt, which has its own bound (Limits.max_entries).
MAX_PAYLOAD_FILES = 50_000
MAX_LAYERS = 1_000
MAX_MANIFEST_BYTES = 32 << 20


def _token(value: str) -> str:
    if not _TOKEN.fullmatch(value):
        raise ValueError(f"{value[:40]!r} is not a plain token (letters, digits, . _ + : ~ -)")
    return value


def _digest(value: str) -> str:
    if not _DIGEST.fullmatch(value):
        raise ValueError(f"{value[:40]!r} is not a sha256 digest")
    return value


def _one_line(value: str | None) -> str | None:
    if value is not None and (not value.isprintable() or len(value) > _MAX_TEXT):
        raise ValueError(f"{value[:40]!r}: one printable line of at most {_MAX_TEXT} characters")
    return value


def _each_one_line(values: list[str]) -> list[str]:
    for value in values:
        _one_line(value)
    return values


class Generator(StrictModel):
    """The tool that wrote the kit."""

    name: str
    version: str

    _tokens = field_validator("name", "version")(_token)


class BaseInfo(StrictModel):
    """The base image the working layers go on top of."""

    reference: str = Field(description="Name or reference of the base image as given")
    image_id: str = Field(description="sha256 of the base image config")
    layer_count: int
    diff_ids: list[str]

    _reference = field_validator("reference")(_one_line)
    _image_id = field_validator("image_id")(_digest)

    @field_validator("diff_ids")
    @classmethod
    def _diff_ids(cls, value: list[str]) -> list[str]:
        return [_digest(v) for v in value]


class LayerInfo(StrictModel):
    """One working layer shipped in the kit."""

    file: str = Field(description="Member path inside the kit (uncompressed tar)")
    diff_id: str
    sha256: str = Field(description="Digest of the layer blob in the source image")
    compressed_size: int
    raw_size: int
    entries: int
    whiteouts: list[str]
    opaque_dirs: list[str]

    _digests = field_validator("diff_id", "sha256")(_digest)

    @field_validator("file")
    @classmethod
    def _member(cls, value: str) -> str:
        if not _MEMBER.fullmatch(value) or ".." in value.split("/"):
            raise ValueError(f"{value[:40]!r} is not a plain member path such as layers/1.tar")
        return value

    _paths = field_validator("whiteouts", "opaque_dirs")(_each_one_line)


class PayloadFile(StrictModel):
    """A file the working layers deliver, with its content digest.

    ``source`` is the file's path in the code repository (relative to its
    root) when the kit was built with ``--repo`` and the file comes from it.
    """

    path: str
    sha256: str
    size: int
    mode: str
    uid: int
    gid: int
    source: str | None = None

    @field_validator("path")
    @classmethod
    def _not_a_whiteout(cls, value: str) -> str:
        name = whiteout_named(value)
        if name is not None:
            raise ValueError(
                f"{value[:80]!r}: {name[:40]!r} is an OCI whiteout name, which hides base files "
                "instead of shipping one"
            )
        return value


class ConfigDelta(StrictModel):
    """What the image config changes relative to the base (None: unchanged)."""

    env: dict[str, str] = Field(default_factory=dict)
    env_removed: list[str] = Field(default_factory=list)
    labels: dict[str, str] = Field(default_factory=dict)
    labels_removed: list[str] = Field(default_factory=list)
    cmd: list[str] | None = None
    entrypoint: list[str] | None = None
    working_dir: str | None = None


def _text_value(value: object) -> object:
    """A promised value as text: YAML's ``1`` means "1"; true/false and 0.9 must be quoted."""
    if isinstance(value, bool | float):
        raise ValueError(f"write {value!r} in quotes, as the script writes it (e.g. '1', '0.92')")
    return str(value) if isinstance(value, int) else value


Text = Annotated[str, BeforeValidator(_text_value)]


class RoleValues(StrictModel):
    """A default that differs by the script's role (a role left out is not promised)."""

    decode: Text | None = None
    prefill: Text | None = None
    mixed: Text | None = None

    def for_role(self, role: Role) -> str | None:
        value: str | None = getattr(self, role)
        return value


def _image_file(value: str) -> str:
    try:
        return image_path(value, "expect")
    except KitRefused as exc:
        raise ValueError(str(exc)) from None


class Gate(StrictModel):
    """A default in a shipped file (``os.environ.get(NAME, "1")``) that must agree."""

    file: str = Field(description="Image path of a payload file, e.g. /opt/app/model.py")
    name: str = Field(description="The environment variable the code reads")
    default: Text = Field(description="The default the code must fall back to")

    _file = field_validator("file")(_image_file)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not VAR_NAME.fullmatch(value):
            raise ValueError("a variable name such as V41_CED_GRAPH_GATE")
        return value


class Marker(StrictModel):
    """Text that must be present in a shipped file (e.g. the decode guard's class)."""

    file: str = Field(description="Image path of a payload file")
    contains: str = Field(min_length=1, description="Literal text the file must contain")

    _file = field_validator("file")(_image_file)


class KitExpect(StrictModel):
    """What the kit promises about the files it ships; ``kit verify`` checks each promise.

    ``defaults``: ``NAME=${NAME:-value}`` in the shipped shell scripts, one value
    for every script or a value per role. A script's role is ``roles[path]``
    when given, else from its name (``decode`` or ``prefill`` in the path, else
    ``mixed``). ``repo_rev`` is the release baseline the stamp must equal.
    """

    defaults: dict[str, str | RoleValues] = Field(default_factory=dict)
    gates: list[Gate] = Field(default_factory=list)
    markers: list[Marker] = Field(default_factory=list)
    roles: dict[str, Role] = Field(default_factory=dict)
    repo_rev: str | None = Field(None, description="Release baseline, e.g. 7497a06+0dirty")

    @field_validator("defaults", mode="before")
    @classmethod
    def _promises(cls, value: object) -> object:
        """Each value is text (YAML ints become text) or a mapping role -> text."""
        if not isinstance(value, dict):
            return value
        out: dict[object, object] = {}
        for name, promise in value.items():
            if not isinstance(name, str) or not VAR_NAME.fullmatch(name):
                raise ValueError(f"{name!r} is not a shell variable name")
            try:
                out[name] = (
                    RoleValues.model_validate(promise)
                    if isinstance(promise, dict)
                    else _text_value(promise)
                )
            except (ValueError, ValidationError) as exc:
                why = first_error(exc)[1] if isinstance(exc, ValidationError) else str(exc)
                raise ValueError(
                    f"{name}: {why} (give text, or a mapping of decode/prefill/mixed to text)"
                ) from None
        return out

    @field_validator("roles")
    @classmethod
    def _role_paths(cls, value: dict[str, Role]) -> dict[str, Role]:
        for path in value:
            _image_file(path)
        return value

    def files(self) -> set[str]:
        """Every payload file a promise names."""
        return {g.file for g in self.gates} | {m.file for m in self.markers} | set(self.roles)


class CodeBaseline(StrictModel):
    """The source tree the kit was built from."""

    repo_rev: str = Field(description="short commit + '+' + dirty file count + 'dirty'")
    commit: str
    dirty_files: list[str]
    engines: dict[str, str] = Field(default_factory=dict)

    _tokens = field_validator("repo_rev", "commit")(_token)

    _dirty = field_validator("dirty_files")(_each_one_line)

    @field_validator("engines")
    @classmethod
    def _engines(cls, value: dict[str, str]) -> dict[str, str]:
        for key, version in value.items():
            _token(key)
            _token(version)
        return value


class ImageInfo(StrictModel):
    """The image the kit reproduces (base + working layers)."""

    source: str | None = Field(description="Source image reference, None when built from a payload")
    image_id: str = Field(description="sha256 of config.json; a rebuild gives the same id")
    layer_count: int
    fs_entries: int
    payload_count: int

    _source = field_validator("source")(_one_line)
    _image_id = field_validator("image_id")(_digest)


class KitManifest(StrictModel):
    """The whole MANIFEST.json."""

    schema_version: Literal[1, 2, 3] = SCHEMA_VERSION
    name: str
    generator: Generator
    created: str | None
    base: BaseInfo
    image: ImageInfo
    layers: list[LayerInfo] = Field(max_length=MAX_LAYERS)
    payload: list[PayloadFile] = Field(max_length=MAX_PAYLOAD_FILES)
    config_delta: ConfigDelta
    code: CodeBaseline | None
    expect: KitExpect | None = Field(
        None, description="The kit's promises (kit verify checks them)"
    )

    _created = field_validator("created")(_one_line)

    @field_validator("name")
    @classmethod
    def _kit_name(cls, value: str) -> str:
        if not KIT_NAME.fullmatch(value):
            raise ValueError(f"{value[:40]!r} is not a plain kit name such as mykit-v1")
        return value
