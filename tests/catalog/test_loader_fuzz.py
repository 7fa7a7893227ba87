"""Fuzzing the layout loader: any input gives a layout or one UsageError line, and ends.

Inputs: random bytes; random YAML documents shaped like layouts; the catalog's
own layouts with one value replaced by something absurd (huge, negative,
deeply nested, of the wrong type); real layout files with bytes flipped;
deep nesting; huge numbers. For every input the loader either returns a
:class:`Layout` (which must then give a Plan and pass through the rules
without any other exception) or raises :class:`UsageError` with one line.
Inputs are bounded (the loader refuses files over 1 MiB), so every example
must end: a watchdog turns an example that runs for a minute (the loader
takes milliseconds) into a failure instead of a hung test run.

``SERVEKIT_FUZZ_EXAMPLES=N`` raises the examples per test for a campaign.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, event, example, given, settings, strategies as st
from hypothesis.control import currently_in_test_context

from servekit.catalog.loader import layout_names, load, packaged_catalog, parse_layout_bytes
from servekit.catalog.profiles import PROFILES_DIR
from servekit.errors import UsageError
from servekit.render.plan import build_plan
from servekit.render.rules import check_layout

EXAMPLES = int(os.environ.get("SERVEKIT_FUZZ_EXAMPLES", "60"))
WATCHDOG_S = 60
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
CATALOG = packaged_catalog()
NAMES = layout_names(CATALOG)
TEXTS = {n: (CATALOG / n / "layout.yaml").read_bytes() for n in NAMES}


class Hang(Exception):
    """An example ran past the watchdog."""


@contextmanager
def watchdog() -> Iterator[None]:
    def fire(signum: int, frame: object) -> None:
        raise Hang(f"no answer within {WATCHDOG_S} s")

    old = signal.signal(signal.SIGALRM, fire)
    signal.alarm(WATCHDOG_S)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def outcome(data: bytes, name: str = "local/single") -> str:
    """Load ``data`` as layout ``name``; a layout must also plan and check cleanly."""
    source = f"{name}/layout.yaml"
    profiles = CATALOG / name.split("/", maxsplit=1)[0] / PROFILES_DIR
    with watchdog():
        try:
            layout = parse_layout_bytes(data, source, None, profiles)
        except UsageError as exc:
            message = str(exc)
            assert message and "\n" not in message, message
            assert "Traceback" not in message
            return _seen("refused")
        try:
            build_plan(layout)
        except UsageError as exc:  # parts that disagree: the proxy names no engine's port
            assert "\n" not in str(exc) and "Traceback" not in str(exc)
            return _seen("refused")
        check_layout(layout)
    return _seen("accepted")


def _seen(what: str) -> str:
    if currently_in_test_context():
        event(what)  # counted in --hypothesis-show-statistics
    return what


@FUZZ
@given(st.binary(max_size=4096))
def test_random_bytes(data: bytes) -> None:
    outcome(data)


SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=10**6, max_value=10**60),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
)
FIELDS = st.sampled_from(
    ["name", "title", "summary", "model", "hardware", "nodes", "image", "engines", "proxy",
     "env", "provenance", "verify", "devices_per_node", "dp_size", "tp", "replicas", "ports",
     "api_port", "settings", "engine_args", "concurrency", "workloads", "x-anchor"]
)  # fmt: skip
DOCS = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=6),
        st.dictionaries(FIELDS | st.text(max_size=8), inner, max_size=6),
    ),
    max_leaves=60,
)


@FUZZ
@given(DOCS)
@example({"\n": {"\x00": None}})  # once gave a two-line message
def test_random_yaml_documents(doc: Any) -> None:
    outcome(yaml.safe_dump(doc, allow_unicode=True).encode())


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _paths(value, (*prefix, i))


def _replace(node: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(node, dict):
        return {**node, head: _replace(node[head], rest, value)}
    copy = list(node)
    copy[head] = _replace(node[head], rest, value)
    return copy


HOSTILE_VALUES = st.one_of(
    SCALARS,
    st.integers(min_value=-(10**30), max_value=10**30),
    st.just([[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[0]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]),
    st.lists(st.integers(min_value=-(10**12), max_value=10**12), max_size=8),
    st.dictionaries(st.text(max_size=8), SCALARS, max_size=4),
    st.sampled_from(["1e20", "7100-99999999999", "0", "-1", "", "$(touch /tmp/x)", "\x00"]),
)


@pytest.mark.slow
@FUZZ
@given(st.sampled_from(NAMES), st.data())
def test_catalog_layouts_with_one_value_made_absurd(name: str, data: st.DataObject) -> None:
    raw = yaml.safe_load(TEXTS[name])
    path = data.draw(st.sampled_from(list(_paths(raw))[1:]))
    mutated = _replace(raw, path, data.draw(HOSTILE_VALUES))
    outcome(yaml.safe_dump(mutated, allow_unicode=True).encode(), name)


@FUZZ
@given(st.sampled_from(NAMES), st.data())
def test_catalog_files_with_bytes_flipped(name: str, data: st.DataObject) -> None:
    text = bytearray(TEXTS[name])
    for _ in range(data.draw(st.integers(min_value=1, max_value=8))):
        i = data.draw(st.integers(min_value=0, max_value=len(text) - 1))
        text[i] = data.draw(st.integers(min_value=0, max_value=255))
    outcome(bytes(text), name)


NESTING: list[Callable[[int], str]] = [
    lambda n: "x-a: " + "[" * n + "]" * n + "\n",
    lambda n: "x-a: " + "{a: " * n + "1" + "}" * n + "\n",
    # indentation grows with depth: 1,200 levels are already about a megabyte
    lambda n: "x-a:\n" + "".join(" " * (i + 1) + "- \n" for i in range(min(n, 1200))),
    lambda n: "x-a:\n" + "".join(" " * (i + 1) + f"k{i}:\n" for i in range(min(n, 1200))),
]


@FUZZ
@given(st.sampled_from(range(len(NESTING))), st.integers(min_value=1, max_value=50_000))
@example(0, 31)
@example(0, 32)
@example(1, 31)
@example(3, 40)
def test_deep_nesting(form: int, depth: int) -> None:
    extra = NESTING[form](depth).encode()
    result = outcome(TEXTS["local/single"] + extra)
    if form < 2:  # flow nesting under the top-level mapping (itself one level)
        assert result == ("refused" if depth + 1 > 32 else "accepted")


COUNT_KEYS = ["nodes", "max_model_len", "devices_per_node", "dp_size", "tp", "replicas",
              "api_port", "kv_port", "port", "ports", "concurrency"]  # fmt: skip


@pytest.mark.slow
@FUZZ
@given(
    st.sampled_from(COUNT_KEYS),
    st.one_of(
        st.integers(min_value=10**4, max_value=10**4000),
        st.floats(min_value=1e4),
        st.sampled_from(["1e20", "1e400", ".inf", "-.inf", ".nan", "0x7fffffffffffffff"]),
    ),
)
def test_huge_numbers_in_every_count(key: str, number: int | float | str) -> None:
    for name in ("local/single", "a3/deepseekv4-flash/1p1d"):
        text = TEXTS[name].decode()
        lines = [
            line.split(":")[0] + f": {number}" if line.strip().startswith(f"{key}:") else line
            for line in text.splitlines()
        ]
        outcome("\n".join(lines).encode(), name)


def test_every_catalog_layout_still_loads_after_the_guards() -> None:
    for name in NAMES:
        assert load(name).layout.name == name
        assert outcome(TEXTS[name], name) == "accepted"
    assert Path(CATALOG).is_dir()
