"""The proxy as one self-contained zipapp, for engine images that have only aiohttp.

A vLLM image already has aiohttp (and its dependencies) but not servekit, nor
pydantic of a known version. :func:`build_zipapp` packs the proxy package, the
servekit modules it imports (``errors``, ``guard``, the vocabulary words it uses
and the packages' ``__init__`` files, found by reading the proxy's imports; all
standard library) and prometheus_client (pure Python, copied from the installed
distribution with its LICENSE and NOTICE), plus a ``__main__.py``, so that::

    python3 servekit-proxy.pyz --prefill URL --decode URL --port 8000

runs the same proxy as ``python -m servekit.proxy``. The archive is written
with fixed timestamps and permissions in sorted order: the same sources give
the same bytes.
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import io
import zipfile
from collections.abc import Iterator
from pathlib import Path

from servekit.vocabulary.atomic import atomic_write_bytes

SHEBANG = b"#!/usr/bin/env python3\n"
MAIN = b'"""The servekit proxy, zipped."""\n\nimport sys\n\nfrom servekit.proxy.server import main\n\nsys.exit(main())\n'
FIXED_TIME = (1980, 1, 1, 0, 0, 0)
VENDORED = "prometheus_client"
LEFT_OUT = ("bundle.py",)  # builds the archive; not needed to run it


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


def _runtime_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """``ast.walk`` that skips ``if TYPE_CHECKING:`` blocks (imports only type checkers run)."""
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        if isinstance(node, ast.If) and ast.unparse(node.test) in (
            "TYPE_CHECKING",
            "typing.TYPE_CHECKING",
        ):
            todo.extend(node.orelse)
            continue
        todo.extend(ast.iter_child_nodes(node))


def _imported(source: bytes) -> Iterator[str]:
    """The servekit modules a source file imports at run time, as dotted names."""
    for node in _runtime_nodes(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        yield from (n for n in names if n.startswith("servekit."))


def _dependencies(servekit: Path, found: dict[str, bytes]) -> dict[str, bytes]:
    """Every servekit file outside the proxy that ``found`` imports, transitively.

    The proxy's copies of shared words (the URL check, say) would drift from the
    vocabulary; bundling what it imports keeps one definition. A name imported from
    a module (``from servekit.vocabulary.urls import check_url``) is not a file and
    is skipped; each package on the way brings its ``__init__.py``.
    """
    extra: dict[str, bytes] = {"servekit/__init__.py": (servekit / "__init__.py").read_bytes()}
    todo = list(found.values())
    while todo:
        for module in _imported(todo.pop()):
            parts = module.split(".")[1:]
            for depth in range(1, len(parts) + 1):
                rel = "/".join(parts[:depth])
                for name in (f"{rel}.py", f"{rel}/__init__.py"):
                    key = f"servekit/{name}"
                    path = servekit / name
                    if key not in found and key not in extra and path.is_file():
                        extra[key] = path.read_bytes()
                        todo.append(extra[key])
    return extra


def members() -> dict[str, bytes]:
    """Archive name -> bytes of everything the zipapp holds."""
    servekit = _package_dir("servekit")
    found = dict(_tree(servekit / "proxy", "servekit/proxy"))
    found.update(_dependencies(servekit, found))
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
