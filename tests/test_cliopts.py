"""One options model per command: the typer command, the model and the docs table agree."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Literal

import pytest
import typer
from pydantic import BaseModel, ConfigDict, Field
from typer.testing import CliRunner

from servekit.cliopts import build_options, command_from_model, option_specs, options_table
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
    prefill: tuple[str, ...] = dataclasses.field(default=(), metadata={"help": "prefill URLs"})


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
    assert str(result.exception).startswith(f"{flag}:")


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


def test_lazy_faces_export_exactly_what_they_name() -> None:
    import importlib

    for package in ("servekit.bench",):
        face = importlib.import_module(package)
        assert sorted(face.__all__) == sorted(face._NAMES)
        for name in face.__all__:
            assert getattr(face, name) is not None
