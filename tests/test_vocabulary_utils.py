"""No utility word of the vocabulary is defined twice (issue 25).

The strict frozen model, atomic writes, the URL check, Markdown cell escaping and
pydantic error reading each live in one module; this test reads every module of
``src/servekit`` and fails when one outside that home defines the concept again.
Each rule has a positive control: a synthetic snippet that does what the rule
forbids is caught, so a rule that silently matches nothing would fail too.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from tests.helpers.modules import parsed_modules

SRC = Path(__file__).resolve().parents[1] / "src" / "servekit"

Rule = Callable[[ast.AST], Iterator[int]]


def _functions(tree: ast.AST) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node


def _constants(node: ast.AST) -> Iterator[str]:
    for sub in ast.walk(node):
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
            yield sub.value


def _calls(node: ast.AST) -> Iterator[ast.Call]:
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call):
            yield sub


def _name(call: ast.Call) -> str:
    """``os.replace`` for ``os.replace(...)``, ``.rename`` for ``x.rename(...)``, ``f`` for ``f()``."""
    func = call.func
    if isinstance(func, ast.Attribute):
        base = func.value.id if isinstance(func.value, ast.Name) else ""
        return f"{base}.{func.attr}" if base in ("os", "tempfile") else f".{func.attr}"
    return func.id if isinstance(func, ast.Name) else ""


def strict_config(tree: ast.AST) -> Iterator[int]:
    """``ConfigDict(frozen=True, extra="forbid", ...)``: the strict model's config, again."""
    for call in _calls(tree):
        if _name(call) == "ConfigDict":
            keys = {k.arg: ast.unparse(k.value) for k in call.keywords}
            if keys.get("frozen") == "True" and keys.get("extra") == "'forbid'":
                yield call.lineno


TEMP_CALLS = {"tempfile.mkstemp", "tempfile.NamedTemporaryFile", "mkstemp", "NamedTemporaryFile"}
RENAMES = {"os.replace", "os.rename", ".rename", ".replace"}


def atomic_write(tree: ast.AST) -> Iterator[int]:
    """A function that makes a temp file and renames it into place: an atomic write, again."""
    for fn in _functions(tree):
        calls = list(_calls(fn))
        temp = any(_name(c) in TEMP_CALLS for c in calls) or any(
            ".tmp" in s for s in _constants(fn)
        )
        for call in calls:
            path_rename = _name(call) in (".rename", ".replace") and not (
                call.args and isinstance(call.args[0], ast.Constant)
            )
            if temp and (_name(call) in ("os.replace", "os.rename") or path_rename):
                yield call.lineno


def url_check(tree: ast.AST) -> Iterator[int]:
    """A function that splits a URL and judges its scheme or port: the URL check, again."""
    for fn in _functions(tree):
        splits = [c for c in _calls(fn) if _name(c) in ("urlsplit", "urlparse", ".urlsplit")]
        schemes = [
            n.lineno
            for n in ast.walk(fn)
            if isinstance(n, ast.Compare)
            and "scheme" in ast.unparse(n.left)
            and {"http", "https"} & set(_constants(n))
        ]
        guarded_port = any(
            isinstance(n, ast.Try)
            and any("ValueError" in ast.unparse(h.type or ast.Constant(None)) for h in n.handlers)
            and any(isinstance(a, ast.Attribute) and a.attr == "port" for a in ast.walk(n))
            for n in ast.walk(fn)
        )
        if splits and (schemes or guarded_port):
            yield splits[0].lineno
    for call in _calls(tree):
        if _name(call) == ".startswith" and any(s.startswith("http") for s in _constants(call)):
            yield call.lineno


URL_SHAPE = re.compile(r"(?:[a-z]+|\{\})://[^/\s{}]*(?:\{\})?[^/\s{}]*:\{\}")


