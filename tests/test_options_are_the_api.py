"""Issue 25: a command's options model is its API, so a flag is one field plus its test.

For ``accept`` and ``bench`` the typer command is generated from the very model
the Python API takes (``run_accept(AcceptOptions)``, ``run_bench(BenchOptions)``):
every field (but those kept off the command line) is a flag in ``--help``, and
every flag in ``--help`` is a field. A model with one more field gets one more
flag, with no other edit.
"""

from __future__ import annotations

import inspect
import re
import typing
from collections.abc import Callable
from typing import Any

import pytest
import typer
from pydantic import BaseModel, Field
from typer.testing import CliRunner

from servekit import accept, bench
from servekit.cli import app, leaf_commands
from servekit.cliopts import add_command, kebab_flag

FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
API: dict[str, tuple[type[BaseModel], Callable[..., Any]]] = {
    "accept": (accept.AcceptOptions, accept.run_accept),
    "bench": (bench.BenchOptions, bench.run_bench),
}


def _help_flags(typer_app: typer.Typer, model: type[BaseModel], *argv: str) -> set[str]:
    """The flags ``--help`` lists (help texts, which may name other tools' flags, left out)."""
    result = CliRunner().invoke(typer_app, [*argv, "--help"], env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    shown = result.output
    for field in model.model_fields.values():
        shown = shown.replace(field.description or "\0", "")
    return set(FLAG.findall(shown)) - {"--help"}


def _field_flags(model: type[BaseModel]) -> set[str]:
    flags = set()
    for name, field in model.model_fields.items():
        extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
        if extra.get("cli") is False:
            continue
        flag = extra.get("flag")
        flags.add(flag if isinstance(flag, str) else kebab_flag(name))
        if field.default is True:
            flags.add("--no-" + kebab_flag(name).removeprefix("--"))
    return flags


@pytest.mark.parametrize("command", sorted(API))
def test_the_command_is_generated_from_the_model_the_api_takes(command: str) -> None:
    model, api = API[command]
    callback: Any = leaf_commands()[command].callback
    assert callback.options_model.model is model
    first = next(iter(inspect.signature(api).parameters))
    assert typing.get_type_hints(api)[first] is model


@pytest.mark.parametrize("command", sorted(API))
def test_every_field_is_a_flag_and_every_flag_a_field(command: str) -> None:
    model, _ = API[command]
    assert _help_flags(app, model, command) == _field_flags(model)


def test_one_more_field_is_one_more_flag_that_reaches_the_model() -> None:
    class Wider(accept.AcceptOptions):
        warmup_rounds: int = Field(0, ge=0, description="rounds sent before the checks")

    seen: list[Wider] = []

    def run(options: Wider) -> int:
        seen.append(options)
        return 0

    wide = typer.Typer()
    add_command(wide, "accept", Wider, run, doc="accept")
    wide.command("other")(lambda: None)  # two commands, so 'accept' is a subcommand
    assert _help_flags(wide, Wider, "accept") == _field_flags(accept.AcceptOptions) | {
        "--warmup-rounds"
    }
    result = CliRunner().invoke(wide, ["accept", "--warmup-rounds", "3", "--list"])
    assert result.exit_code == 0, result.output
    assert seen[0].warmup_rounds == 3 and seen[0].list_checks
