"""An unpacked kit: its folder, its parsed MANIFEST.json and member checks.

``kit verify``, ``kit rebuild`` and ``kit inspect`` all start here, from either
the ``.tar.zst`` (unpacked safely into a scratch folder) or an unpacked folder.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from servekit.kit.errors import KitRefused
from servekit.kit.kitarchive import kit_members, unpack_hashed
from servekit.kit.models import KitManifest
from servekit.kit.streams import Limits, sha256_file

SUMS = "SHA256SUMS"


@dataclass(frozen=True)
class KitDir:
    """An unpacked kit folder."""

    root: Path
    archive_sha256: str | None = None

    def read_manifest(self) -> KitManifest:
        """Parse MANIFEST.json strictly (unknown or missing fields refuse the kit)."""
        path = self.root / "MANIFEST.json"
        if not path.is_file():
            raise KitRefused(f"kit {self.root.name}: MANIFEST.json is missing")
        try:
            return KitManifest.model_validate(json.loads(path.read_bytes()))
        except (ValueError, ValidationError) as exc:
            first = str(exc).splitlines()[0:3]
            raise KitRefused(
                f"kit {self.root.name}: MANIFEST.json is invalid ({' '.join(first)})"
            ) from exc

    def member(self, rel: str) -> Path:
        """A file inside the kit, refused when it is absent."""
        path = self.root / rel
        if ".." in Path(rel).parts or rel.startswith("/") or not path.is_file():
            raise KitRefused(f"kit {self.root.name}: member {rel!r} is missing")
        return path

    def listed_sums(self) -> dict[str, str]:
        """SHA256SUMS as member -> hex digest."""
        out: dict[str, str] = {}
        for line in self.member(SUMS).read_text(encoding="utf-8", errors="replace").splitlines():
            digest, _, rel = line.partition("  ")
            out[rel] = digest
        return out

    def sum_problems(self, hashed: dict[str, str] | None = None) -> list[str]:
        """Members that SHA256SUMS misses, lists twice, or hashes differently.

        ``hashed`` gives digests already computed elsewhere (a layer scan
        computes each layer file's sha256 as its diffID), so no byte is hashed
        twice.
        """
        hashed = hashed or {}
        listed: dict[str, str] = {}
        problems: list[str] = []
        for line in self.member(SUMS).read_text(encoding="utf-8", errors="replace").splitlines():
            digest, _, rel = line.partition("  ")
            if rel in listed:
                problems.append(f"{rel}: listed twice")
            listed[rel] = digest
        present = {m for m in kit_members(self.root) if not m.endswith("/") and m != SUMS}
        problems += [f"{rel}: not listed in {SUMS}" for rel in sorted(present - listed.keys())]
        problems += [f"{rel}: listed but absent" for rel in sorted(listed.keys() - present)]
        for rel in sorted(present & listed.keys()):
            digest = hashed.get(rel) or sha256_file(str(self.root / rel))
            if digest != listed[rel]:
                problems.append(f"{rel}: sha256 differs from {SUMS}")
        return problems


@contextlib.contextmanager
def open_kit(path: Path, limits: Limits) -> Iterator[KitDir]:
    """A kit folder for ``path`` (a folder, or a .tar.zst unpacked for the duration)."""
    if path.is_dir():
        yield KitDir(path)
        return
    if not path.is_file():
        raise KitRefused(f"kit {path}: no such file or folder")
    with tempfile.TemporaryDirectory(prefix="servekit-kit-") as tmp:
        root, digest = unpack_hashed(path, Path(tmp), limits)
        yield KitDir(root, digest)