def url_build(tree: ast.AST) -> Iterator[int]:
    """``f"http://{host}:{port}"``: a URL built from a host and a port, again (an IPv6
    literal needs brackets; the one builder adds them)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            shape = "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
            if URL_SHAPE.search(shape):
                yield node.lineno


def detached_group(tree: ast.AST) -> Iterator[int]:
    """``start_new_session=True`` or ``os.killpg``: a detached process group started or
    stopped again (servekit.procgroup does both)."""
    for call in _calls(tree):
        if _name(call) in (".killpg", "os.killpg") or any(
            k.arg == "start_new_session" for k in call.keywords
        ):
            yield call.lineno


def rank_table_written(tree: ast.AST) -> Iterator[int]:
    """A dict holding ``server_group_list``: a ModelArts rank table written again."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict) and any(
            isinstance(k, ast.Constant) and k.value == "server_group_list" for k in node.keys
        ):
            yield node.lineno


def rendezvous_hash(tree: ast.AST) -> Iterator[int]:
    """A hash of a key and an instance's URL: the proxy's rendezvous hash, again."""
    for call in _calls(tree):
        hashed = ast.unparse(call)
        if _name(call) in (".blake2b", ".sha256", ".md5", ".sha1") and ".url" in hashed:
            yield call.lineno


def node_bound(tree: ast.AST) -> Iterator[int]:
    """``MAX_NODES = ...``: a second bound on a layout's node count."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "MAX_NODES" for t in node.targets
        ):
            yield node.lineno


def name_split(tree: ast.AST) -> Iterator[int]:
    """``name.split("/")``, ``name.count("/")``...: a layout name taken apart by hand."""
    for call in _calls(tree):
        func = call.func
        first = call.args[0] if call.args else None
        if (
            isinstance(func, ast.Attribute)
            and func.attr in ("split", "rsplit", "partition", "rpartition", "count")
            and isinstance(first, ast.Constant)
            and first.value == "/"
            and "name" in ast.unparse(func.value).lower()
        ):
            yield call.lineno


def shape_vocabulary(tree: ast.AST) -> Iterator[int]:
    """A second ``Topology`` class, or a shape label of its own (``f"{p}P{d}D"``)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "Topology":
            yield node.lineno
        if isinstance(node, ast.JoinedStr):
            shape = "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
            if re.fullmatch(r"\{\}[Pp]\{\}[Dd]", shape):
                yield node.lineno


def markdown_escape(tree: ast.AST) -> Iterator[int]:
    """``text.replace("|", ...)``: Markdown cell escaping, again."""
    for call in _calls(tree):
        first = call.args[0] if call.args else None
        if _name(call) == ".replace" and isinstance(first, ast.Constant) and first.value == "|":
            yield call.lineno


def error_reading(tree: ast.AST) -> Iterator[int]:
    """``exc.errors()[0]``: reading pydantic's first error outside errors.first_error."""
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Subscript)
            and isinstance(node.value, ast.Call)
            and _name(node.value) == ".errors"
            and ast.unparse(node.slice) == "0"
        ):
            yield node.lineno


def file_hash(tree: ast.AST) -> Iterator[int]:
    """A function that opens a file for reading and hashes it with sha256: sha256_file, again."""
    for func in _functions(tree):
        names = {_name(c) for c in _calls(func)}
        reads = any(_name(c) in ("open", ".open") and "rb" in _constants(c) for c in _calls(func))
        if reads and names & {".sha256", "sha256"}:
            yield func.lineno


