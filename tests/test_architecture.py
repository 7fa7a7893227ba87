"""The import structure docs/design.md draws: layers downward only, no circles.

Every ``import`` and ``from ... import`` of servekit's own modules is read from the
source (also those inside functions, which run later but still depend), and each
one must point to a lower layer or stay inside its own package; and no set of
modules may import each other in a circle, counting the imports inside functions
too: a circle closed by an import that runs later still ties the modules together
(accept/options -> registry -> checks -> options, accept/runner <-> selfcheck were
two that only a top-level reading missed).
"""

from __future__ import annotations

import ast
from pathlib import Path

from servekit.lazyface import face_names

SRC = Path(__file__).resolve().parents[1] / "src" / "servekit"

# Rows of docs/design.md, top first; a package may import only rows below it.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("__main__",),
    ("cli",),
    ("commands",),
    ("advise",),
    ("verify", "layouttools"),
    ("report",),
    ("platforms",),
    ("local", "importer", "preflight"),
    ("accept", "render"),
    ("bench", "kit", "sim", "catalog"),
    ("deployment", "fsutil", "cliopts", "proxy", "defaults"),
    (
        "client",
        "guard",
        "kvprotocol",
        "kvschema",
        "kvshim",
        "numbers",
        "progress",
        "termtable",
        "textcontract",
        "visioncontract",
        "userdirs",
        "safeyaml",
        "logscan",
        "procgroup",
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


def _imports(path: Path, text: str | None = None) -> list[tuple[str, bool]]:
    """(imported servekit module, at top level?) for every import in a file."""
    tree = ast.parse(path.read_text() if text is None else text)
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


def _resolved_imports(path: Path, text: str | None = None) -> list[tuple[str, bool]]:
    """Like :func:`_imports`, with a name taken from a lazy face resolved to its submodule.

    A face imports nothing up front, so without this every import through a face
    would hide the edge to the module that really defines the name, and circles
    through faces would go unseen.
    """
    tree = ast.parse(path.read_text() if text is None else text)
    top = {id(n) for n in tree.body}
    found = list(_imports(path, text))
    for node in ast.walk(tree):
        module = node.module or "" if isinstance(node, ast.ImportFrom) else ""
        if isinstance(node, ast.ImportFrom) and node.level == 0 and module.startswith("servekit."):
            table = _face_table(module)
            found += [(table[a.name], id(node) in top) for a in node.names if a.name in table]
    return found


# Circles known and being taken apart elsewhere; each entry says where.
# Circles the house tolerates for now, each with its reason (none today: the
# simulator's endpoint <-> pd/layerwise circle went with the per-protocol handlers).
ALLOWED_CIRCLES: tuple[frozenset[str], ...] = ()


def _graph(
    inside_functions: bool = True, probes: dict[str, str] | None = None
) -> dict[str, set[str]]:
    """Module -> the servekit modules it imports (inside functions too, unless asked not to).

    ``probes`` adds modules given as source text (module name -> text), so a
    positive control can plant a circle without writing into the source tree
    that other tests read at the same time.
    """
    probes = probes or {}
    modules = {_module(p): p for p in SRC.rglob("*.py")}
    modules.update({name: SRC / "_probe.py" for name in probes})
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        for name, at_top in _resolved_imports(path, probes.get(module)):
            if name in modules and (at_top or inside_functions) and name != module:
                graph[module].add(name)
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One circle per strongly tied group the depth-first walk meets (each closed at its start)."""
    allowed = [c for c in ALLOWED_CIRCLES if c <= set(graph)]
    edges = {
        node: {n for n in nexts if not any(node in c and n in c for c in allowed)}
        for node, nexts in graph.items()
    }
    state: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges[node]):
            if state.get(nxt) == 1:
                found.append([*stack[stack.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node)
    return found


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
    circles = _circles(_graph())
    assert not circles, "import circles:\n" + "\n".join(" -> ".join(c) for c in circles)


def test_a_circle_closed_inside_a_function_is_caught() -> None:
    """Positive control: b imports a only inside a function, and the circle is still seen."""
    probes = {
        "servekit.verify._probe_circle_a": "from servekit.verify._probe_circle_b import g\n",
        "servekit.verify._probe_circle_b": (
            "def g() -> None:\n    from servekit.verify._probe_circle_a import g as h\n"
        ),
    }
    assert any(set(c) == set(probes) for c in _circles(_graph(probes=probes)))
    assert not any(
        set(c) == set(probes) for c in _circles(_graph(inside_functions=False, probes=probes))
    )


def _still_there(allowed: frozenset[str], graph: dict[str, set[str]]) -> bool:
    """Each module of an allowed circle still imports another module of it."""
    inside = {m: graph[m] & allowed for m in allowed if m in graph}
    return bool(inside) and all(inside.values())


def test_each_allowed_circle_is_still_there() -> None:
    """An allow-listed circle that is gone must leave the list (it would hide a new one)."""
    graph = _graph()
    for allowed in ALLOWED_CIRCLES:
        assert _still_there(allowed, graph), f"gone, remove it from ALLOWED_CIRCLES: {allowed}"
    # Positive control: the circle this list held until the per-protocol handlers
    # removed it is seen as gone, and a real two-module circle is seen as there.
    gone = frozenset({"servekit.sim.endpoint", "servekit.sim.pd", "servekit.sim.layerwise"})
    assert not _still_there(gone, graph)
    assert _still_there(frozenset({"a", "b"}), {"a": {"b"}, "b": {"a"}})


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
    probe = tmp_path / "_probe_deep_import.py"
    probe.write_text("from servekit.render.plan import build_plan\n")
    assert _deep_imports(probe, "servekit.verify._probe_deep_import") == [
        "servekit.verify._probe_deep_import:1 -> servekit.render.plan"
    ]


def test_faces_resolve_to_the_defining_module() -> None:
    """The circle check sees through faces: a face name maps to the module that defines it."""
    table = _face_table("servekit.render")
    assert table["build_plan"] == "servekit.render.plan"
    graph = _graph()
    assert any(name.startswith("servekit.render.") for name in graph["servekit.report.build"])
