"""One options model per command: the typer command, the model and the docs table agree."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Literal

import pytest
import typer
from hypothesis import given, strategies as st
from pydantic import BaseModel, ConfigDict, Field
from typer.testing import CliRunner

from servekit.cliopts import (
    add_command,
    build_options,
    command_from_model,
    option_specs,
    options_table,
    spread_greedy,
)
from servekit.errors import UsageError


class Opts(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(description="layout name")
    runs: int = Field(3, ge=1, description="runs per figure")
    mode: Literal["a", "b"] = Field("a", description="a or b")
    tags: tuple[str, ...] = Field((), description="tags (repeatable)")
    out: Path | None = Field(None, description="output folder")
    check: bool = Field(False, description="check only")
    secret: str = Field("x", json_schema_extra={"cli": False})


@dataclasses.dataclass(frozen=True)
class DataOpts:
    port: int = dataclasses.field(default=8000, metadata={"help": "port to listen on"})
    prefill: tuple[str, ...] = dataclasses.field(
        default=(), metadata={"help": "prefill URLs", "nargs": "+"}
    )
    timeout_s: float = dataclasses.field(default=5.0, metadata={"help": "seconds"})
    key: str | None = dataclasses.field(default=None, metadata={"help": "k", "flag": False})


class More(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    lines: int = Field(50, description="lines to show", json_schema_extra={"short": "-n"})
    color: bool = Field(True, description="colour the output")
    names: tuple[str, ...] = Field((), description="which ones (default: all)")


def app_for(seen: list[object]) -> typer.Typer:
    app = typer.Typer()

    def run(opts: Opts) -> int:
        seen.append(opts)
        return 0

    app.command("x")(command_from_model(Opts, run, doc="Do x.", arguments=("name",)))
    app.command("y")(lambda: None)
    return app


def test_every_model_field_is_an_option_with_its_help_and_default() -> None:
    result = CliRunner().invoke(app_for([]), ["x", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    for spec in option_specs(Opts, ("name",)):
        if not spec.argument:
            assert spec.flag in result.output
        assert spec.help in result.output
    assert "--secret" not in result.output


def test_values_reach_the_model_typed() -> None:
    seen: list[object] = []
    argv = ["x", "foo", "--runs", "5", "--tags", "a", "--tags", "b", "--check", "--mode", "b"]
    result = CliRunner().invoke(app_for(seen), argv)
    assert result.exit_code == 0, result.output
    assert seen == [Opts(name="foo", runs=5, mode="b", tags=("a", "b"), check=True)]


def test_defaults_come_from_the_model_only() -> None:
    seen: list[object] = []
    assert CliRunner().invoke(app_for(seen), ["x", "foo"]).exit_code == 0
    assert seen == [Opts(name="foo")]


@pytest.mark.parametrize(
    ("argv", "flag"), [(["--runs", "0"], "--runs"), (["--mode", "c"], "--mode")]
)
def test_a_bad_value_is_one_usage_error_naming_the_flag(argv: list[str], flag: str) -> None:
    result = CliRunner().invoke(app_for([]), ["x", "foo", *argv])
    assert isinstance(result.exception, UsageError)
    assert str(result.exception).split(":")[0].split()[0] == flag


def test_dataclass_models_work_too() -> None:
    opts = build_options(DataOpts, {"port": 9000, "prefill": ["http://a:1"]})
    assert opts == DataOpts(port=9000, prefill=("http://a:1",))
    assert "| `--port` | 8000 | port to listen on |" in options_table(DataOpts)


def test_options_table_lists_each_option_once() -> None:
    table = options_table(Opts, ("name",))
    assert table.splitlines()[2] == "| NAME | required | layout name |"
    assert "| `--runs` | 3 | runs per figure |" in table
    assert "| `--check` | off | check only |" in table
    assert "secret" not in table


FACES = tuple(
    f"servekit.{init.parent.name}"
    for init in sorted((Path(__file__).parents[1] / "src/servekit").glob("*/__init__.py"))
    if "lazy_face(__name__)" in init.read_text()
)


def test_lazy_faces_export_exactly_what_they_name() -> None:
    import importlib

    assert len(FACES) >= 12

    for package in FACES:
        face = importlib.import_module(package)
        assert sorted(face.__all__) == face.__dir__()
        for name in face.__all__:
            assert getattr(face, name) is not None


def more_app(seen: list[object]) -> typer.Typer:
    app = typer.Typer()

    def run(opts: More) -> int:
        seen.append(opts)
        return 0

    add_command(app, "m", More, run, doc="More.", arguments=("names",))
    app.command("y")(lambda: None)
    return app


def test_short_flags_negatable_flags_and_variadic_arguments() -> None:
    seen: list[object] = []
    result = CliRunner().invoke(more_app(seen), ["m", "a", "b", "-n", "3", "--no-color"])
    assert result.exit_code == 0, result.output
    assert seen == [More(lines=3, color=False, names=("a", "b"))]
    assert "| `--lines`, `-n` | 50 | lines to show |" in options_table(More, ("names",))


def test_help_shows_the_models_defaults() -> None:
    result = CliRunner().invoke(app_for([]), ["x", "--help"], env={"COLUMNS": "200"})
    assert re.search(r"runs per figure \[default: \(?3\)?\]", result.output)
    assert re.search(r"a or b \[default: \(?a\)?\]", result.output)


def _drop_s(name: str) -> str:
    return "--" + name.removesuffix("_s").replace("_", "-")


def data_app(seen: list[object], refuse: list[str]) -> typer.Typer:
    app = typer.Typer()

    def run(opts: DataOpts) -> int:
        seen.append(opts)
        return 0

    def preparse(argv: list[str]) -> None:
        if any(a in refuse for a in argv):
            raise UsageError("refused")

    add_command(app, "d", DataOpts, run, doc="D.", flag_of=_drop_s, preparse=preparse)
    app.command("y")(lambda: None)
    return app


def test_dataclass_commands_take_greedy_lists_and_their_own_flag_names() -> None:
    seen: list[object] = []
    argv = ["d", "--prefill", "http://a:1", "http://b:2", "--timeout", "2", "--prefill", "c"]
    result = CliRunner().invoke(data_app(seen, []), argv)
    assert result.exit_code == 0, result.output
    assert seen == [DataOpts(prefill=("http://a:1", "http://b:2", "c"), timeout_s=2.0)]
    assert "--key" not in CliRunner().invoke(data_app([], []), ["d", "--help"]).output
    assert "| `--timeout` | 5.0 | seconds |" in options_table(DataOpts, flag_of=_drop_s)


def test_preparse_sees_argv_before_parsing() -> None:
    result = CliRunner().invoke(data_app([], ["--secret"]), ["d", "--secret", "x"])
    assert isinstance(result.exception, UsageError)


def test_only_what_the_user_gave_reaches_a_custom_build() -> None:
    seen: list[dict[str, object]] = []

    def build(values: dict[str, object]) -> DataOpts:
        seen.append(values)
        return DataOpts()

    app = typer.Typer()
    app.command("d")(command_from_model(DataOpts, lambda _: 0, doc="D.", build=build))
    app.command("y")(lambda: None)
    assert CliRunner().invoke(app, ["d", "--port", "1"]).exit_code == 0
    assert seen == [{"port": 1}]


@given(st.lists(st.sampled_from(["--p", "--q", "--p=v", "a", "b", "-x", "--"]), max_size=12))
def test_spreading_greedy_lists_keeps_every_token_in_order(argv: list[str]) -> None:
    spread = spread_greedy(argv, ["--p"])
    assert [a for a in spread if a != "--p"] == [a for a in argv if a != "--p"]
