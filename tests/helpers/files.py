"""Files a reader must refuse without reading them whole."""

from __future__ import annotations

from pathlib import Path

GIB = 1 << 30


def sparse_file(path: Path, size: int = GIB, head: bytes = b"") -> Path:
    """``path``, ``size`` bytes long, ``head`` first and holes after: nothing else is written.

    A bound on a reader is tested on a file as large as a hostile one would be, at
    no disk cost; a reader that loads it whole is what the test catches.
    """
    with path.open("wb") as handle:
        handle.write(head)
        handle.truncate(size)
    return path
