"""Environment-variable defaults in shipped Python code, found by parsing, never by running.

A gate such as ``os.environ.get("V41_CED_GRAPH_GATE", "1")`` in ``model.py``
must fall back to the same value the launch scripts default to (seed v3 item
5: "both places must change together"). :func:`python_defaults` parses the
source with :mod:`ast` and returns every literal default given to
``environ.get``, ``getenv`` or ``environ.setdefault`` for a variable name.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

_READERS = frozenset(("get", "getenv", "setdefault"))


@dataclass(frozen=True)
class PyDefault:
    """One ``getenv(NAME, default)``-style call with a literal default."""

    line: int
    value: str


def _callee(node: ast.Call) -> str | None:
    func = node.func
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else None


def _default_arg(node: ast.Call) -> ast.expr | None:
    if len(node.args) >= 2:
        return node.args[1]
    return next((k.value for k in node.keywords if k.arg in ("default", "value")), None)


def _literal(node: ast.expr | None) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str | int | float | bool):
        return str(node.value)
    return None


def python_defaults(source: bytes, name: str) -> list[PyDefault] | None:
    """Literal defaults the code gives variable ``name``; None when the file does not parse."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    out: list[PyDefault] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or _callee(node) not in _READERS or not node.args:
            continue
        first = node.args[0]
        if isinstance(first, ast.Constant) and first.value == name:
            value = _literal(_default_arg(node))
            out.append(PyDefault(node.lineno, value if value is not None else "(not a literal)"))
    return out
