"""Package faces that re-export their public names without importing them up front.

``from servekit.bench import run_bench`` should work (the public API lives on the
package, as httpx does it), yet ``servekit --help`` must not pay for aiohttp and
numpy because the CLI imported ``servekit.bench.options`` to build a command.

A face lists each name once, as the explicit re-export a type checker reads
(PEP 484's ``name as name``)::

    if TYPE_CHECKING:
        from servekit.bench.runner import run_bench as run_bench

    __getattr__, __dir__ = lazy_face(__name__)

and :func:`lazy_face` gives it a PEP 562 ``__getattr__`` that reads those
``TYPE_CHECKING`` imports from the package's own source (once, on first use)
and imports the submodule a name comes from when the name is first asked for;
``__all__`` is answered from the same table. So the name -> module table cannot
disagree with what mypy checks, and no name is written a second time. Standard
library only: the proxy's zipapp carries it, and the source is read through the
module's loader, which a zip archive has too.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
from collections.abc import Callable
from functools import cache
from typing import Any


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


@cache
def face_names(package: str) -> dict[str, str]:
    """Name -> submodule (dotted, absolute) for what ``package``'s face imports under TYPE_CHECKING."""
    spec = importlib.util.find_spec(package)
    loader = spec.loader if spec is not None else None
    get_source = getattr(loader, "get_source", None)
    source = get_source(package) if get_source is not None else None
    if source is None:
        raise ImportError(f"{package}: the face's source cannot be read, so its names are unknown")
    names: dict[str, str] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for imp in node.body:
                if not isinstance(imp, ast.ImportFrom) or imp.level != 0:
                    continue
                module = imp.module or ""
                if module.startswith(f"{package}."):
                    names.update({a.asname or a.name: module for a in imp.names})
    return names


def lazy_face(package: str) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for a package whose face imports its names under TYPE_CHECKING."""

    def getattr_(name: str) -> Any:
        if name == "__all__":  # ruff's order (RUF022): CONSTANTS, then Classes, then functions
            return sorted(
                face_names(package), key=lambda n: (not n.isupper(), not n[:1].isupper(), n)
            )
        module = face_names(package).get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module), name)

    def dir_() -> list[str]:
        return sorted(face_names(package))

    return getattr_, dir_