# rule -> (its one home, modules it does not apply to with the reason)
RULES: dict[str, tuple[Rule, str, dict[str, str]]] = {
    "strict frozen model": (strict_config, "vocabulary/model.py", {}),
    "atomic write": (
        atomic_write,
        "vocabulary/atomic.py",
        {
            # Copied unchanged into a fake platform's bin/ and run by whatever python3
            # a script finds, without servekit: it cannot import the vocabulary.
            "importer/platform/recorder.py": "standalone file, runs without servekit",
            # Shipped in a ConfigMap and run by the engine image's python3 in a Kubernetes
            # init container, without servekit.
            "platforms/k8s/fetchmodel.py": "standalone file, runs without servekit",
            # Shipped beside the rendered scripts and run by the engine image's python3,
            # where servekit is not installed: it cannot import the vocabulary either.
            "preflight/node/servekit_preflight_share.py": "shipped, runs without servekit",
        },
    ),
    "URL check": (url_check, "vocabulary/urls.py", {}),
    "URL build": (
        url_build,
        "vocabulary/urls.py",
        {
            # Copied byte for byte beside the engines and imported by vLLM's api
            # server, without servekit: it cannot import the vocabulary.
            "guard.py": "standalone file, runs without servekit",
            # Shipped beside the scripts and run by the node's python3 (3.8) alone.
            "preflight/node/servekit_preflight_share.py": "standalone file, runs without servekit",
        },
    ),
    "Markdown cell": (markdown_escape, "vocabulary/markdown.py", {}),
    "rank table writer": (rank_table_written, "importer/platform/harness.py", {}),
    "rendezvous hash": (rendezvous_hash, "proxy/instances.py", {}),
    "node count bound": (node_bound, "catalog/schema.py", {}),
    "shape vocabulary": (shape_vocabulary, "catalog/topology.py", {}),
    "layout name parts": (
        name_split,
        "catalog/names.py",
        {
            "catalog/families.py": "a profile's name (<hardware>/<family>), not a layout's",
            "kit/paths.py": "a path inside an image, not a layout's name",
        },
    ),
    "detached process group": (
        detached_group,
        "procgroup.py",
        {
            # Copied into the fake platform's bin/ and run by python3 -IS without servekit.
            "importer/platform/reaper.py": "standalone file, runs without servekit",
        },
    ),
    "pydantic error reading": (error_reading, "errors.py", {}),
    "file sha256": (file_hash, "vocabulary/reading.py", {}),
}


def _sources() -> tuple[tuple[str, ast.AST], ...]:
    """Every module of src/servekit, parsed once for all the rules (and test_wiring_text's)."""
    return parsed_modules()


@pytest.mark.parametrize("concept", sorted(RULES))
def test_each_utility_word_is_defined_only_in_its_home(concept: str) -> None:
    rule, home, exempt = RULES[concept]
    found = [
        f"{rel}:{line}"
        for rel, tree in _sources()
        if rel != home and rel not in exempt
        for line in rule(tree)
    ]
    assert not found, f"{concept} defined outside servekit/{home}: {found}; import it from there"


@pytest.mark.parametrize("concept", sorted(RULES))
def test_each_home_exists_and_holds_its_word(concept: str) -> None:
    """The rules look for something real: the home itself does what the rule forbids elsewhere."""
    rule, home, _ = RULES[concept]
    assert list(rule(ast.parse((SRC / home).read_text()))), home


