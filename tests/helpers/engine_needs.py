"""Which tests need the engine installed, read from the source (no import, no run).

``make unit`` runs on a fresh clone after ``scripts/bootstrap.sh`` without
``engine``: no vLLM, torch, transformers nor tokenizers. A test that needs one of
them must carry the ``vllm`` marker, or the inner loop fails for every newcomer.
This module finds such tests with :mod:`ast`: a test needs the engine when it, a
helper or fixture of its module it calls, or the module itself

- imports an engine package (``import torch``, ``from vllm import ...``),
- asks for one (``importlib.util.find_spec("vllm")``, ``pytest.importorskip("torch")``),
- or calls a servekit function that does either (followed through servekit's own
  imports and lazy faces: ``build_tiny_model`` trains a tokenizer with ``tokenizers``).

What it cannot see: a test that only runs a servekit command needing the engine in
a subprocess or through the CLI by name; the fresh-venv run in docs/local.md covers
those.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

ENGINE_PACKAGES = frozenset({"vllm", "torch", "transformers", "tokenizers", "nixl", "mooncake"})
"""Import names of what ``scripts/bootstrap.sh engine`` (the ``local`` extra) installs."""
MARKER = "vllm"
PROBES = frozenset({"find_spec", "import_module", "__import__"})
GUARD = "importorskip"


def _called(node: ast.AST) -> str:
    """The name a call calls (``pytest.importorskip(...)`` -> ``importorskip``), or ``""``."""
    if not isinstance(node, ast.Call):
        return ""
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def _engine_name(node: ast.AST, calls: frozenset[str]) -> str | None:
    """The engine package a call of one of ``calls`` names as its first argument, if any."""
    if not (_called(node) in calls and isinstance(node, ast.Call) and node.args):
        return None
    first = node.args[0]
    text = first.value if isinstance(first, ast.Constant) else None
    return text if isinstance(text, str) and text.split(".")[0] in ENGINE_PACKAGES else None


def _guard(node: ast.AST) -> bool:
    """A skip when the engine is absent: ``importorskip("vllm")``, ``skipif(find_spec(...)...)``."""
    for sub in ast.walk(node):
        if _engine_name(sub, frozenset({GUARD})) is not None:
            return True
        if _called(sub) == "skipif" and any(_engine_name(x, PROBES) for x in ast.walk(sub)):
            return True
    return False


def _engine_import(node: ast.AST) -> str | None:
    """The engine package an import or a probe names, if any."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            if alias.name.split(".")[0] in ENGINE_PACKAGES:
                return alias.name
    if (
        isinstance(node, ast.ImportFrom)
        and node.level == 0
        and node.module
        and node.module.split(".")[0] in ENGINE_PACKAGES
    ):
        return node.module
    return _engine_name(node, PROBES)


@dataclass
class Module:
    """One source file: what each function uses, and the names it imports from elsewhere."""

    name: str
    path: Path
    tree: ast.Module
    functions: dict[str, ast.AST] = field(default_factory=dict)
    imported: dict[str, tuple[str, str]] = field(default_factory=dict)
    refs: dict[str, frozenset[str]] = field(default_factory=dict)  # names each function uses
    direct: set[str] = field(default_factory=set)  # functions importing an engine package
    top_direct: bool = False  # the module itself imports one (outside TYPE_CHECKING, guards)
    own: set[str] = field(default_factory=set)  # every function needing the engine


def _functions(tree: ast.Module) -> Iterator[tuple[str, ast.AST]]:
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node.name, node
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                    yield f"{node.name}.{item.name}", item
                    yield item.name, item


def _package_of(module: str, path: Path) -> str:
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def _scan(node: ast.AST, mod: Module, package: str) -> tuple[set[str], bool]:
    """One walk: the names ``node`` uses and whether it imports an engine package; its
    ``from X import Y`` go into ``mod.imported``."""
    refs: set[str] = set()
    direct = False
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            refs.add(sub.id)
        elif isinstance(sub, ast.Attribute):
            refs.add(sub.attr)
            if isinstance(sub.value, ast.Name):
                refs.add(f"{sub.value.id}.{sub.attr}")  # module.function
        elif isinstance(sub, ast.arg):
            refs.add(sub.arg)  # a fixture asked for by a test's parameter
        elif isinstance(sub, ast.ImportFrom):
            base = sub.module or ""
            if sub.level:
                parts = package.split(".")
                anchor = ".".join(parts[: len(parts) - sub.level + 1])
                base = f"{anchor}.{base}".strip(".")
            for alias in sub.names:
                mod.imported[alias.asname or alias.name] = (base, alias.name)
        if not direct and isinstance(sub, ast.Import | ast.ImportFrom | ast.Call):
            direct = _engine_import(sub) is not None
    return refs, direct


def parse(name: str, path: Path) -> Module:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    mod = Module(name, path, tree, dict(_functions(tree)))
    package = _package_of(name, path)
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        _refs, direct = _scan(node, mod, package)
        if direct and not (_type_checking(node) or _guard(node)):
            mod.top_direct = True
    scanned: dict[int, tuple[set[str], bool]] = {}
    for fn_name, fn in mod.functions.items():
        if id(fn) not in scanned:
            scanned[id(fn)] = _scan(fn, mod, package)
        refs, direct = scanned[id(fn)]
        mod.refs[fn_name] = frozenset(refs)
        if direct:
            mod.direct.add(fn_name)
    return mod


