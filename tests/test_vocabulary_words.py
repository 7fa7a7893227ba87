"""No module but servekit.vocabulary defines the domain words again (issue 25).

Roles, engine kinds, the KV/proxy/guard modes and vLLM's metric names were each
written in four to eleven places, so one change touched them all. They live in
``servekit.vocabulary`` now; this test reads every module under ``src/servekit``
and fails where one writes them again: a ``Literal[...]``, tuple, list, set or
``frozenset(...)`` made only of one concept's words (two or more of them), or a
string that starts with a ``vllm:`` metric name. Each rule is shown to catch a
synthetic redefinition, so a rule that stopped matching would fail here too.
"""

from __future__ import annotations

import ast
import re
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import get_args

import pytest

from servekit import guard
from servekit.proxy.bundle import LEFT_OUT, build_zipapp
from servekit.vocabulary import (
    ENDPOINT_GROUPS,
    ENGINE_KINDS,
    KV_PROTOCOLS,
    KV_ROLE_OF,
    PROXY_MODES,
    PROXY_POOLS,
    EndpointRole,
    GuardMode,
    KvRole,
    RunEngine,
    role_of_kv,
)

SRC = Path(__file__).resolve().parents[1] / "src" / "servekit"
VOCABULARY = SRC / "vocabulary"

WORDS: dict[str, frozenset[str]] = {
    "role": frozenset(get_args(EndpointRole)) | frozenset(PROXY_POOLS) | frozenset(ENDPOINT_GROUPS),
    "engine kind": frozenset(ENGINE_KINDS) | frozenset(get_args(RunEngine)),
    "mode": frozenset((*KV_PROTOCOLS, *PROXY_MODES, *get_args(GuardMode), "off")),
    "KV role": frozenset(get_args(KvRole)),
}
METRIC = re.compile(r"\^?vllm:[a-z0-9_]+")

# guard.py ships alone as servekit_decode_guard.py (standard library, no servekit
# beside it), so it keeps its own states; test_guard_states_extend_the_guard_modes
# pins them to the vocabulary instead.
ALONE = {("guard.py", "mode")}


def _strings(node: ast.expr) -> list[str] | None:
    """The strings a collection display holds, or None when it holds anything else."""
    elts = node.elts if isinstance(node, ast.Tuple | ast.List | ast.Set) else [node]
    out = []
    for e in elts:
        if not (isinstance(e, ast.Constant) and isinstance(e.value, str)):
            return None
        out.append(e.value)
    return out


def _collections(tree: ast.AST) -> Iterator[tuple[ast.AST, list[str]]]:
    """Every Literal[...], tuple/list/set display and frozenset()/set() call of strings."""
    inside_literal: set[int] = set()
    for node in ast.walk(tree):
        found: list[str] | None = None
        if isinstance(node, ast.Subscript) and _name(node.value) == "Literal":
            inside_literal.add(id(node.slice))
            found = _strings(node.slice)
        elif isinstance(node, ast.Tuple | ast.List | ast.Set) and id(node) not in inside_literal:
            found = _strings(node)
        elif isinstance(node, ast.Call) and _name(node.func) in ("frozenset", "set") and node.args:
            arg = node.args[0]
            inside_literal.add(id(arg))
            found = _strings(arg) if isinstance(arg, ast.Tuple | ast.List | ast.Set) else None
        if found is not None:
            yield node, found


def _name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    return node.attr if isinstance(node, ast.Attribute) else None


def redefinitions(source: str, where: str) -> list[str]:
    """``where:line: concept [words]`` for every redefinition of a vocabulary word."""
    tree = ast.parse(source)
    out: list[str] = []
    for node, words in _collections(tree):
        distinct = set(words)
        for concept, allowed in WORDS.items():
            if len(distinct) >= 2 and distinct <= allowed and (where, concept) not in ALONE:
                out.append(f"{where}:{getattr(node, 'lineno', 0)}: {concept} {words}")
    for const in ast.walk(tree):
        if (
            isinstance(const, ast.Constant)
            and isinstance(const.value, str)
            and METRIC.match(const.value)
        ):
            out.append(f"{where}:{const.lineno}: vLLM metric name {const.value[:60]!r}")
    for mapping in ast.walk(tree):  # kv_role words are written as mappings (role <-> kv_role)
        if not isinstance(mapping, ast.Dict):
            continue
        for side in (mapping.keys, mapping.values):
            words = _strings(ast.Tuple(elts=[k for k in side if k is not None]))
            if words and len(set(words)) >= 2 and set(words) <= WORDS["KV role"]:
                out.append(f"{where}:{mapping.lineno}: KV role {words}")
    return out