CAUGHT = {
    "file sha256": [
        'def h(p):\n    sha = hashlib.sha256()\n    with open(p, "rb") as f:\n'
        "        sha.update(f.read())\n    return sha.hexdigest()\n",
        'def h(p):\n    d = hashlib.sha256()\n    with p.open("rb") as f:\n'
        "        for b in iter(lambda: f.read(1 << 20), b''):\n            d.update(b)\n",
    ],
    "strict frozen model": [
        'class A(BaseModel):\n    model_config = ConfigDict(frozen=True, extra="forbid")\n',
        'C = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)\n',
    ],
    "atomic write": [
        "def w(p, d):\n    fd, tmp = tempfile.mkstemp(dir=p.parent)\n    os.replace(tmp, p)\n",
        'def w(p, t):\n    tmp = p.with_suffix(".tmp")\n    tmp.write_text(t)\n    tmp.rename(p)\n',
        'def w(p, t):\n    tmp = p.with_name(f".{p.name}.tmp")\n    os.rename(tmp, p)\n',
    ],
    "URL check": [
        "def c(u):\n    parts = urlsplit(u)\n"
        '    if parts.scheme not in ("http", "https"):\n        raise UsageError(u)\n',
        "def c(u):\n    try:\n        port = urlparse(u).port\n    except ValueError:\n        raise\n",
        'def is_url(t):\n    return t.startswith(("http://", "https://"))\n',
    ],
    "URL build": [
        'url = f"http://{self.host}:{self.api_port}"\n',
        'endpoint = f"tcp://{where}:{port}"\n',
        'doc = {"endpoint": f"tcp://*:{port}"}\n',
        "return f\"http://{'127.0.0.1' if host == '0.0.0.0' else host}:{self.port}\"\n",
        'line = f"curl -s http://{host}:{port}/v1/chat/completions"\n',
    ],
    "detached process group": [
        "p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, start_new_session=True)\n",
        "with contextlib.suppress(ProcessLookupError):\n    os.killpg(pgid, signum)\n",
    ],
    "rank table writer": [
        'doc = {"status": "completed", "group_count": "2", "server_group_list": groups}\n',
    ],
    "node count bound": ["MAX_NODES = 250\n"],
    "shape vocabulary": [
        "@dataclass(frozen=True)\nclass Topology:\n    kind: str\n    label: str\n",
        'label = f"{p}P{d}D"\n',
    ],
    "layout name parts": [
        'hw, model, topology = name.split("/")\n',
        'hardware = layout.name.split("/", 1)[0]\n',
        'if name.count("/") != 2:\n    raise UsageError(name)\n',
        'said = name.rsplit("/", 1)[1]\n',
    ],
    "rendezvous hash": [
        "def _tiebreak(key, inst):\n"
        "    return hashlib.blake2b(key + inst.url.encode(), digest_size=8).digest()\n",
    ],
    "Markdown cell": ['def cell(t):\n    return t.replace("|", "\\\\|")\n'],
    "pydantic error reading": [
        'try:\n    M()\nexcept ValidationError as exc:\n    msg = exc.errors()[0]["msg"]\n'
    ],
}

KEPT = {
    "file sha256": [
        'def copy(src, dst):\n    sha = hashlib.sha256()\n    with dst.open("wb") as f:\n'
        "        f.write(src)\n        sha.update(src)\n",
        "def text(t):\n    return hashlib.sha256(t.encode()).hexdigest()\n",
    ],
    "strict frozen model": ['model_config = ConfigDict(extra="forbid")\n'],
    "atomic write": [
        "def swap(a, b):\n    os.replace(a, b)\n",
        "def staged(p):\n    tmp = tempfile.mkdtemp()\n    os.replace(tmp, p)\n",
        'def f(t):\n    tmp = ".tmp"\n    return t.replace("a", "b")\n',
    ],
    "URL check": [
        "def host(u):\n    return urlsplit(u).hostname\n",
        "def same(a, b):\n    return urlsplit(a).port == urlsplit(b).port\n",
    ],
    "URL build": [
        'url = url_for(host, port, "/v1/models")\n',
        'shown = f"{url}/metrics"\n',
        'key = f"{node}:{port}"\n',
    ],
    "Markdown cell": ['t.replace("-", "_")\n'],
    "rank table writer": ['groups = data.get("server_group_list") or []\n'],
    "layout name parts": ['folder = ref.folder.rstrip("/").split("/")\n'],
    "shape vocabulary": ['title = f"{model} {topo.name} on {n}x {hw}"\n'],
    "node count bound": ["if count > MAX_NODES:\n    raise ValueError(count)\n"],
    "rendezvous hash": ["d = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()\n"],
    "detached process group": [
        "p = subprocess.Popen(argv, stdout=out)\n",
        "os.kill(pid, signal.SIGTERM)\n",
    ],
    "pydantic error reading": ["errors = exc.errors()\nn = len(errors)\n"],
}


@pytest.mark.parametrize(
    ("concept", "snippet"), [(c, s) for c, snippets in CAUGHT.items() for s in snippets]
)
def test_positive_control_a_redefinition_is_caught(concept: str, snippet: str) -> None:
    assert list(RULES[concept][0](ast.parse(snippet))), snippet


@pytest.mark.parametrize(
    ("concept", "snippet"), [(c, s) for c, snippets in KEPT.items() for s in snippets]
)
def test_near_misses_are_not_redefinitions(concept: str, snippet: str) -> None:
    assert not list(RULES[concept][0](ast.parse(snippet))), snippet
