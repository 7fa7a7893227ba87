"""Evidence files: per-figure point files and the checksums of everything.

Every figure in the report links to a file. Benchmark points are split out of
``bench/bench.json`` into ``bench/points/<workload>-<label>.json`` so a figure
links to exactly the runs it is the median of. ``SHA256SUMS`` lists the sha256
of every file of the run; its own sha256 is the evidence digest the ledger keeps.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from servekit.bench import BenchResult, Point
from servekit.vocabulary import atomic_write_text, sha256_file

SUMS_FILE = "SHA256SUMS"
POINTS_DIR = "bench/points"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True)
class Checksum:
    """One file of the run and its sha256."""

    path: str
    sha256: str
    size: int


def point_file(point: Point) -> str:
    """The relative path of a point's evidence file."""
    name = _UNSAFE.sub("_", f"{point.workload}-{point.label}")
    return f"{POINTS_DIR}/{name}.json"


def write_point_files(run_dir: Path, bench: BenchResult) -> dict[tuple[str, str], str]:
    """Write one file per benchmark point; returns (workload, label) -> relative path."""
    paths: dict[tuple[str, str], str] = {}
    for point in bench.points:
        rel = point_file(point)
        atomic_write_text(run_dir / rel, point.model_dump_json(indent=2) + "\n")
        paths[point.key] = rel
    return paths


def checksums(run_dir: Path, exclude: tuple[str, ...] = (SUMS_FILE,)) -> list[Checksum]:
    """sha256 of every regular file under ``run_dir``, sorted by path."""
    found: list[Checksum] = []
    for path in sorted(run_dir.rglob("*")):
        rel = path.relative_to(run_dir).as_posix()
        if path.is_file() and not path.is_symlink() and rel not in exclude:
            found.append(Checksum(rel, sha256_file(path), path.stat().st_size))
    return found


def write_sums(run_dir: Path) -> str:
    """Write ``SHA256SUMS`` (``sha256  path`` lines) and return its own sha256."""
    lines = [f"{c.sha256}  {c.path}\n" for c in checksums(run_dir)]
    text = "".join(lines)
    atomic_write_text(run_dir / SUMS_FILE, text)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
