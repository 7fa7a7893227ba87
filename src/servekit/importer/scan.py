"""What a folder's scripts say when read, beside what running them shows.

Running a folder (:mod:`servekit.importer.extract`) observes what it starts and
what it writes; some facts need the text too, and each is named by file and line:

- the node count: ``run.sh``'s own check, ``nodes:`` in meta.yaml, the folder
  name's grammar (:func:`detect_nodes`);
- where a host tuning write comes from (:func:`host_tuning`: the first script
  line naming the key), the same value to every fake CPU as one ``/cpu*/`` fact;
- what the facts cannot carry (:func:`double_exports`: a variable exported twice
  in one script).

Every script is read at most :data:`MAX_SCRIPT_BYTES`, never through a link.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from servekit.catalog import MAX_NODES, name_nodes
from servekit.importer.contain import FAKE_CPUS, ImportRefused, Write
from servekit.importer.meta import SourceMeta
from servekit.vocabulary import StrictModel

ENTRY = "run.sh"
MAX_SCRIPT_BYTES = 1024 * 1024
_NNODES_CHECK = re.compile(r"AISHIPBOX_NNODES\"?\s*(?:!=|-ne)\s*\"?(\d+)")
_RANK_RANGE = re.compile(r"\(want 0\.\.(\d+)\)")
_EXPORT = re.compile(r"^\s*export\s+([A-Za-z_][A-Za-z0-9_]*)=")
_CPU = re.compile(r"/cpu(\d+)/")
_BRANCH = re.compile(r"^\s*(else|elif|fi|esac)\b|;;")


class HostTuning(StrictModel):
    """A write to /proc/sys or /sys a node's scripts attempted (recorded, never applied)."""

    node: int
    path: str
    value: str
    file: str | None
    line: int | None


class Unexpressed(StrictModel):
    """Something of the scripts the facts cannot carry, named by file and line."""

    file: str
    line: int
    what: str


def _read_script(path: Path) -> list[str]:
    try:
        with path.open("rb") as fh:
            data = fh.read(MAX_SCRIPT_BYTES)
    except OSError:
        return []
    return data.decode(errors="replace").splitlines()


def _scripts(folder: Path) -> list[Path]:
    return sorted(p for p in folder.glob("*.sh") if p.is_file() and not p.is_symlink())


def _code_lines(path: Path) -> Iterable[tuple[int, str]]:
    for number, line in enumerate(_read_script(path), start=1):
        if not line.lstrip().startswith("#"):
            yield number, line


def detect_nodes(
    folder: Path, meta: SourceMeta, given: int | None = None, entry: str = ENTRY
) -> tuple[int, str]:
    """(node count, which source said it), or a refusal naming ``--nodes`` when none does."""
    stated = stated_nodes(folder, meta, given, entry)
    if stated is None:
        raise ImportRefused(
            f"{folder}: cannot tell its node count (no check in {entry}, no nodes: in "
            "meta.yaml, a name outside the grammar); give --nodes N"
        )
    return stated


def stated_nodes(
    folder: Path, meta: SourceMeta, given: int | None = None, entry: str = ENTRY
) -> tuple[int, str] | None:
    """(node count, which source said it), None when nothing says one; every source that
    says one must agree.

    Order: the entry's node-count check (``AISHIPBOX_NNODES != N`` or its rank
    dispatch ``(want 0..N-1)``: what the platform run enforces) wins, then
    ``nodes:`` in meta.yaml, then the folder name's grammar, then ``given``.
    """
    said: list[tuple[int, str]] = []
    for number, line in _code_lines(folder / entry):
        if match := _NNODES_CHECK.search(line):
            said.append((int(match.group(1)), f"{entry}:{number} (node-count check)"))
        elif match := _RANK_RANGE.search(line):
            said.append((int(match.group(1)) + 1, f"{entry}:{number} (rank dispatch 0..N-1)"))
    if meta.nodes is not None:
        said.append((meta.nodes, f"{meta.file} (nodes)"))
    if (by_name := name_nodes(folder.name)) is not None:
        said.append((by_name, f"folder name {folder.name!r} (naming grammar)"))
    if given is not None:
        said.append((given, "--nodes"))
    if not said:
        return None
    counts = {n for n, _ in said}
    if len(counts) > 1:
        listed = ", ".join(f"{where} says {n}" for n, where in said)
        raise ImportRefused(f"{folder}: node counts disagree ({listed}); fix the folder or --nodes")
    count, where = said[0]
    if not 1 <= count <= MAX_NODES:
        raise ImportRefused(f"{folder}: {where} says {count} nodes; want 1..{MAX_NODES}")
    return count, where


