"""Finding and loading layouts, with errors that point at the YAML file and line.

A catalog is a folder of ``<hardware>/<name>/layout.yaml``. servekit's own
catalog ships inside the package; ``--catalog DIR`` or ``SERVEKIT_CATALOG``
points every command at a user's folder instead. Files are read through
:mod:`servekit.safeyaml` (bounded size, strict UTF-8, bounded nesting and
aliases, duplicate keys refused), so any file gives a layout or one
UsageError line, never a traceback or a hang.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from servekit import safeyaml
from servekit.catalog.names import LayoutName
from servekit.catalog.profiles import PROFILES_DIR, Profile, merge_layers
from servekit.catalog.schema import Layout
from servekit.errors import UsageError, first_error_detail
from servekit.vocabulary import ROLES

LAYOUT_FILE = "layout.yaml"
ALIASES_FILE = "aliases.yaml"
OWN_FILE = "servekit.yaml"
"""servekit's own data on a layout (capabilities, verify reference, history), kept beside
the imported ``layout.yaml`` so a re-import rewrites the source's facts byte for byte and
loses none of servekit's; merged over the layout at load."""


def packaged_catalog() -> Path:
    """The catalog shipped with servekit (inside the wheel, or the source tree's layouts/)."""
    bundled = Path(str(resources.files("servekit"))) / "_layouts"
    if bundled.is_dir():
        return bundled
    source_tree = Path(__file__).resolve().parents[3] / "layouts"
    if source_tree.is_dir():
        return source_tree
    raise UsageError(
        "servekit's packaged catalog is missing; reinstall servekit or pass --catalog DIR"
    )


def resolve_catalog(catalog: Path | str | None = None) -> Path:
    """``--catalog`` first, then ``SERVEKIT_CATALOG``, then the packaged catalog."""
    chosen = catalog or os.environ.get("SERVEKIT_CATALOG")
    if not chosen:
        return packaged_catalog()
    path = Path(chosen).expanduser()
    if not path.is_dir():
        raise UsageError(
            f"--catalog {path}: not a folder; give a folder of <hardware>/<name>/layout.yaml"
        )
    return path


def layout_names(catalog: Path) -> list[str]:
    """Every layout name in a catalog, sorted: ``<hw>/<name>`` and ``<hw>/<model>/<topology>``."""
    found = [p.parent.relative_to(catalog) for p in catalog.glob(f"*/*/{LAYOUT_FILE}")]
    found += [p.parent.relative_to(catalog) for p in catalog.glob(f"*/*/*/{LAYOUT_FILE}")]
    return sorted(
        rel.as_posix()
        for rel in found
        if rel.parts[1] != PROFILES_DIR
        and (catalog / rel / LAYOUT_FILE).is_file()  # a FIFO or device is not a layout
    )


def aliases(catalog: Path) -> dict[str, str]:
    """Old name -> layout name, from the catalog's ``aliases.yaml`` (none when absent).

    The seven hand-made DeepSeek-V4-Flash A3 names (``a3/1p1d``, ...) keep resolving
    after the import named them by the source's grammar (``a3/deepseekv4-flash/1p1d``).
    """
    path = catalog / ALIASES_FILE
    if not path.is_file():
        return {}
    _node, data = safeyaml.load_file(path)
    if not isinstance(data, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in data.items()
    ):
        raise UsageError(f"{path}:1: aliases must map old names to layout names, e.g. a3/1p1d: ...")
    return dict(data)


def canonical_name(name: str, catalog: Path) -> str:
    """``name`` itself, or the layout an alias points at."""
    if (catalog / name / LAYOUT_FILE).is_file():
        return name
    return aliases(catalog).get(name, name)


def aliases_of(name: str, catalog: Path) -> list[str]:
    """The old names that point at layout ``name``, sorted."""
    return sorted(old for old, new in aliases(catalog).items() if new == name)


