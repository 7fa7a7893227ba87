"""Each command's flags are its options model's fields: one edit adds a flag.

For the kit, verify, deployment, local-run, catalog and derive commands, every
field of the model a command is generated from is a flag (or a positional
argument) of that command and shows in its ``--help``, and the command has no
flag that is not a field. So adding a flag is adding a field (plus its test),
and nothing else to keep in step.
"""

from __future__ import annotations

from typing import Any

import pytest
import typer
from pydantic import Field
from typer.testing import CliRunner

from servekit.cli import app, leaf_commands
from servekit.cliopts import CommandModel, OptionSpec, add_command
from servekit.kit.options import KitRebuildOptions

COMMANDS = leaf_commands()
MINE = (
    "kit build",
    "kit verify",
    "kit rebuild",
    "kit inspect",
    "verify",
    "deployment",
    "up",
    "down",
    "status",
    "logs",
    "demo",
    "model tiny",
    "layouts list",
    "layouts show",
    "layouts check",
    "layouts import",
    "layouts new",
    "layouts diff",
    "layouts drift",
    "defaults",
    "catalog site",
    "advise",
    "advise calibrate",
)


def _model(command: Any) -> CommandModel:
    callback = command.callback
    found = getattr(getattr(callback, "__wrapped__", callback), "options_model", None)
    assert isinstance(found, CommandModel), f"{command.name} is not generated from a model"
    return found


def _spec_flags(spec: OptionSpec) -> set[str]:
    """The flags a field declares: ``--a/--b`` pairs, ``--no-x`` for a flag on by default."""
    declared = spec.flag
    if spec.default is True and "/" not in declared:
        declared = f"{declared}/--no-{declared.removeprefix('--')}"
    flags = set(declared.split("/"))
    return flags | ({spec.short} if spec.short else set())


def _command_flags(command: Any) -> tuple[set[str], set[str]]:
    """(option flags, argument names) the command itself takes, ``--help`` aside."""
    flags: set[str] = set()
    names: set[str] = set()
    for param in command.params:
        if param.param_type_name == "argument":
            names.add(str(param.name))
        else:
            flags.update(param.opts, param.secondary_opts)
    return flags - {"--help"}, names


def _help(path: str) -> str:
    done = CliRunner().invoke(app, [*path.split(), "--help"], env={"COLUMNS": "250"})
    assert done.exit_code == 0, done.output
    return done.output


@pytest.mark.parametrize("path", MINE)
def test_every_field_is_a_flag_and_every_flag_is_a_field(path: str) -> None:
    command = COMMANDS[path]
    specs = _model(command).specs()
    want_flags = set().union(*(_spec_flags(s) for s in specs if not s.argument))
    want_args = {s.name for s in specs if s.argument}
    have_flags, have_args = _command_flags(command)
    assert have_flags == want_flags, f"servekit {path}: flags and model fields differ"
    assert have_args == want_args, f"servekit {path}: arguments and model fields differ"
    shown = _help(path)
    missing = sorted(f for f in want_flags if f not in shown)
    assert not missing, f"servekit {path} --help does not show {missing}"


def test_every_command_of_these_surfaces_is_covered() -> None:
    """A new kit/catalog/local command joins this test (or says why it is not generated)."""
    groups = ("kit ", "layouts ", "catalog ", "model ")
    found = {name for name in COMMANDS if name.startswith(groups)}
    assert found <= set(MINE), sorted(found - set(MINE))


class _WithProbe(KitRebuildOptions):
    probe: int = Field(3, ge=1, description="A flag added by one field")


def test_adding_a_flag_is_adding_a_field() -> None:
    """One field more in a model is one flag more, with its help, default and check."""
    demo = typer.Typer()
    seen: list[_WithProbe] = []

    def run(opts: _WithProbe) -> int:
        seen.append(opts)
        return 0

    add_command(demo, "rebuild", _WithProbe, run, doc="d", arguments=("kit",))
    demo.command("other")(lambda: None)  # two commands keep the name on the command line
    runner = CliRunner()
    shown = runner.invoke(demo, ["rebuild", "--help"], env={"COLUMNS": "250"}).output
    assert "--probe" in shown and "A flag added by one field" in shown
    args = ["rebuild", "k", "--base", "b", "--out", "o"]
    assert runner.invoke(demo, [*args, "--probe", "5"]).exit_code == 0
    assert seen[-1].probe == 5 and seen[-1].kit.name == "k"
    bad = runner.invoke(demo, [*args, "--probe", "0"])
    assert bad.exit_code != 0 and "--probe" in str(bad.exception)
