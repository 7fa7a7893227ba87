"""Size of src/ at git revisions: modules, lines, code, docstring lines, functions.

Issue 25 asked that src shrink while concepts are folded into one place; this is
the count its notes quote, so anyone can recount it::

    python scripts/src_counts.py 0529c5e HEAD

Lines are every line of the .py files; docstring lines are those of module,
class and function docstrings; code is what is left once blank and comment-only
lines are taken out too. Templates (.j2) and shell files are counted apart.
"""

from __future__ import annotations

import ast
import subprocess
import sys


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], capture_output=True, text=True, check=True).stdout


def _docstring_lines(tree: ast.AST) -> set[int]:
    lines: set[int] = set()
    kinds = (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    for node in ast.walk(tree):
        if not isinstance(node, kinds) or not node.body:
            continue
        first = node.body[0]
        value = first.value if isinstance(first, ast.Expr) else None
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            lines.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    return lines


def counts(rev: str) -> dict[str, int]:
    """The figures of src/ at ``rev``."""
    names = _git("ls-tree", "-r", "--name-only", rev, "src").split()
    found = dict.fromkeys(("modules", "lines", "code", "docstrings", "functions", "other"), 0)
    for name in names:
        text = _git("show", f"{rev}:{name}")
        if not name.endswith(".py"):
            found["other"] += len(text.splitlines()) if name.endswith((".j2", ".sh")) else 0
            continue
        tree = ast.parse(text)
        doc = _docstring_lines(tree)
        found["modules"] += 1
        found["lines"] += len(text.splitlines())
        found["docstrings"] += len(doc)
        found["functions"] += sum(
            isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) for n in ast.walk(tree)
        )
        found["code"] += sum(
            1
            for i, line in enumerate(text.splitlines(), 1)
            if i not in doc and line.strip() and not line.strip().startswith("#")
        )
    return found


def main(revs: list[str]) -> None:
    for i, rev in enumerate(revs or ["HEAD"]):
        row = counts(rev)
        if i == 0:
            print(f"{'rev':10} " + " ".join(f"{k:>10}" for k in row))
        print(f"{rev:10} " + " ".join(f"{v:>10}" for v in row.values()))


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except subprocess.CalledProcessError as exc:
        print(f"error: git {' '.join(exc.cmd[1:])!s:.200}: not a revision here", file=sys.stderr)
        sys.exit(2)
