"""Package faces that re-export their public names without importing them up front.

``from servekit.bench import run_bench`` should work (the public API lives on the
package, as httpx does it), yet ``servekit --help`` must not pay for aiohttp and
numpy because the CLI imported ``servekit.bench.options`` to build a command.
A face declares ``name -> submodule`` and gets a PEP 562 ``__getattr__`` that
imports the submodule on first use; type checkers read the real imports under
``TYPE_CHECKING``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_face(
    package: str, names: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for a package exporting ``names`` (name -> submodule)."""

    def getattr_(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{module}"), name)

    def dir_() -> list[str]:
        return sorted(names)

    return getattr_, dir_
