"""No module reads an address, a port or a flag back out of rendered text (issue 46).

The Plan holds every cross-process address as a reference (``render/wiring.py``:
process, node, port, what it serves) and every command as typed words; URLs and
the proxy's flags are made of them by one function each. So code that parses
them back (a regex over ``NODE<k>_IP`` or ``:PORT``, a ``host:port`` split, a URL
split, a word compared with a flag, a scan for ``$``, a proxy flag spelled a
second time) is a second, drifting copy of what the references already say. This
test reads every module of ``src/servekit`` and fails on each such pattern.

The exemptions are modules whose input is not servekit's rendered text: the
importer reads a source folder's own recorded commands (foreign text is what
importing means), the proxy and the simulator parse their own command lines,
the standalone guard and the URL check parse the URLs they are given, and a few
places read what a running server reported or a user typed. Each rule has
positive controls (the code this issue removed), and each exemption must still
match something, so a rule that matches nothing or a stale exemption fails too.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Callable, Iterator, Sequence

import pytest
from tests.helpers.modules import parsed_modules

from servekit.proxy.config import cli_fields

Nodes = Sequence[ast.AST]
Rule = Callable[[Nodes], Iterator[int]]

# Flags the proxy shares with other programs' command lines (vLLM's, the source's).
SHARED_FLAGS = frozenset({"--host", "--port"})
PROXY_ONLY_FLAGS = frozenset(f.flag for f in cli_fields()) - SHARED_FLAGS
NODE_PATTERN = re.compile(r"NODE(\\d|\(\\d|\(\?P|\[0-9\])")
PORT_PATTERN = re.compile(r":(\(\\d|\(\?P<port>|\\d\+\$)")


def _calls(nodes: Nodes) -> Iterator[ast.Call]:
    for node in nodes:
        if isinstance(node, ast.Call):
            yield node


def _method(call: ast.Call) -> str:
    return call.func.attr if isinstance(call.func, ast.Attribute) else ""


def _string(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def node_variable_parsed(nodes: Nodes) -> Iterator[int]:
    """A node's address variable taken apart: a regex over ``NODE<digits>``,
    ``name.startswith("NODE")``, or the ``[4:-3]`` slice of ``NODE<k>_IP``."""
    for node in nodes:
        text = _string(node)
        if text is not None and NODE_PATTERN.search(text):
            yield node.lineno  # type: ignore[attr-defined]
        if isinstance(node, ast.Subscript) and ast.unparse(node.slice) == "4:-3":
            yield node.lineno
    for call in _calls(nodes):
        first = _string(call.args[0]) if call.args else None
        if _method(call) in ("startswith", "endswith") and first in ("NODE", "_IP"):
            yield call.lineno


def port_regex(nodes: Nodes) -> Iterator[int]:
    """A regex that takes a port off the end of an address (``:(\\d+)``, ``(?P<port>``)."""
    for node in nodes:
        text = _string(node)
        if text is not None and PORT_PATTERN.search(text):
            yield node.lineno  # type: ignore[attr-defined]


def host_port_split(nodes: Nodes) -> Iterator[int]:
    """``text.rsplit(":", 1)`` / ``text.rpartition(":")``: a host cut off its port."""
    for call in _calls(nodes):
        first = _string(call.args[0]) if call.args else None
        if _method(call) in ("rsplit", "rpartition") and first == ":":
            yield call.lineno


def url_split(nodes: Nodes) -> Iterator[int]:
    """``urlsplit``/``urlparse``: a URL taken apart to learn its host or port."""
    for call in _calls(nodes):
        name = call.func.id if isinstance(call.func, ast.Name) else _method(call)
        if name in ("urlsplit", "urlparse"):
            yield call.lineno


def flag_compared(nodes: Nodes) -> Iterator[int]:
    """A word compared with a flag (``previous == "--host"``): a flag read back."""
    for node in nodes:
        if isinstance(node, ast.Compare) and any(
            isinstance(op, ast.Eq | ast.NotEq) for op in node.ops
        ):
            texts = [_string(x) for x in (node.left, *node.comparators)]
            if any(t is not None and t.startswith("--") and len(t) > 2 for t in texts):
                yield node.lineno


def reference_scan(nodes: Nodes) -> Iterator[int]:
    """``"$" in host``: telling a reference from an address by its text."""
    for node in nodes:
        scans = isinstance(node, ast.Compare) and any(
            isinstance(op, ast.In | ast.NotIn) for op in node.ops
        )
        if scans and _string(node.left) in ("$", "${"):  # type: ignore[attr-defined,operator]
            yield node.lineno  # type: ignore[attr-defined]


def proxy_flag_spelled(nodes: Nodes) -> Iterator[int]:
    """A flag only the proxy has, spelled outside it (its option table spells them)."""
    for node in nodes:
        text = _string(node)
        if text is not None and text.split("=", 1)[0] in PROXY_ONLY_FLAGS:
            yield node.lineno  # type: ignore[attr-defined]


FOREIGN = "the importer reads the source folder's own recorded commands (foreign text)"
OWN_ARGV = "parses its own command line and inputs"
# rule -> (its check, {module or folder/: why it may}).
RULES: dict[str, tuple[Rule, dict[str, str]]] = {
    "node variable parsed": (node_variable_parsed, {"importer/": FOREIGN}),
    "port regex": (
        port_regex,
        {"guard.py": "the standalone guard parses the metaserver URLs it is given"},
    ),
    "host:port split": (
        host_port_split,
        {
            "sim/": "the simulator (a drop-in vllm) reads vLLM's --kv-events-config endpoint",
            "kit/": "image references: a tag after its colon, not an address",
            "platforms/k8s/build.py": "an image reference's tag, not an address",
        },
    ),
    "URL split": (
        url_split,
        {
            "vocabulary/urls.py": "the one URL check",
            "accept/wire.py": "requests a check sends to a URL it was given",
            "verify/cluster.py": "the URLs the running proxy reports and the user's --target",
            "preflight/node/servekit_preflight_share.py": "its own HTTP server reading the "
            "path a peer asks for",
        },
    ),
    "flag compared": (
        flag_compared,
        {
            "importer/": FOREIGN,
            "layouttools/compare.py": "vLLM's own flags of two engine commands, compared "
            "(the proxy's come from its wiring)",
        },
    ),
    "reference scan": (reference_scan, {}),
    "proxy flag spelled": (proxy_flag_spelled, {"importer/": FOREIGN, "proxy/": OWN_ARGV}),
}


@functools.cache
def _sources() -> tuple[tuple[str, Nodes], ...]:
    """Every module of src/servekit as its nodes, walked once for all rules (parsed once
    per session, with test_vocabulary_utils)."""
    return tuple((rel, tuple(ast.walk(tree))) for rel, tree in parsed_modules())


def _nodes(snippet: str) -> Nodes:
    return tuple(ast.walk(ast.parse(snippet)))


def _exempt(rel: str, exempt: dict[str, str]) -> bool:
    return any(rel == key or (key.endswith("/") and rel.startswith(key)) for key in exempt)


@pytest.mark.parametrize("rule", sorted(RULES))
def test_no_module_reads_an_address_or_a_flag_back_out_of_text(rule: str) -> None:
    check, exempt = RULES[rule]
    found = [
        f"{rel}:{line}"
        for rel, tree in _sources()
        if not _exempt(rel, exempt)
        for line in check(tree)
    ]
    assert not found, (
        f"{rule} at {found}: read the Plan's references instead (servekit.render: "
        "Address, url, proxy_words, referenced_nodes)"
    )


@pytest.mark.parametrize(
    ("rule", "where"), [(rule, where) for rule, (_, exempt) in RULES.items() for where in exempt]
)
def test_every_exemption_is_still_needed(rule: str, where: str) -> None:
    check, _ = RULES[rule]
    assert any(list(check(tree)) for rel, tree in _sources() if _exempt(rel, {where: ""})), (
        f"{rule}: nothing in {where} matches; drop its exemption"
    )


# The code issue 46 took out, one or more snippets per rule: each must be caught.
CAUGHT = {
    "node variable parsed": [
        '_NODE_REF = re.compile(r"^NODE(\\d+)_IP$")\n',
        '_NODE_IP = re.compile(r"\\$\\{NODE\\d+_(IP|NIC)\\}")\n',
        'refs = {v for v in names if v.startswith("NODE")}\n',
        "leaders = sorted(int(v[4:-3]) for v in refs if v[4:-3].isdigit())\n",
    ],
    "port regex": [
        '_PORT = re.compile(r"^:(\\d+)")\n',
        '_URL = re.compile(r"^(?P<key>\\S+) (?P<base>.*):(?P<port>\\d+)$")\n',
    ],
    "host:port split": ['host = urls[ep.name].rsplit(":", 1)[0]\n'],
    "URL split": ["planned, actual = urlsplit(want), urlsplit(got)\n"],
    "flag compared": [
        'if previous == "--host":\n    new = pod_ip\n',
        'if previous != "--metaserver-url":\n    new = url\n',
    ],
    "reference scan": ['if "$" not in host:\n    return literal\n'],
    "proxy flag spelled": [
        'argv = ["--prefill", *by_role["prefill"], "--decode", *by_role["decode"]]\n',
        'return [*argv, "--mode", "bootstrap", "--prefill-bootstrap", *bootstraps]\n',
    ],
}


@pytest.mark.parametrize(
    ("rule", "snippet"), [(rule, s) for rule, snippets in CAUGHT.items() for s in snippets]
)
def test_each_rule_catches_the_code_it_was_written_for(rule: str, snippet: str) -> None:
    check, _ = RULES[rule]
    assert list(check(_nodes(snippet))), snippet


def test_every_rule_has_a_positive_control() -> None:
    assert set(CAUGHT) == set(RULES)


@pytest.mark.parametrize(
    "snippet",
    [
        "words = proxy_words(p.proxy, host_of, listen=listen)\n",
        "url = url_for(host, port)\n",
        'flag = "--max-model-len"\n',
        'if name == "prefill":\n    pass\n',
    ],
)
def test_what_the_references_say_is_not_caught(snippet: str) -> None:
    """Negative controls: reading references and spelling vLLM's own flags is fine."""
    assert not any(list(check(_nodes(snippet))) for check, _ in RULES.values()), snippet
