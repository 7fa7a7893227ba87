"""An unpacked kit: its folder, its parsed MANIFEST.json and member checks.

``kit verify``, ``kit rebuild`` and ``kit inspect`` all start here, from either
the ``.tar.zst`` (unpacked safely into a scratch folder) or an unpacked folder.
"""

from __future__ import annotations

import contextlib
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from servekit.errors import first_error
from servekit.kit.errors import KitRefused, KitTooLarge
from servekit.kit.jsonsafe import decode_text, load_json
from servekit.kit.kitarchive import kit_members, unpack_checked
from servekit.kit.models import MAX_LAYERS, MAX_MANIFEST_BYTES, MAX_PAYLOAD_FILES, KitManifest
from servekit.kit.scratch import scratch_dir
from servekit.kit.streams import Limits
from servekit.vocabulary import read_at_most, sha256_file, walk_tree

SUMS = "SHA256SUMS"
MANIFEST = "MANIFEST.json"
_SUM_LINE = re.compile(r"([0-9a-f]{64})  (\S.*)")


@dataclass(frozen=True)
class KitDir:
    """An unpacked kit folder.

    ``archive_sha256`` and ``format_problems`` come from unpacking a
    ``.tar.zst`` (None and empty for a folder given as is).
    """

    root: Path
    archive_sha256: str | None = None
    format_problems: tuple[str, ...] = ()
    limits: Limits = field(default_factory=Limits)

    def read_manifest(self) -> KitManifest:
        """Parse MANIFEST.json strictly (unknown or missing fields refuse the kit).

        Its size is bounded before it is parsed and its lists before they are
        validated (:class:`KitTooLarge`), so a hostile one costs megabytes, not gigabytes.
        """
        what = f"kit {self.root.name}: {MANIFEST}"
        raw = self.read_bytes(MANIFEST, MAX_MANIFEST_BYTES)
        data = load_json(raw, what)
        for key, bound in (("payload", MAX_PAYLOAD_FILES), ("layers", MAX_LAYERS)):
            items = data.get(key) if isinstance(data, dict) else None
            if isinstance(items, list) and len(items) > bound:
                raise KitTooLarge(
                    f"{what}: {len(items)} {key} entries, more than the {bound} a kit may list; "
                    "this is not a kit servekit built"
                )
        try:
            return KitManifest.model_validate(data)
        except ValidationError as exc:
            loc, msg = first_error(exc, "(top)")
            raise KitRefused(
                f"kit {self.root.name}: {MANIFEST} is invalid ({loc}: {msg})"
            ) from None

    def member(self, rel: str) -> Path:
        """A regular file inside the kit (no link, nothing outside), refused when absent."""
        path = self.root / rel
        if ".." in Path(rel).parts or rel.startswith("/") or "\x00" in rel:
            raise KitRefused(f"kit {self.root.name}: member {rel[:80]!r} is not a kit path")
        try:
            st = path.lstat()
            inside = path.resolve().is_relative_to(self.root.resolve())
        except (OSError, RuntimeError, ValueError):
            raise KitRefused(f"kit {self.root.name}: member {rel[:80]!r} is missing") from None
        if not stat.S_ISREG(st.st_mode) or not inside:
            raise KitRefused(
                f"kit {self.root.name}: member {rel[:80]!r} is missing or not a regular file"
            )
        return path

    def read_bytes(self, rel: str, bound: int | None = None) -> bytes:
        """A member's bytes, refused past ``bound`` or ``limits.max_text`` (never read
        whole first); past an explicit ``bound`` the refusal is :class:`KitTooLarge`."""
        path = self.member(rel)
        cap = min(bound, self.limits.max_text) if bound is not None else self.limits.max_text
        error = KitTooLarge if bound is not None else KitRefused
        where = f"kit {self.root.name}"
        return read_at_most(path, cap, where, f"{rel} is larger than {cap} bytes", error=error)

    def text(self, rel: str) -> str:
        """A text member decoded strictly as UTF-8 (a bad byte is refused with its offset)."""
        return decode_text(self.read_bytes(rel), f"kit {self.root.name}: {rel}")

    def _sum_lines(self) -> tuple[dict[str, str], list[str]]:
        listed: dict[str, str] = {}
        problems: list[str] = []
        for number, line in enumerate(self.text(SUMS).split("\n"), 1):
            match = _SUM_LINE.fullmatch(line)
            if match is None:
                if line:
                    problems.append(f"{SUMS} line {number} is not '<sha256>  <member>'")
                continue
            digest, rel = match.groups()
            if rel in listed:
                problems.append(f"{rel}: listed twice")
            listed[rel] = digest
        return listed, problems

    def sum_problems(self, hashed: dict[str, str] | None = None) -> list[str]:
        """Members that SHA256SUMS misses, lists twice, or hashes differently.

        ``hashed`` gives digests already computed elsewhere (a layer scan
        computes each layer file's sha256 as its diffID), so no byte is hashed
        twice. Links and special files (possible in a folder given as a kit)
        are problems, never opened.
        """
        hashed = hashed or {}
        listed, problems = self._sum_lines()
        odd = odd_entries(self.root, self.limits.max_entries)
        problems += [f"{rel}: a link or special file, not a kit member" for rel in odd]
        present = {
            m for m in kit_members(self.root) if not m.endswith("/") and m != SUMS and m not in odd
        }
        problems += [f"{rel}: not listed in {SUMS}" for rel in sorted(present - listed.keys())]
        problems += [f"{rel}: listed but absent" for rel in sorted(listed.keys() - present)]
        for rel in sorted(present & listed.keys()):
            digest = hashed.get(rel) or sha256_file(str(self.root / rel))
            if digest != listed[rel]:
                problems.append(f"{rel}: sha256 differs from {SUMS}")
        return problems


def odd_entries(root: Path, max_entries: int) -> set[str]:
    """Entries of a folder that are neither plain folders nor regular files."""
    odd: set[str] = set()
    count = 0
    for dirpath, dirnames, filenames in walk_tree(root):
        for name in dirnames + filenames:
            count += 1
            if count > max_entries:
                raise KitRefused(f"kit {root.name}: more than {max_entries} entries")
            path = Path(dirpath) / name
            mode = path.lstat().st_mode
            if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
                odd.add(path.relative_to(root).as_posix())
    return odd


@contextlib.contextmanager
def open_kit(path: Path, limits: Limits) -> Iterator[KitDir]:
    """A kit folder for ``path`` (a folder, or a .tar.zst unpacked for the duration)."""
    if path.is_dir():
        if not ((path / MANIFEST).exists() or (path / SUMS).exists()):  # damaged kits count
            raise KitRefused(f"kit {path}: a folder without MANIFEST.json or {SUMS} is not a kit")
        yield KitDir(path, limits=limits)
        return
    if not path.is_file():
        raise KitRefused(f"kit {path}: no such file or folder; give a kit .tar.zst or its folder")
    with scratch_dir() as tmp:
        unpacked = unpack_checked(path, tmp, limits)
        yield KitDir(unpacked.root, unpacked.sha256, tuple(unpacked.problems), limits)
