"""servekit's own files that travel with a rendering: the decode guard, the KV shim, the proxy.

The engine image must not need servekit installed: the guard is one
standard-library module loaded with ``--middleware`` through PYTHONPATH; the CPU
shim of vLLM's NIXL and Mooncake connectors is one module loaded by
``kv_connector_module_path`` (:mod:`servekit.kvshim`); the proxy is a zipapp that
needs only aiohttp (which every vLLM image has). All are written beside the
scripts (and into a local run's bundle folder), byte for byte the same as
servekit's own code. The ModelArts entry also ships the rank-table reader it runs
(:mod:`servekit.platforms.modelarts.ranktable`), which only that entry needs.
"""

from __future__ import annotations

from pathlib import Path

from servekit.defaults import GUARD_MODULE
from servekit.vocabulary import atomic_write_bytes

GUARD_FILE = f"{GUARD_MODULE}.py"
PROXY_FILE = "servekit-proxy.pyz"
KV_SHIM_FILE = "servekit_kv_cpu.py"


def bundle_files() -> dict[str, bytes]:
    """File name -> bytes of every bundled file (the guard is servekit's own guard.py)."""
    from servekit import kvshim
    from servekit.guard import source_bytes
    from servekit.proxy import zipapp_bytes

    return {
        GUARD_FILE: source_bytes(),
        KV_SHIM_FILE: kvshim.source_bytes(),
        PROXY_FILE: zipapp_bytes(),
    }


def write_bundle(folder: Path) -> list[Path]:
    """Write the bundled files into ``folder`` (a local run's bundle folder)."""
    written = []
    for name, data in bundle_files().items():
        path = folder / name
        atomic_write_bytes(path, data, mode=0o755 if name.endswith(".pyz") else 0o644)
        written.append(path)
    return written
