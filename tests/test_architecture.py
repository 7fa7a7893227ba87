"""The import structure docs/design.md draws: layers downward only, no circles.

Every ``import`` and ``from ... import`` of servekit's own modules is read from the
source (also those inside functions, which run later but still depend), and each
one must point to a lower layer or stay inside its own package; and no set of
modules may import each other in a circle (top-level imports).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from servekit.lazyface import face_names

SRC = Path(__file__).resolve().parents[1] / "src" / "servekit"

# Rows of docs/design.md, top first; a package may import only rows below it.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("__main__",),
    ("cli",),
    ("commands",),
    ("verify", "layouttools"),
    ("report", "local", "importer"),
    ("accept", "render"),
    ("bench", "kit", "sim", "catalog"),
    ("deployment", "fsutil", "cliopts", "proxy", "defaults"),
    (
        "client",
        "guard",
        "kvprotocol",
        "kvshim",
        "numbers",
        "progress",
        "termtable",
        "textcontract",
        "visioncontract",
        "userdirs",
        "safeyaml",
        "logscan",
    ),
    ("vocabulary",),
    ("errors", "lazyface", "__init__"),
)
RANK = {name: row for row, names in enumerate(LAYERS) for name in names}


def _module(path: Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def _is_module(name: str) -> bool:
    rel = Path(*name.split(".")[1:])
    return (SRC / rel).with_suffix(".py").is_file() or (SRC / rel / "__init__.py").is_file()


def _from_names(node: ast.ImportFrom) -> list[str]:
    """``from M import a, b``: the submodules it names, and M when it takes a name of M's."""
    assert node.module is not None
    subs = [f"{node.module}.{a.name}" for a in node.names]
    modules = [n for n in subs if _is_module(n)]
    return modules if len(modules) == len(subs) else [node.module, *modules]


def _names_imported(node: ast.AST) -> list[str]:
    """The modules one import statement names (absolute imports only); [] for other nodes."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
        return _from_names(node)
    return []


def _imports(path: Path) -> list[tuple[str, bool]]:
    """(imported servekit module, at top level?) for every import in a file."""
    tree = ast.parse(path.read_text())
    found: list[tuple[str, bool]] = []
    top = {id(n) for n in tree.body}
    for node in ast.walk(tree):
        for name in _names_imported(node):
            if name == "servekit" or name.startswith("servekit."):
                found.append((name, id(node) in top))
    return found


def _face_table(package: str) -> dict[str, str]:
    """A lazy face's ``name -> defining module``, as servekit.lazyface reads it."""
    return (
        face_names(package)
        if (SRC.parent.joinpath(*package.split(".")) / "__init__.py").is_file()
        else {}
    )


def _resolved_imports(path: Path) -> list[tuple[str, bool]]:
    """Like :func:`_imports`, with a name taken from a lazy face resolved to its submodule.

    A face imports nothing up front, so without this every import through a face
    would hide the edge to the module that really defines the name, and circles
    through faces would go unseen.
    """
    tree = ast.parse(path.read_text())
    top = {id(n) for n in tree.body}
    found = list(_imports(path))
    for node in ast.walk(tree):
        module = node.module or "" if isinstance(node, ast.ImportFrom) else ""
        if isinstance(node, ast.ImportFrom) and node.level == 0 and module.startswith("servekit."):
            table = _face_table(module)
            found += [(table[a.name], id(node) in top) for a in node.names if a.name in table]
    return found


def _graph() -> dict[str, set[str]]:
    modules = {_module(p): p for p in SRC.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        for name, at_top in _resolved_imports(path):
            if name in modules and at_top and name != module:
                graph[module].add(name)
    return graph


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_every_package_has_a_layer() -> None:
    packages = {_package(_module(p)) for p in SRC.rglob("*.py")}
    assert packages <= set(RANK), sorted(packages - set(RANK))


def test_imports_point_down_only() -> None:
    upward = []
    for path in SRC.rglob("*.py"):
        here = _package(_module(path))
        for name, _ in _imports(path):
            there = _package(name)
            if there != here and there in RANK and RANK[there] <= RANK[here]:
                if there == "__init__":
                    continue
                upward.append(f"{_module(path)} -> {name}")
    assert not upward, "\n".join(sorted(set(upward)))


def test_no_import_circles() -> None:
    graph = _graph()
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycle = [*stack[stack.index(nxt) :], nxt]
                pytest.fail("import circle: " + " -> ".join(cycle))
            if nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)


def _deep_imports(path: Path, module: str | None = None) -> list[str]:
    """Imports of another package's modules (not its face) in one file."""
    module = module or _module(path)
    here = _package(module)
    deep = []
    for node in ast.walk(ast.parse(path.read_text())):
        for name in _names_imported(node):
            parts = name.split(".")
            is_package = (SRC / parts[1] / "__init__.py").is_file() if len(parts) > 1 else False
            if parts[0] == "servekit" and len(parts) > 2 and is_package and parts[1] != here:
                deep.append(f"{module}:{getattr(node, 'lineno', 0)} -> {name}")
    return deep


def test_code_outside_a_package_imports_its_face() -> None:
    deep = [line for path in sorted(SRC.rglob("*.py")) for line in _deep_imports(path)]
    assert not deep, "import these through the package's face:\n" + "\n".join(deep)


def test_the_face_rule_catches_a_deep_import(tmp_path: Path) -> None:
    """Positive control: a module reaching into another package's module is caught."""
    probe = SRC / "verify" / "_probe_deep_import.py"
    probe.write_text("from servekit.render.plan import build_plan\n")
    try:
        assert _deep_imports(probe) == [
            "servekit.verify._probe_deep_import:1 -> servekit.render.plan"
        ]
    finally:
        probe.unlink()


def test_faces_resolve_to_the_defining_module() -> None:
    """The circle check sees through faces: a face name maps to the module that defines it."""
    table = _face_table("servekit.render")
    assert table["build_plan"] == "servekit.render.plan"
    graph = _graph()
    assert any(name.startswith("servekit.render.") for name in graph["servekit.report.build"])