def test_no_module_outside_the_vocabulary_defines_its_words() -> None:
    found = [
        hit
        for path in sorted(SRC.rglob("*.py"))
        if VOCABULARY not in path.parents
        for hit in redefinitions(path.read_text(), path.relative_to(SRC).as_posix())
    ]
    assert not found, "import these from servekit.vocabulary instead:\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("source", "concept"),
    [
        ('Role = Literal["mixed", "prefill", "decode"]', "role"),
        ('ENGINE_ROLES = ("mixed", "prefill", "decode")', "role"),
        ('ok = role in ("prefill", "decode")', "role"),
        ('POOLS = frozenset({"prefill", "decode", "replica"})', "role"),
        ('def urls(which: Literal["prefill", "decode", "replicas"]) -> None: ...', "role"),
        ('EngineKind = Literal["vllm", "sim", "external"]', "engine kind"),
        ('KINDS = ["vllm-ascend", "vllm", "vllm-cpu"]', "engine kind"),
        ('MODES = ("pd", "bootstrap", "prompt-keyed", "layerwise", "replica")', "mode"),
        ('KvMode = Literal["params", "bootstrap", "prompt", "layerwise"]', "mode"),
        ('paired = mode in {"pd", "bootstrap"}', "mode"),
        ('ROLE_OF = {"kv_producer": "prefill", "kv_consumer": "decode"}', "KV role"),
        ('want = {"prefill": "kv_producer", "decode": "kv_consumer"}[role]', "KV role"),
        ('HITS = "vllm:prefix_cache_hits"', "vLLM metric name"),
        ('SERIES = ("vllm:e2e_request_latency_seconds_total",)', "vLLM metric name"),
        ("INFO = re.compile(r'^vllm:cache_config_info\\{')", "vLLM metric name"),
    ],
)
def test_a_redefinition_is_caught(source: str, concept: str) -> None:
    hits = redefinitions(source, "somewhere.py")
    assert hits and all(f": {concept} " in hit for hit in hits), hits


@pytest.mark.parametrize(
    "source",
    [
        "from servekit.vocabulary import ROLES\nok = role in ROLES",
        'only = ("mixed",)',  # one word is a value, not a set of them
        'roles = (*PD_ROLES, "mixed")',  # built from the vocabulary
        'pair = ("prefill", 8)',
        'help = "vllm: real engines; sim: simulated engines"',
        'doc = "the engines\' ``vllm:cache_config_info`` family"',
    ],
)
def test_uses_and_prose_are_not_redefinitions(source: str) -> None:
    assert redefinitions(source, "somewhere.py") == []


def test_the_vocabulary_itself_is_what_the_rules_catch() -> None:
    """The real definitions trip every rule, so none of them is vacuous."""
    found = [
        hit
        for path in sorted(VOCABULARY.glob("*.py"))
        for hit in redefinitions(path.read_text(), path.name)
    ]
    for concept in (*WORDS, "vLLM metric name"):
        assert any(f": {concept} " in hit for hit in found), concept


def test_guard_states_extend_the_guard_modes() -> None:
    assert (*get_args(GuardMode), "off") == guard.STATES


def test_the_zipapp_bundles_the_vocabulary_the_proxy_imports(tmp_path: Path) -> None:
    """Every servekit module the proxy package imports is in the zipapp (standard library)."""
    imported: set[str] = set()
    for path in (SRC / "proxy").rglob("*.py"):
        if path.name in LEFT_OUT:  # builds the archive, is not in it
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                "servekit.vocabulary"
            ):
                module = node.module or ""
                imported |= {
                    module if module != "servekit.vocabulary" else f"{module}.{_module_of(a.name)}"
                    for a in node.names
                }
    names = set(zipfile.ZipFile(build_zipapp(tmp_path / "proxy.pyz")).namelist())
    assert imported, "the proxy reads its modes and pools from servekit.vocabulary"
    for module in imported:
        assert module.replace(".", "/") + ".py" in names, module
    assert {"servekit/vocabulary/__init__.py", "servekit/lazyface.py"} <= names


def _module_of(name: str) -> str:
    """The vocabulary module behind a name on its face."""
    from servekit.lazyface import face_names

    return face_names("servekit.vocabulary")[name].rsplit(".", 1)[1]


@pytest.mark.parametrize(
    ("kv_role", "role"),
    [
        ("kv_producer", "prefill"),
        ("kv_consumer", "decode"),
        ("kv_both", "mixed"),
        (None, "mixed"),
        (["kv_producer"], "mixed"),  # a launch line's JSON may hold anything there
        ({"kv_role": "kv_consumer"}, "mixed"),
    ],
)
def test_the_role_of_a_kv_role(kv_role: object, role: str) -> None:
    assert role_of_kv(kv_role) == role
    if role != "mixed":
        assert KV_ROLE_OF[role] == kv_role