class EngineNeeds:
    """The functions (and modules) that need the engine, followed to a fixpoint."""

    def __init__(self, modules: Iterable[Module]) -> None:
        self.modules: dict[str, Module] = {}
        self.whole: set[str] = set()  # modules importing an engine package at top level
        for m in modules:
            self._take(m)
        self._settle()

    def _take(self, m: Module) -> None:
        self.modules[m.name] = m
        if m.top_direct:
            self.whole.add(m.name)
        m.own = set(m.direct)

    def add(self, m: Module) -> None:
        """Take one more module (a test file) and follow its calls (nothing calls it)."""
        self._take(m)
        self._settle([m])

    def needs(self, module: str, name: str, seen: frozenset[tuple[str, str]] = frozenset()) -> bool:
        """Whether ``module.name`` (a function, or a name it re-exports) needs the engine."""
        if (module, name) in seen:
            return False
        if module in self.whole or f"{module}.{name}" in self.whole:
            return True
        m = self.modules.get(module)
        if m is None:
            return False
        if name in m.own:
            return True
        if name in m.functions or name not in m.imported:
            return False
        return self.needs(*m.imported[name], seen | {(module, name)})

    def _calls_engine(self, m: Module, name: str) -> bool:
        for ref in m.refs[name]:
            base, _, attr = ref.partition(".")
            if attr and base in m.imported:
                if self.needs(".".join(m.imported[base]), attr):
                    return True
            elif ref in m.own or (ref in m.imported and self.needs(*m.imported[ref])):
                return True
        return False

    def _settle(self, modules: Iterable[Module] | None = None) -> None:
        todo = list(self.modules.values() if modules is None else modules)
        changed = True
        while changed:
            changed = False
            for m in todo:
                for name in m.functions:
                    if name not in m.own and self._calls_engine(m, name):
                        m.own.add(name)
                        changed = True


def _type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def _marked(decorators: Iterable[ast.expr]) -> bool:
    return any(ast.unparse(d).split("(")[0].endswith(f"mark.{MARKER}") for d in decorators)


def _module_marked(tree: ast.Module) -> bool:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets
        ):
            value = node.value
            items = value.elts if isinstance(value, ast.List | ast.Tuple) else [value]
            if _marked(items):
                return True
    return False


def source_modules(root: Path, package: str = "servekit") -> list[Module]:
    """Every module of ``root/package`` (``src``), parsed."""
    out = []
    for path in sorted((root / package).rglob("*.py")):
        rel = path.relative_to(root).with_suffix("")
        parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
        out.append(parse(".".join(parts), path))
    return out


def _tests(tree: ast.Module) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef, bool]]:
    """(name, function, marked) of every test function of a module, in classes too."""
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith(
            "test"
        ):
            yield node.name, node, _marked(node.decorator_list)
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            for item in node.body:
                if isinstance(
                    item, ast.FunctionDef | ast.AsyncFunctionDef
                ) and item.name.startswith("test"):
                    marked = _marked(node.decorator_list) or _marked(item.decorator_list)
                    yield f"{node.name}::{item.name}", item, marked


def _guards(tree: ast.Module) -> set[str]:
    """Module-level names bound to a skip when the engine is absent (``needs_tokenizers``)."""
    return {
        t.id
        for node in tree.body
        if isinstance(node, ast.Assign) and _guard(node.value)
        for t in node.targets
        if isinstance(t, ast.Name)
    }


def _skips(fn: ast.FunctionDef | ast.AsyncFunctionDef, guards: set[str]) -> bool:
    """The test skips itself when the engine is absent (decorator or importorskip)."""
    for d in fn.decorator_list:
        if _guard(d) or (isinstance(d, ast.Name) and d.id in guards):
            return True
    return any(_guard(stmt) for stmt in fn.body)


def _fakes(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """The test puts a stand-in for the engine package in ``sys.modules`` itself
    (``monkeypatch.setitem(sys.modules, "torch", ...)``), so the real one is never imported."""
    for sub in ast.walk(fn):
        if (
            isinstance(sub, ast.Call)
            and _called(sub) == "setitem"
            and len(sub.args) >= 2
            and ast.unparse(sub.args[0]) == "sys.modules"
        ):
            key = sub.args[1]
            if isinstance(key, ast.Constant) and str(key.value).split(".")[0] in ENGINE_PACKAGES:
                return True
    return False


def unmarked(test_files: Iterable[tuple[str, Path]], needs: EngineNeeds) -> list[str]:
    """``file::test`` of every test that needs the engine and neither carries the
    marker nor skips itself when the engine is absent."""
    found = []
    for name, path in test_files:
        m = parse(name, path)
        if _module_marked(m.tree):
            continue
        needs.add(m)
        whole = m.name in needs.whole
        guards = _guards(m.tree)
        for test, fn, marked in _tests(m.tree):
            if marked or _skips(fn, guards) or _fakes(fn):
                continue
            if whole or fn.name in m.own:
                found.append(f"{path.as_posix()}::{test}")
    return found