def double_exports(folder: Path) -> list[Unexpressed]:
    """A variable exported twice in one script: the process gets (and facts hold) the last."""
    found = []
    for script in _scripts(folder):
        seen: dict[str, int] = {}
        for number, line in _code_lines(script):
            if _BRANCH.search(line):
                seen.clear()  # an export in another branch of an if/case is not a second one
                continue
            match = _EXPORT.match(line)
            if not match:
                continue
            name = match.group(1)
            if name in seen:
                found.append(
                    Unexpressed(
                        file=script.name,
                        line=number,
                        what=(
                            f"{name} exported twice (lines {seen[name]} and {number}); the "
                            "facts hold the value the process got, built from both"
                        ),
                    )
                )
            else:
                seen[name] = number
    return found


def _needles(path: str) -> list[str]:
    if path.startswith("/proc/sys/"):
        key = path.removeprefix("/proc/sys/")
        return [key.replace("/", "."), key]
    tail = "/".join(_CPU.sub("/cpu*/", path).split("/")[-2:])
    return [tail, path.rsplit("/", 1)[-1]]


_TOKEN = re.compile(r"[A-Za-z0-9_.*/-]+")
_SEPARATOR = re.compile(r"[./]")
MAX_TOKEN_CHARS = 512
MAX_TOKEN_PARTS = 12


def _pieces(token: str) -> Iterable[str]:
    """Every run of whole parts of a path-like token (``a/b.c`` -> a, a/b, a/b.c, b, ...).

    A needle matches where it starts and ends at a separator (``/`` or ``.``) or the
    token's ends: ``vm/swappiness`` in ``/proc/sys/vm/swappiness``, not ``vm/key1`` in
    ``vm/key10``. Bounded per token, so the index costs a constant per byte of text.
    """
    token = token[:MAX_TOKEN_CHARS]
    starts = [0] + [m.end() for m in _SEPARATOR.finditer(token)]
    ends = [m.start() for m in _SEPARATOR.finditer(token)] + [len(token)]
    for i, start in enumerate(starts):
        for end in ends[i : i + MAX_TOKEN_PARTS]:
            if end > start:
                yield token[start:end]


def _index(folder: Path) -> dict[str, tuple[str, int]]:
    """Every path-like piece of the scripts' code lines -> its first (file, line).

    Built once per import: each script is read once, however many writes there are
    (a lookup per write re-read every script: 500 writes took 26 s, 2,000 150 s).
    """
    first: dict[str, tuple[str, int]] = {}
    for script in _scripts(folder):
        for number, line in _code_lines(script):
            for token in _TOKEN.findall(line):
                if "/" in token or "." in token:
                    for piece in _pieces(token):
                        first.setdefault(piece, (script.name, number))
                else:
                    first.setdefault(token, (script.name, number))
    return first


def _where(index: dict[str, tuple[str, int]], path: str) -> tuple[str | None, int | None]:
    """The script file and line that names a written path (first match)."""
    for needle in _needles(path):
        if needle in index:
            return index[needle]
    return None, None


def _collapse_cpus(found: list[Write]) -> list[Write]:
    """The same value written to every fake CPU is one write at ``/cpu*/``."""
    groups: dict[tuple[int, str, str], set[int]] = {}
    for w in found:
        if match := _CPU.search(w.path):
            key = (w.node, _CPU.sub("/cpu*/", w.path), w.value)
            groups.setdefault(key, set()).add(int(match.group(1)))
    out: list[Write] = []
    for w in found:
        if _CPU.search(w.path):
            key = (w.node, _CPU.sub("/cpu*/", w.path), w.value)
            if groups.get(key) == set(range(FAKE_CPUS)):
                out.append(Write(w.node, key[1], w.value))
                groups[key] = set()  # emitted once
                continue
            if not groups.get(key):
                continue
        out.append(w)
    return out


def host_tuning(folder: Path, found: list[Write]) -> list[HostTuning]:
    tuning = []
    index = _index(folder) if found else {}
    for w in _collapse_cpus(found):
        file, line = _where(index, w.path)
        tuning.append(HostTuning(node=w.node, path=w.path, value=w.value, file=file, line=line))
    return sorted(tuning, key=lambda t: (t.node, t.path))
