"""Bad input: one line naming the file, line, field and fix; exit 2; nothing written."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings, strategies as st
from tests.helpers.cli import servekit_inproc

from servekit.catalog.loader import layout_names, load, parse_layout_text, resolve_catalog
from servekit.errors import UsageError


def test_every_catalog_layout_loads(catalog_dir: Path) -> None:
    names = layout_names(catalog_dir)
    # the hand-made ones and the 25 imported source folders; the seven hand-made
    # a3/<topology> names are aliases of their imports (aliases.yaml), listed once
    assert len(names) == 7 + 25
    old = {"a3/1node", "a3/2nodes", "a3/1p1d", "a3/2p1x2d", "a3/2p2d", "a3/3p1d", "a3/1p3d"}
    assert not old & set(names)
    for name in old:
        assert load(name).layout.name == f"a3/deepseekv4-flash/{name[3:]}"
    assert {"a3/dsv41-tp8", "a3/dsv41-ced-pd", "local/single", "local/dp2", "local/1p1d"} <= set(
        names
    )
    for name in names:
        assert load(name).layout.name == name


def test_malformed_yaml_names_file_and_line() -> None:
    with pytest.raises(UsageError, match=r"^x\.yaml:3: malformed YAML"):
        parse_layout_text("name: a/b\ntitle: t\nsummary: [unclosed\n", "x.yaml")


def test_unknown_field_names_line_and_fix(layout_data: Callable[[str], dict[str, Any]]) -> None:
    data = layout_data("local/single")
    data["engines"][0]["tensor_paralel"] = 2
    text = yaml.safe_dump(data, sort_keys=False)
    line = next(i for i, t in enumerate(text.splitlines(), 1) if "tensor_paralel" in t)
    with pytest.raises(UsageError) as info:
        parse_layout_text(text, "l.yaml")
    assert str(info.value).startswith(f"l.yaml:{line}: unknown field 'engines.0.tensor_paralel'")
    assert "remove it" in str(info.value)


def test_wrong_type_names_field(layout_data: Callable[[str], dict[str, Any]]) -> None:
    data = layout_data("local/single")
    data["model"]["max_model_len"] = "lots"
    with pytest.raises(
        UsageError, match=r"field 'model.max_model_len': Input should be a valid integer"
    ):
        parse_layout_text(yaml.safe_dump(data), "l.yaml")


def test_missing_field(layout_data: Callable[[str], dict[str, Any]]) -> None:
    data = layout_data("local/single")
    del data["image"]
    with pytest.raises(UsageError, match=r"missing field 'image'; add it"):
        parse_layout_text(yaml.safe_dump(data), "l.yaml")


def test_name_must_match_folder(
    layout_data: Callable[[str], dict[str, Any]], write_catalog: Callable[[dict[str, Any]], Path]
) -> None:
    data = layout_data("local/single")
    root = write_catalog(data)
    (root / "local" / "single").rename(root / "local" / "other")
    with pytest.raises(
        UsageError, match=r"name is 'local/single' but the file sits at 'local/other'"
    ):
        load("local/other", root)


def test_user_catalog_via_env_and_flag(
    layout_data: Callable[[str], dict[str, Any]], write_catalog: Callable[[dict[str, Any]], Path]
) -> None:
    data = layout_data("local/single")
    data["name"] = "mine/solo"
    root = write_catalog(data)
    assert resolve_catalog(root) == root
    out = servekit_inproc("layouts", "check", env={**os.environ, "SERVEKIT_CATALOG": str(root)})
    assert out.returncode == 0, out.stderr
    assert "ok: mine/solo" in out.stdout
    out = servekit_inproc("layouts", "list", "--catalog", str(root))
    assert "mine/solo" in out.stdout


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["layouts", "show", "nope/none"], "unknown layout 'nope/none'"),
        (["render", "nope/none", "--out", "{out}"], "unknown layout 'nope/none'"),
        (
            ["render", "local/1p1d", "--out", "{out}", "--set", "engines.decode.settings.bogus=1"],
            "unknown setting 'bogus'",
        ),
        (
            ["render", "local/1p1d", "--out", "{out}", "--set", "proxy.colour=red"],
            "unknown key 'proxy.colour'",
        ),
        (
            ["render", "local/1p1d", "--out", "{out}", "--set", "engines.nobody.tp=2"],
            "no entry named 'nobody'",
        ),
        (["render", "local/1p1d", "--out", "{out}", "--set", "novalue"], "expected KEY=VALUE"),
        (
            ["render", "local/1p1d", "--out", "{out}", "--set", "proxy.port=abc"],
            "proxy.port: Input should be a valid integer",
        ),
        (
            ["render", "a3/1p1d", "--out", "{out}", "--set", "engines.decode0.engine_id=0"],
            "engine_id '0' is already used",
        ),
        (["layouts", "check", "--catalog", "/nonexistent/catalog"], "not a folder"),
        (["defaults", "--role", "chef"], "--role 'chef'"),
    ],
)
def test_bad_input_is_one_line_exit_2_nothing_written(
    args: list[str], needle: str, tmp_path: Path
) -> None:
    out_dir = tmp_path / "out"
    result = servekit_inproc(*[a.replace("{out}", str(out_dir)) for a in args])
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    assert needle in lines[0]
    assert "Traceback" not in result.stderr
    assert not out_dir.exists()


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=300))
def test_parser_never_crashes_on_arbitrary_text(text: str) -> None:
    try:
        parse_layout_text(text, "fuzz.yaml")
    except UsageError as exc:
        assert str(exc).startswith("fuzz.yaml:")
        assert "\n" not in str(exc)


@settings(max_examples=60, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["name", "title", "nodes", "engines", "model", "hardware", "bogus"]),
        st.one_of(
            st.integers(), st.text(max_size=8), st.lists(st.integers(), max_size=2), st.none()
        ),
        max_size=6,
    )
)
def test_parser_reports_structured_garbage_as_usage_error(doc: dict[str, object]) -> None:
    with pytest.raises(UsageError) as info:
        parse_layout_text(yaml.safe_dump(doc), "g.yaml")
    assert str(info.value).startswith("g.yaml:")
