"""servekit's own modules, parsed once per test session for every rule that reads them.

``tests/test_vocabulary_utils.py`` and ``tests/test_wiring_text.py`` each walk every
module of ``src/servekit``; reading and parsing them once (about 2 s) serves both.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "servekit"


@functools.cache
def parsed_modules() -> tuple[tuple[str, ast.AST], ...]:
    """(path relative to src/servekit, its syntax tree) of every module, sorted."""
    return tuple(
        (path.relative_to(SRC).as_posix(), ast.parse(path.read_text()))
        for path in sorted(SRC.rglob("*.py"))
    )