@dataclass(frozen=True)
class LoadedLayout:
    """A layout with where it came from (for messages and the ledger beside it)."""

    layout: Layout
    path: Path
    alias: str | None = None
    """The old name it was asked for, when that name is an alias of this layout."""

    @property
    def folder(self) -> Path:
        return self.path.parent

    @property
    def catalog(self) -> Path:
        """The catalog folder it sits in (its name's parts above the folder)."""
        return self.path.parents[len(LayoutName.parse(self.layout.name).parts)]

    @property
    def aliases(self) -> list[str]:
        """Its old names (``aliases.yaml``), sorted."""
        return aliases_of(self.layout.name, self.catalog)


def layout_path(name: str, catalog: Path) -> Path:
    path = catalog / name / LAYOUT_FILE
    if path.exists() and not path.is_file():
        raise UsageError(
            f"{path}: not a regular file (a FIFO, device or folder); a layout is a plain YAML file"
        )
    if not path.is_file():
        known = ", ".join(layout_names(catalog)) or "none"
        raise UsageError(
            f"unknown layout {name!r}; known layouts: {known} (see 'servekit layouts list')"
        )
    return path


def load(name: str, catalog: Path | str | None = None) -> LoadedLayout:
    """Load and schema-check one layout by name."""
    root = resolve_catalog(catalog)
    real = canonical_name(name, root)
    path = layout_path(real, root)
    alias = name if real != name else None
    return LoadedLayout(layout=parse_layout_file(path, expected_name=real), path=path, alias=alias)


def profiles_dir_of(layout_file: Path, name: str | None = None) -> Path:
    """``<catalog>/<hardware>/profiles`` for a layout file at any depth of the catalog.

    ``<hardware>/<name>/layout.yaml`` sits two folders below the hardware folder,
    ``<hardware>/<model>/<topology>/layout.yaml`` three; with the name known the
    depth is its own, else the nearest ``profiles`` folder above wins.
    """
    if name is not None:
        return layout_file.parents[len(LayoutName.parse(name).parts) - 1] / PROFILES_DIR
    for up in layout_file.parents[1:3]:
        if (up / PROFILES_DIR).is_dir():
            return up / PROFILES_DIR
    return layout_file.parent.parent / PROFILES_DIR


def profile_names(catalog: Path) -> list[str]:
    """Every profile in a catalog as ``<hardware>/<name>``, sorted."""
    return sorted(
        f"{p.parent.parent.name}/{p.stem}" for p in catalog.glob(f"*/{PROFILES_DIR}/*.yaml")
    )


def load_profile(profiles_dir: Path, name: str) -> Profile:
    """One profile file, schema-checked; problems name the file and line."""
    path = profiles_dir / f"{name}.yaml"
    if not re.fullmatch(r"[a-z0-9][a-z0-9.-]*", name) or not path.is_file():
        known = ", ".join(sorted(p.stem for p in profiles_dir.glob("*.yaml"))) or "none"
        raise UsageError(f"unknown profile {name!r}; profiles here: {known} ({profiles_dir})")
    node, data = safeyaml.load_file(path)
    try:
        return Profile.model_validate(data)
    except ValidationError as exc:
        raise UsageError(_describe(exc, node, str(path))) from exc


def _apply_profiles(data: dict[str, Any], profiles_dir: Path | None, source: str) -> None:
    """Merge each engine's profile under it (profile, its role, then the engine itself)."""
    engines = data.get("engines")
    if not isinstance(engines, list):
        return
    cache: dict[str, Profile] = {}
    for i, engine in enumerate(engines):
        if not isinstance(engine, dict) or engine.get("profile") is None:
            continue
        name = engine["profile"]
        if profiles_dir is None or not isinstance(name, str):
            raise UsageError(
                f"{source}: engines[{i}].profile: {name!r} cannot be resolved here; "
                "load the layout from its catalog folder"
            )
        profile = cache.setdefault(name, load_profile(profiles_dir, name))
        role = engine.get("role")
        layers = profile.layer(role) if role in ROLES else []
        engines[i] = merge_layers([*layers, engine])


def load_all(catalog: Path | str | None = None) -> list[LoadedLayout]:
    root = resolve_catalog(catalog)
    return [load(name, root) for name in layout_names(root)]


