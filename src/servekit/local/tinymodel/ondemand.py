"""The tiny model built on first use, for CPU layouts that serve it, and where it may go.

A CPU layout whose model path is a relative folder named ``tiny`` (the catalog's
``.servekit/models/tiny``) serves servekit's tiny Llama. When that folder is
missing (or empty), ``servekit up`` builds it there instead of failing: the
build is offline, seeded and quick, and gives the same bytes everywhere. A
folder that exists and holds anything is never touched (the model-folder check
then says what is wrong with it).

:func:`check_out` guards ``servekit model tiny --out DIR``: the build replaces
DIR whole, so DIR must be new, empty, or an earlier tiny-model build (it holds
``servekit-tiny.json``); a file, a link, a folder of someone else's files, the
current folder or one above it is refused in one line.
"""

from __future__ import annotations

import time
from pathlib import Path

from servekit.catalog import Layout
from servekit.errors import UsageError

TINY_NAME = "tiny"
MARKER = "servekit-tiny.json"
"""Written into every build (the spec that produced it): a folder holding it is ours."""


def check_out(out: Path) -> Path:
    """The folder ``model tiny --out`` may replace, or a one-line UsageError saying why not."""
    if not str(out).strip():
        raise UsageError("--out is empty; give the folder to write, e.g. .servekit/models/tiny")
    where = out.expanduser().absolute()
    here = Path.cwd().absolute()
    if where == Path(where.anchor) or where == here or here.is_relative_to(where):
        raise UsageError(
            f"--out {out}: the build replaces that folder whole, and it holds the current "
            "folder; give a new folder, e.g. .servekit/models/tiny"
        )
    if where.is_symlink() or (where.exists() and not where.is_dir()):
        raise UsageError(f"--out {out}: exists and is not a folder; give a new or empty folder")
    if where.is_dir() and any(where.iterdir()) and not (where / MARKER).is_file():
        raise UsageError(
            f"--out {out}: folder holds files that are not a tiny-model build "
            f"(no {MARKER}); give a new or empty folder"
        )
    return where


def serves_tiny_model(layout: Layout) -> bool:
    """True when ``layout`` is a CPU layout whose model is the tiny model's folder."""
    path = Path(layout.model.path)
    return (
        layout.hardware.accelerator == "cpu" and not path.is_absolute() and path.name == TINY_NAME
    )


def ensure_tiny_model(layout: Layout, cwd: Path) -> str | None:
    """Build the tiny model under ``cwd`` when ``layout`` needs it and it is absent.

    Returns the line to show when it was built, None when nothing was done.
    """
    if not serves_tiny_model(layout):
        return None
    folder = cwd / layout.model.path
    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        return None
    if folder.is_dir() and any(folder.iterdir()):
        return None
    from servekit.local.tinymodel.build import build_tiny_model

    started = time.monotonic()
    build_tiny_model(folder)
    took = time.monotonic() - started
    return (
        f"note: built the tiny model at {layout.model.path} for {layout.name} "
        f"(servekit model tiny; offline and deterministic, {took:.1f} s)"
    )
