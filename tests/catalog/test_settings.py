"""Settings are typed: each takes only values of its type and range, wherever it is given.

A setting reaches a script as ``VAR=${VAR:-value}`` and vLLM as a flag; a value
that is not a number where vLLM wants one (``$(touch /tmp/PWNED)``, ``abc``)
is refused with the setting and the fix, in ``--set``, in layout.yaml (so
``layouts check`` fails) and in a profile. Names that become shell words or
flags (environment variables, vLLM flag names, engine ids) are refused when
they are not names.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.helpers.cli import servekit_inproc, wide_env
from tests.helpers.refusal import one_line_error

from servekit.catalog.loader import packaged_catalog
from servekit.catalog.profiles import PROFILES_DIR
from servekit.defaults import SETTINGS, SETTINGS_BY_KEY, check_setting, defaults_for

PWNED = "$(touch {canary})"


GOOD = {
    "gpu_memory_utilization": [0.5, 1, 1.0, "0.92"],
    "max_num_seqs": [1, 60, "32"],
    "max_num_batched_tokens": [120, 8192],
    "block_size": [128],
    "enable_prefix_caching": [True, False],
    "kv_cache_dtype": ["bfloat16", "fp8_e4m3", "auto"],
    "cpu_kvcache_gib": [1, 4],
    "guard": [True, False],
    "enforce_eager": [True, False],
    "kv_events": [True, False],
}
BAD = {
    "gpu_memory_utilization": [0, -0.1, 1.01, float("nan"), float("inf"), "abc", True, [0.9]],
    "max_num_seqs": [0, -1, 2.5, "abc", "$(touch /tmp/x)", True, None, 10**30, "1e3"],
    "max_num_batched_tokens": [0, "8192; rm -rf /", 1.5],
    "block_size": [0, "`id`"],
    "enable_prefix_caching": [1, 0, "true", "yes", None],
    "kv_cache_dtype": ["a;b", "$(id)", "", "bf16 --evil", 3, "x" * 40],
    "cpu_kvcache_gib": [0, "4G"],
    "guard": [1, "1", "on"],
    "enforce_eager": [1, "true", "--enforce-eager", None],
    "kv_events": [1, "yes", "tcp://*:5557", None],
}


def test_every_setting_declares_its_type_and_an_example_it_takes() -> None:
    assert set(GOOD) == set(BAD) == set(SETTINGS_BY_KEY)
    for setting in SETTINGS:
        assert setting.type in ("int", "float", "bool", "str")
        example = yaml.safe_load(f"x: {setting.example}")["x"]
        assert check_setting(setting.key, example) == example


@pytest.mark.parametrize(("key", "value"), [(k, v) for k, vs in GOOD.items() for v in vs])
def test_values_of_the_right_type_and_range_pass(key: str, value: object) -> None:
    numeric = SETTINGS_BY_KEY[key].type in ("int", "float") and isinstance(value, str)
    assert check_setting(key, value) == (float(value) if numeric else value)


@pytest.mark.parametrize(("key", "value"), [(k, v) for k, vs in BAD.items() for v in vs])
def test_other_values_are_refused_with_the_setting_and_the_fix(key: str, value: object) -> None:
    with pytest.raises(ValueError) as info:
        check_setting(key, value)
    message = str(info.value)
    assert message.startswith(f"{key}: ") and f"e.g. {key}: " in message
    assert "\n" not in message


def test_every_default_row_is_typed() -> None:
    from servekit.vocabulary import ENGINE_KINDS, ROLES

    for kind in ENGINE_KINDS:
        for role in ROLES:
            for key, value in defaults_for(kind, role).items():
                assert check_setting(key, value) == value


@pytest.mark.parametrize("value", ["$(touch {canary})", "abc", "'`touch {canary}`'", "0", "-5"])
def test_set_refuses_a_command_or_text_for_a_number(value: str, tmp_path: Path) -> None:
    canary = tmp_path / "PWNED"
    out = tmp_path / "out"
    item = "engines.decode0.settings.max_num_seqs=" + value.format(canary=canary)
    line = one_line_error(
        servekit_inproc(
            "render", "a3/deepseekv4-flash/1p1d", "--out", str(out), "--set", item, env=wide_env()
        )
    )
    assert "engines.decode0.settings: max_num_seqs:" in line
    assert "takes a whole number from 1" in line and "e.g. max_num_seqs: 32" in line
    assert not out.exists() and not canary.exists()


def test_set_refuses_a_value_that_is_not_yaml(tmp_path: Path) -> None:
    canary = tmp_path / "PWNED"
    item = f"engines.decode0.settings.max_num_seqs=`touch {canary}`"
    one_line_error(
        servekit_inproc(
            "render",
            "a3/deepseekv4-flash/1p1d",
            "--out",
            str(tmp_path / "o"),
            "--set",
            item,
            env=wide_env(),
        ),
        "--set",
    )
    assert not canary.exists()


def _catalog_with(tmp_path: Path, edit: Callable[[dict[str, Any]], None]) -> Path:
    root = tmp_path / "catalog"
    shutil.copytree(packaged_catalog() / "a3", root / "a3")
    path = root / "a3" / "deepseekv4-flash" / "1p1d" / "layout.yaml"
    data = yaml.safe_load(path.read_text())
    edit(data)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return root


def _decode(data: dict[str, Any]) -> dict[str, Any]:
    engine: dict[str, Any] = next(e for e in data["engines"] if e["name"] == "decode0")
    return engine


@pytest.mark.parametrize("value", ["$(touch {canary})", "abc"])
def test_the_same_value_in_layout_yaml_fails_layouts_check(value: str, tmp_path: Path) -> None:
    canary = tmp_path / "PWNED"

    def edit(data: dict[str, Any]) -> None:
        _decode(data).setdefault("settings", {})["max_num_seqs"] = value.format(canary=canary)

    result = servekit_inproc(
        "layouts", "check", "--catalog", str(_catalog_with(tmp_path, edit)), env=wide_env()
    )
    one_line_error(
        result,
        "a3/deepseekv4-flash/1p1d/layout.yaml:",
        "engines.1.settings",
        "max_num_seqs:",
        "e.g.",
    )
    assert not canary.exists()


def test_a_profile_setting_of_the_wrong_type_is_refused(tmp_path: Path) -> None:
    root = _catalog_with(tmp_path, lambda data: None)
    profile = root / "a3" / PROFILES_DIR / "deepseekv4-flash-a3.yaml"
    profile.write_text(profile.read_text().replace("max_num_seqs: 60", "max_num_seqs: lots"))
    result = servekit_inproc("layouts", "check", "--catalog", str(root), env=wide_env())
    one_line_error(result, "deepseekv4-flash-a3.yaml:", "max_num_seqs: 'lots' is refused")


@pytest.mark.parametrize(
    ("edit", "needles"),
    [
        (
            lambda d: _decode(d).update(env={"A;touch x": "1"}),
            ["engines.1.env", "is not an environment variable name"],
        ),
        (
            lambda d: d.update(env={"$(id)": "1"}),
            ["field 'env", "is not an environment variable name"],
        ),
        (
            lambda d: _decode(d).update(engine_args={"x --evil": True}),
            ["engines.1.engine_args", "is not a vLLM flag name"],
        ),
        (
            lambda d: _decode(d).update(leader_args={"--api-server-count": 1}),
            ["engines.1.leader_args", "without its dashes"],
        ),
        (lambda d: _decode(d).update(engine_id="1\ntouch /tmp/x"), ["engines.1.engine_id"]),
        (lambda d: _decode(d).update(cwd="-rf"), ["engines.1.cwd", "starts with '-'"]),
        (lambda d: d["model"].update(path="/m\x00odel"), ["model.path: a NUL character"]),
        (lambda d: d["proxy"].update(api_key_env="KEY;id"), ["proxy.api_key_env"]),
    ],
)
def test_names_that_become_shell_words_or_flags_must_be_names(
    edit: Callable[[dict[str, Any]], None], needles: list[str], tmp_path: Path
) -> None:
    result = servekit_inproc(
        "layouts", "check", "--catalog", str(_catalog_with(tmp_path, edit)), env=wide_env()
    )
    one_line_error(result, *needles)
