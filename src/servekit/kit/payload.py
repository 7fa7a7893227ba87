"""Payload specs: project files placed into a new working layer.

A spec (YAML or JSON) lists destination paths in the image with their source
files (or a symlink target), modes and owners, plus paths to remove (whiteouts),
directories to make opaque and the config delta. Sources must stay inside the
project root: a source symlink pointing elsewhere, a device node or a FIFO is
refused, as is any destination with ``..``.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, Field, ValidationError, field_validator

from servekit import safeyaml
from servekit.errors import UsageError, first_error
from servekit.kit.errors import KitRefused
from servekit.kit.fsmanifest import DIR, FILE, SYMLINK, FsState
from servekit.kit.models import ConfigDelta, KitExpect
from servekit.kit.paths import (
    OPAQUE,
    ROOT,
    member_path,
    parents,
    symlink_escapes,
    whiteout_named,
    whiteout_path,
)
from servekit.vocabulary import StrictModel, walk_tree

BaseModelT = TypeVar("BaseModelT", bound=BaseModel)


class PayloadItem(StrictModel):
    """One destination in the image: a file or directory tree, or a symlink."""

    dest: str = Field(description="Absolute path in the image, e.g. /opt/app/serve.sh")
    src: str | None = Field(None, description="File or directory, relative to the spec")
    symlink: str | None = Field(None, description="Make dest a symlink to this target")
    mode: str | None = Field(None, description="Octal mode such as '0755' (default: from src)")
    uid: int = Field(0, ge=0)
    gid: int = Field(0, ge=0)

    @field_validator("mode")
    @classmethod
    def _octal(cls, value: str | None) -> str | None:
        if value is not None and (not value.isdigit() or int(value, 8) > 0o7777 or "8" in value):
            raise ValueError("mode must be octal digits such as '0755'")
        return value


class PayloadSpec(StrictModel):
    """A whole payload spec file."""

    name: str | None = None
    files: list[PayloadItem] = Field(default_factory=list)
    remove: list[str] = Field(default_factory=list, description="Image paths to white out")
    opaque: list[str] = Field(default_factory=list, description="Directories to make opaque")
    config: ConfigDelta = Field(default_factory=ConfigDelta)
    expect: KitExpect | None = Field(None, description="Promises kit verify checks")


@dataclass(frozen=True)
class LayerMember:
    """One member of a layer to write: metadata and where its bytes come from."""

    path: str
    kind: str
    mode: int
    uid: int = 0
    gid: int = 0
    source: Path | None = None
    link: str = ""


def _validated(model: type[BaseModelT], data: object, what: str) -> BaseModelT:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        loc, msg = first_error(exc, "(top)")
        raise UsageError(f"{what}: {loc}: {msg}") from None


def load_spec(path: Path) -> PayloadSpec:
    """Parse and validate a payload spec, naming the bad field on error."""
    data = safeyaml.load_file(path, f"payload spec {path}")[1]
    return _validated(PayloadSpec, data or {}, f"payload spec {path}")


def load_expect(path: Path) -> KitExpect:
    """An expect file for ``kit build --expect``: the ``expect:`` section, or a file with one."""
    data = safeyaml.load_file(path, f"--expect {path}")[1]
    if isinstance(data, dict) and set(data) == {"expect"}:
        data = data["expect"]
    return _validated(KitExpect, data or {}, f"--expect {path}")


def _dest(value: str, what: str) -> str:
    if not value.startswith("/"):
        raise UsageError(f"{what}: dest {value!r} must be an absolute image path such as /opt/x")
    path = member_path(value.lstrip("/"), what)
    if path == ROOT:
        raise UsageError(f"{what}: dest may not be the image root")
    return path


def _inside(root: Path, src: Path, what: str) -> Path:
    resolved = src.resolve()
    if not resolved.is_relative_to(root):
        raise KitRefused(
            f"{what}: source {src} resolves to {resolved}, outside the project root {root}"
        )
    return resolved


def _file_member(dest: str, src: Path, item: PayloadItem) -> LayerMember:
    st = src.stat()
    if not stat.S_ISREG(st.st_mode):
        raise KitRefused(f"payload: {src} is a device node, FIFO or socket; only files are shipped")
    mode = int(item.mode, 8) if item.mode else (0o755 if st.st_mode & 0o111 else 0o644)
    return LayerMember(dest, FILE, mode, item.uid, item.gid, src)


def _tree(root: Path, dest: str, src: Path, item: PayloadItem) -> list[LayerMember]:
    out = [LayerMember(dest, DIR, 0o755, item.uid, item.gid)]
    for dirpath, dirnames, filenames in walk_tree(src):
        dirnames.sort()
        base = Path(dirpath)
        for name in dirnames + sorted(filenames):
            path = base / name
            rel = path.relative_to(src).as_posix()
            target = f"{dest}/{rel}"
            if path.is_symlink():
                _inside(root, path, "payload")
                out.append(
                    LayerMember(target, SYMLINK, 0o777, item.uid, item.gid, None, os.readlink(path))
                )
            elif path.is_dir():
                out.append(LayerMember(target, DIR, 0o755, item.uid, item.gid))
            else:
                out.append(_file_member(target, path, item.model_copy(update={"mode": None})))
    return out


def _item(root: Path, item: PayloadItem, index: int) -> list[LayerMember]:
    what = f"payload files.{index}"
    dest = _dest(item.dest, what)
    if (item.src is None) == (item.symlink is None):
        raise UsageError(f"{what}: give exactly one of src or symlink")
    if item.symlink is not None:
        return [LayerMember(dest, SYMLINK, 0o777, item.uid, item.gid, None, item.symlink)]
    src = _inside(root, root / str(item.src), what)
    if not src.exists():
        raise UsageError(f"{what}: src {item.src!r} does not exist under {root}")
    if src.is_dir():
        return _tree(root, dest, src, item)
    return [_file_member(dest, src, item)]


def _marker(path: str, what: str, opaque: bool) -> LayerMember:
    target = _dest(path, what)
    return LayerMember(f"{target}/{OPAQUE}" if opaque else whiteout_path(target), FILE, 0o644)


def expand(spec: PayloadSpec, root: Path, base: FsState) -> list[LayerMember]:
    """All layer members for a spec, parents included, sorted by path."""
    root = root.resolve()
    members: dict[str, LayerMember] = {}
    items = [m for i, item in enumerate(spec.files) for m in _item(root, item, i)]
    for member in items:
        name = whiteout_named(member.path)
        if name is not None:
            raise UsageError(
                f"payload: {member.path[:200]} is named {name[:40]!r}, which an image layer "
                "reads as a whiteout (it would hide base files, not ship one); rename it, "
                "or list the path under remove/opaque if hiding it is the point"
            )
    items += [_marker(p, "payload remove", False) for p in spec.remove]
    items += [_marker(p, "payload opaque", True) for p in spec.opaque]
    for member in items:
        if member.path in members:
            raise UsageError(f"payload: {member.path} is given twice")
        if member.kind == SYMLINK and symlink_escapes(member.path, member.link):
            raise KitRefused(
                f"payload: symlink {member.path} -> {member.link} climbs out of the image root"
            )
        members[member.path] = member
    for member in list(members.values()):
        for parent in parents(member.path):
            if parent not in members:
                have = base.get(parent)
                if have is not None and have.kind == DIR:
                    members[parent] = LayerMember(parent, DIR, have.mode, have.uid, have.gid)
                else:
                    members[parent] = LayerMember(parent, DIR, 0o755)
    return [members[p] for p in sorted(members)]
