"""Hostile and careless layout and profile files: one line naming the file and the fix, exit 2.

Each case is a file an editor, a paste or a script can produce: another
encoding, absurd nesting, aliases that expand forever, duplicate keys, counts
no cluster has, values the schema used to let through. ``servekit layouts
check`` must answer in one line with exit 2, never a traceback and never a
hang (the subprocess timeout turns a hang into a failure).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st
from tests.helpers.cli import servekit_cli, wide_env
from tests.helpers.refusal import one_line_error

from servekit.catalog.loader import packaged_catalog
from servekit.catalog.profiles import PROFILES_DIR

LAUGHS = "".join(
    f"x-{c}: &{c} [{', '.join([f'*{p}'] * 10) if p else ', '.join(['lol'] * 10)}]\n"
    for p, c in zip(["", "a", "b", "c", "d", "e", "f"], "abcdefg", strict=False)
)


def check(catalog: Path) -> subprocess.CompletedProcess[str]:
    """``servekit layouts check --catalog CATALOG``: the verb most tests here end on."""
    return servekit_cli("layouts", "check", "--catalog", str(catalog), env=wide_env())


@pytest.fixture
def single_text() -> str:
    return (packaged_catalog() / "local" / "single" / "layout.yaml").read_text()


def write_raw(tmp_path: Path, data: bytes, name: str = "local/single") -> Path:
    root = tmp_path / "catalog"
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "layout.yaml").write_bytes(data)
    return root


ENCODINGS = [
    (lambda t: t.encode("utf-16"), "the file is UTF-16; save it as UTF-8"),
    (lambda t: t.encode("utf-16-be"), "NUL byte (UTF-16 without a byte order mark?)"),
    (lambda t: t.encode("utf-32"), "the file is UTF-32"),
    (lambda t: t.replace("Tiny", "Tïny").encode("latin-1"), "not UTF-8 (byte 0xef"),
]


@pytest.mark.parametrize(("encode", "needle"), ENCODINGS)
def test_a_file_in_another_encoding_is_named_with_the_fix(
    encode: Callable[[str], bytes], needle: str, single_text: str, tmp_path: Path
) -> None:
    root = write_raw(tmp_path, encode(single_text))
    one_line_error(check(root), "local/single/layout.yaml", needle)


def test_a_utf8_byte_order_mark_is_fine(single_text: str, tmp_path: Path) -> None:
    root = write_raw(tmp_path, b"\xef\xbb\xbf" + single_text.encode())
    assert check(root).returncode == 0


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        ("x-deep: " + "[" * 20_000 + "]" * 20_000 + "\n", "nested deeper than 32 levels"),
        ("x-deep:\n" + "".join(" " * i + "k:\n" for i in range(1, 200)), "nested deeper"),
        (LAUGHS, "expands to more than 100000 values through its aliases"),
        ("x-loop: &loop [*loop]\n", "alias refers to the value that contains it"),
        ("x-big: " + "9" * 6000 + "\n", "a number with thousands of digits"),
        ("x-code: !!python/object/apply:os.system [touch /tmp/x]\n", "malformed YAML"),
    ],
)
def test_absurd_yaml_is_refused_before_anything_is_built(
    extra: str, needle: str, single_text: str, tmp_path: Path
) -> None:
    root = write_raw(tmp_path, (single_text + extra).encode())
    one_line_error(check(root), "layout.yaml", needle)


def test_a_duplicate_key_names_both_lines(single_text: str, tmp_path: Path) -> None:
    text = single_text.replace("nodes: 1\n", "nodes: 1\nnodes: 2\n")
    line = text.splitlines().index("nodes: 2") + 1
    root = write_raw(tmp_path, text.encode())
    one_line_error(check(root), f"layout.yaml:{line}: duplicate key 'nodes' (also at line")


@pytest.mark.slow
def test_a_duplicate_key_in_a_profile_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "catalog"
    shutil.copytree(packaged_catalog() / "a3", root / "a3")
    profile = root / "a3" / PROFILES_DIR / "deepseekv4-flash-a3.yaml"
    profile.write_text(
        profile.read_text().replace("  prefill:\n", "  prefill:\n    cwd: /a\n    cwd: /b\n", 1)
    )
    one_line_error(check(root), "deepseekv4-flash-a3.yaml:", "duplicate key 'cwd'")


@pytest.mark.slow
def test_a_profile_in_another_encoding_is_named(tmp_path: Path) -> None:
    root = tmp_path / "catalog"
    shutil.copytree(packaged_catalog() / "a3", root / "a3")
    profile = root / "a3" / PROFILES_DIR / "deepseekv4-flash-a3.yaml"
    profile.write_bytes(profile.read_text().encode("utf-16"))
    one_line_error(check(root), "deepseekv4-flash-a3.yaml: the file is UTF-16")


def _set(data: dict[str, Any], path: str, value: Any) -> None:
    *parents, last = path.split(".")
    node: Any = data
    for part in parents:
        node = node[int(part)] if part.isdigit() else node[part]
    node[last] = value


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "path", "value", "needles"),
    [
        ("local/single", "nodes", 10**20, ["field 'nodes'", "less than or equal to 256"]),
        ("local/single", "nodes", "1e20", ["field 'nodes'"]),
        ("local/single", "engines.0.replicas", 10**9, ["engines.0.replicas"]),
        ("a3/deepseekv4-flash/1p1d", "engines.1.dp_size", 10**12, ["engines.1.dp_size"]),
        (
            "a3/deepseekv4-flash/1p1d",
            "engines.1.dp_size_per_node",
            10**6,
            ["engines.1.dp_size_per_node"],
        ),
        ("a3/deepseekv4-flash/1p1d", "engines.1.nodes", [10**15], ["engines.1.nodes.0"]),
        (
            "a3/deepseekv4-flash/1p1d",
            "proxy.decode.0.ports",
            "7100-99999999999",
            ["1 <= FIRST <= LAST <= 65535"],
        ),
        (
            "a3/deepseekv4-flash/1p1d",
            "engines.1.api_port",
            65530,
            ["runs past 65535; pick a lower api_port"],
        ),
        ("a3/deepseekv4-flash/1p1d", "engines.1.devices", list(range(2000)), ["engines.1.devices"]),
        ("local/single", "model.max_model_len", 10**30, ["model.max_model_len"]),
        (
            "a3/deepseekv4-flash/1p1d",
            "hardware.devices_per_node",
            0,
            ["hardware.devices_per_node", "0 devices"],
        ),
        ("local/1p1d", "verify.workloads", ["single-stream", "warp"], ["unknown workload 'warp'"]),
        ("local/1p1d", "verify.concurrency", [0, -1], ["verify.concurrency", "from 1 to"]),
        ("local/1p1d", "verify.concurrency", [], ["verify.concurrency"]),
        ("local/1p1d", "verify.contexts", ["lots"], ["context 'lots' is not a size"]),
    ],
)
def test_absurd_values_name_the_field_and_the_fix(
    name: str,
    path: str,
    value: Any,
    needles: list[str],
    layout_data: Callable[[str], dict[str, Any]],
    write_catalog: Callable[[dict[str, Any]], Path],
) -> None:
    data = layout_data(name)
    data.setdefault("verify", {})
    _set(data, path, value)
    one_line_error(check(write_catalog(data)), *needles)


def test_too_many_processes_in_total_are_refused(
    layout_data: Callable[[str], dict[str, Any]], write_catalog: Callable[[dict[str, Any]], Path]
) -> None:
    data = layout_data("local/dp2")
    for engine in data["engines"]:
        engine["replicas"] = 256
    data["engines"] = data["engines"] * 20
    for i, engine in enumerate(data["engines"]):
        engine["name"] = f"e{i}"
        engine["api_port"] = 1000 + 300 * i
    one_line_error(check(write_catalog(data)), "processes; at most 4096")


def test_the_same_rules_apply_to_set_overrides(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "servekit",
            "render",
            "local/single",
            "--out",
            str(tmp_path / "o"),
            "--set",
            "nodes=100000000000000000000",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    one_line_error(result, "nodes")
    assert not (tmp_path / "o").exists()


def string_alias_bomb(single_text: str, chars: int, aliases: int) -> str:
    """The layout with one anchored string of ``chars`` characters aliased ``aliases``
    times as engine environment values, which render writes into every script."""
    env = ", ".join(f"V{i}: *s" for i in range(aliases))
    return single_text.replace(
        "engines:\n  - {name: engine,",
        f'x-s: &s "{"a" * chars}"\nengines:\n  - {{env: {{{env}}}, name: engine,',
    )


@pytest.mark.slow
@pytest.mark.parametrize(("chars", "aliases"), [(50_000, 2_000), (500_000, 40_000)])
def test_a_string_alias_bomb_is_refused_by_check_and_render_with_nothing_written(
    chars: int, aliases: int, single_text: str, tmp_path: Path
) -> None:
    root = write_raw(tmp_path, string_alias_bomb(single_text, chars, aliases).encode())
    assert (root / "local/single/layout.yaml").stat().st_size < 1 << 20
    one_line_error(check(root), "layout.yaml", "KiB of text through its aliases")
    out = tmp_path / "out"
    result = servekit_cli(
        "render", "local/single", "--target", "nodes", "--out", str(out), "--catalog", str(root)
    )
    one_line_error(result, "KiB of text through its aliases")
    assert not out.exists()


def test_a_few_aliases_of_a_short_string_still_render(single_text: str, tmp_path: Path) -> None:
    """Positive control: the same shape, small, is an ordinary layout."""
    root = write_raw(tmp_path, string_alias_bomb(single_text, 20, 3).encode())
    assert check(root).returncode == 0


def test_a_fifo_layout_file_is_neither_listed_nor_read(single_text: str, tmp_path: Path) -> None:
    """A FIFO named layout.yaml used to be listed as a known layout and refused as unknown
    (and a read of it would block forever); now it is not a layout, said once, the same
    way by list, check and render."""
    root = write_raw(tmp_path, single_text.encode())
    fifo = root / "local" / "piped" / "layout.yaml"
    fifo.parent.mkdir(parents=True)
    os.mkfifo(fifo)
    listed = servekit_cli("layouts", "list", "--catalog", str(root), timeout=60)
    assert listed.returncode == 0 and "local/single" in listed.stdout
    assert "piped" not in listed.stdout
    assert check(root).returncode == 0
    result = servekit_cli(
        "render", "local/piped", "--out", str(tmp_path / "o"), "--catalog", str(root), timeout=60
    )
    one_line_error(result, "local/piped/layout.yaml", "not a regular file")
    assert not (tmp_path / "o").exists()


def test_safeyaml_never_blocks_on_a_fifo(tmp_path: Path) -> None:
    from servekit import safeyaml
    from servekit.errors import UsageError

    fifo = tmp_path / "spec.yaml"
    os.mkfifo(fifo)
    with pytest.raises(UsageError, match="not a regular file"):
        safeyaml.load_file(fifo)


@pytest.mark.parametrize("value", ["a\nb", "a\rb", "a\tb", "a\x1bb", "a\u2028b", "\n"])
def test_a_control_character_in_a_set_value_is_refused(value: str, tmp_path: Path) -> None:
    """YAML used to fold a newline into a space; now it is one line, exit 2, nothing written."""
    out = tmp_path / "o"
    result = servekit_cli(
        "render", "local/single", "--out", str(out), "--set", f"model.served_name={value}"
    )
    one_line_error(result, "model.served_name", "control character")
    assert not out.exists()


@given(st.text(max_size=12))
@settings(max_examples=80, deadline=None)
def test_set_values_are_refused_exactly_when_they_hold_a_control_character(value: str) -> None:
    from servekit.errors import UsageError
    from servekit.render.overrides import parse_set

    try:
        parse_set(f"model.served_name={value}")
    except UsageError as exc:
        assert "\n" not in str(exc)
        if not value.isprintable():
            assert "control character" in str(exc)
    else:
        assert value.isprintable()
