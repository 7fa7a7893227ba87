"""The tiny model built on first use, for CPU layouts that serve it.

A CPU layout whose model path is a relative folder named ``tiny`` (the catalog's
``.servekit/models/tiny``) serves servekit's tiny Llama. When that folder is
missing (or empty), ``servekit up`` builds it there instead of failing: the
build is offline, seeded and quick, and gives the same bytes everywhere. A
folder that exists and holds anything is never touched (the model-folder check
then says what is wrong with it).
"""

from __future__ import annotations

import time
from pathlib import Path

from servekit.catalog.schema import Layout

TINY_NAME = "tiny"


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
    if folder.is_symlink() or folder.is_file():
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
