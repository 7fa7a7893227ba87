"""The proxy as one self-contained zipapp, for engine images that have only aiohttp.

A vLLM image already has aiohttp (and its dependencies) but not servekit, nor
pydantic of a known version. :func:`build_zipapp` packs the proxy package, the
servekit modules it imports (:data:`SHARED`: ``errors``, ``guard``, the vocabulary
words it uses and the ``__init__`` files on the way; all standard library) and
prometheus_client (pure Python, copied from the installed
distribution with its LICENSE and NOTICE), plus a ``__main__.py``, so that::

    python3 servekit-proxy.pyz --prefill URL --decode URL --port 8000

runs the same proxy as ``python -m servekit.proxy``. The archive is written
with fixed timestamps and permissions in sorted order: the same sources give
the same bytes.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import io
import zipfile
from collections.abc import Iterator
from pathlib import Path

from servekit.vocabulary import atomic_write_bytes

SHEBANG = b"#!/usr/bin/env python3\n"
MAIN = b'"""The servekit proxy, zipped."""\n\nimport sys\n\nfrom servekit.proxy.server import main\n\nsys.exit(main())\n'
FIXED_TIME = (1980, 1, 1, 0, 0, 0)
VENDORED = "prometheus_client"
LEFT_OUT = ("bundle.py",)  # builds the archive; not needed to run it
# The servekit modules outside the proxy package that it imports (all standard
# library), so the proxy uses the vocabulary's words instead of copies of them;
# tests/proxy/test_bundle.py checks this list against the proxy's imports.
SHARED = (
    "__init__.py",
    "errors.py",
    "guard.py",
    "kvprotocol.py",
    "kvschema.py",
    "lazyface.py",
    "vocabulary/__init__.py",
    "vocabulary/cliargs.py",
    "vocabulary/metrics.py",
    "vocabulary/modes.py",
    "vocabulary/reading.py",
    "vocabulary/roles.py",
    "vocabulary/urls.py",
)


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"{name} is not installed; the zipapp needs it")
    return Path(next(iter(spec.submodule_search_locations)))


def _tree(root: Path, prefix: str) -> Iterator[tuple[str, bytes]]:
    for path in sorted(root.rglob("*.py")):
        if "__pycache__" not in path.parts and path.name not in LEFT_OUT:
            yield f"{prefix}/{path.relative_to(root).as_posix()}", path.read_bytes()


def _licenses(dist: str) -> Iterator[tuple[str, bytes]]:
    for f in importlib.metadata.files(dist) or ():
        if f.name in ("LICENSE", "NOTICE"):
            yield f"{VENDORED}/{f.name}", Path(str(f.locate())).read_bytes()


def members() -> dict[str, bytes]:
    """Archive name -> bytes of everything the zipapp holds."""
    servekit = _package_dir("servekit")
    found = dict(_tree(servekit / "proxy", "servekit/proxy"))
    for name in SHARED:
        found[f"servekit/{name}"] = (servekit / name).read_bytes()
    found.update(_tree(_package_dir(VENDORED), VENDORED))
    found.update(_licenses(VENDORED))
    found["__main__.py"] = MAIN
    return found


def zipapp_bytes() -> bytes:
    """The zipapp's bytes: a shebang, then the members in sorted order with fixed times."""
    buffer = io.BytesIO()
    buffer.write(SHEBANG)
    with zipfile.ZipFile(buffer, "w") as zf:
        for name, data in sorted(members().items()):
            info = zipfile.ZipInfo(name, FIXED_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, data)
    return buffer.getvalue()


def build_zipapp(out: Path) -> Path:
    """Write the proxy zipapp to ``out`` (temp file + rename); returns ``out``."""
    atomic_write_bytes(out, zipapp_bytes(), mode=0o755)
    return out