def parse_layout_file(path: Path, expected_name: str | None = None) -> Layout:
    """Parse one layout.yaml (with servekit's own file beside it merged over it).

    Any problem is a UsageError naming file, line and field.
    """
    text = safeyaml.decode(safeyaml.read_bytes(path), str(path))
    return parse_layout_text(
        text, str(path), expected_name, profiles_dir_of(path, expected_name), own_data(path)
    )


def own_data(layout_file: Path) -> dict[str, Any] | None:
    """The mapping in the ``servekit.yaml`` beside ``layout_file`` (None when absent)."""
    path = layout_file.parent / OWN_FILE
    if not path.is_file():
        return None
    _node, data = safeyaml.load_file(path)
    if not isinstance(data, dict):
        raise UsageError(f"{path}:1: servekit's own data must be a mapping of layout fields")
    return data


def merge_own(data: dict[str, Any], own: dict[str, Any]) -> dict[str, Any]:
    """``own`` over ``data``: mappings merge key by key, anything else replaces."""
    merged = dict(data)
    for key, value in own.items():
        base = merged.get(key)
        if isinstance(base, dict) and isinstance(value, dict):
            merged[key] = merge_own(base, value)
        else:
            merged[key] = value
    return merged


def parse_layout_bytes(
    data: bytes,
    source: str,
    expected_name: str | None = None,
    profiles_dir: Path | None = None,
) -> Layout:
    """A layout from a file's bytes (UTF-8 YAML); any problem is one UsageError line."""
    return parse_layout_text(safeyaml.decode(data, source), source, expected_name, profiles_dir)


def parse_layout_text(
    text: str,
    source: str,
    expected_name: str | None = None,
    profiles_dir: Path | None = None,
    own: dict[str, Any] | None = None,
) -> Layout:
    node, data = safeyaml.compose(text, source)
    if not isinstance(data, dict):
        raise UsageError(
            f"{source}:1: a layout must be a YAML mapping of fields (name, title, ...)"
        )
    if expected_name is not None and data.get("name") != expected_name:
        raise UsageError(
            f"{source}:{_line_of(node, ('name',))}: name is {data.get('name')!r} but the file "
            f"sits at {expected_name!r}; set name: {expected_name}"
        )
    # ``x-`` keys hold YAML anchors shared inside the file (as compose files do).
    data = {k: v for k, v in data.items() if not (isinstance(k, str) and k.startswith("x-"))}
    if own is not None:
        data = merge_own(data, own)
    _apply_profiles(data, profiles_dir, source)
    try:
        return Layout.model_validate(data)
    except ValidationError as exc:
        raise UsageError(_describe(exc, node, source)) from exc


def _describe(exc: ValidationError, node: yaml.Node | None, source: str) -> str:
    err = first_error_detail(exc, "(top level)")
    field, line, kind, msg = err.field, _line_of(node, err.loc), err.kind, err.reason
    if kind == "extra_forbidden":
        hint = f"unknown field {field!r}; remove it or check its spelling against docs/layouts.md"
    elif kind == "missing":
        hint = f"missing field {field!r}; add it"
    else:
        hint = f"field {field!r}: {msg}"
    suffix = f" (+{err.more} more)" if err.more else ""
    return f"{source}:{line}: {hint}{suffix}".replace("\n", "\\n")


def _line_of(node: yaml.Node | None, loc: tuple[Any, ...]) -> int:
    """The 1-based line of the YAML node at ``loc`` (or of its nearest parent)."""
    line = node.start_mark.line + 1 if node is not None else 1
    current = node
    for part in loc:
        if isinstance(current, yaml.MappingNode):
            pair = next(((k, v) for k, v in current.value if k.value == str(part)), None)
            if pair is None:
                return line
            line = pair[0].start_mark.line + 1
            current = pair[1]
        elif isinstance(current, yaml.SequenceNode) and isinstance(part, int):
            if part >= len(current.value):
                return line
            current = current.value[part]
            line = current.start_mark.line + 1
        else:
            return line
    return line
