"""The kit package's shape: no import circles inside it, and one sorted public face."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.helpers.api import isort_order

import servekit.kit

PACKAGE = Path(servekit.kit.__file__).parent


def kit_imports(path: Path) -> set[str]:
    """Every ``servekit.kit.X`` module a file imports, at the top or inside a function."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        out |= {n for n in names if n.startswith("servekit.kit.") and module_path(n).exists()}
    return out


def module_path(name: str) -> Path:
    return PACKAGE / (name.removeprefix("servekit.kit.").replace(".", "/") + ".py")


def graph() -> dict[str, set[str]]:
    return {
        f"servekit.kit.{p.stem}": kit_imports(p)
        for p in PACKAGE.glob("*.py")
        if p.stem != "__init__"
    }


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import circle as a list of modules, or None (depth-first, colours)."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)) is not None:
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state and (found := visit(node)) is not None:
            return found
    return None


def test_the_cycle_finder_finds_a_circle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_circles_inside_the_kit_package() -> None:
    edges = graph()
    assert "servekit.kit.oci" in edges["servekit.kit.image"]  # the graph sees lazy imports too
    assert find_cycle(edges) is None, find_cycle(edges)


def test_public_face_is_sorted_and_importable() -> None:
    names = servekit.kit.__all__
    assert names == isort_order(names)
    assert all(getattr(servekit.kit, name, None) is not None for name in names)


def test_public_face_names_what_the_cli_and_the_lead_use() -> None:
    wanted = {
        "CheckReport",
        "KitBuildOptions",
        "KitExpect",
        "KitRebuildOptions",
        "KitReleaseTable",
        "KitVerifyOptions",
        "build_kit",
        "inspect_image",
        "inspect_kit",
        "kit_release_table",
        "read_image",
        "rebuild_kit",
        "render_release_table",
        "verify_kit",
        "verify_release",
    }
    assert wanted <= set(servekit.kit.__all__)
