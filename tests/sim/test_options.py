"""One options model: ``servekit sim`` and ``python -m servekit.sim`` agree with it.

(docs/sim.md's table is checked with every generated table, in tests/test_docs_options.py.)
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from servekit.cli import app
from servekit.cliopts import option_specs
from servekit.commands.sim import SimCommandOptions
from servekit.errors import UsageError
from servekit.sim import spec_from_mapping
from servekit.sim.options import SimOptions, build_parser, parse_options


def _flat(text: str) -> str:
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", text).split())


def test_servekit_sim_help_lists_every_option_with_its_help() -> None:
    result = CliRunner().invoke(app, ["sim", "--help"], env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    shown = _flat(result.output)
    for spec in option_specs(SimCommandOptions):
        assert spec.flag in shown, spec.flag
        assert _flat(spec.help) in shown, spec.help


def test_module_help_lists_the_same_options_as_the_model() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "servekit.sim", "--help"],
        capture_output=True,
        text=True,
        check=True,
        env={"COLUMNS": "400", "PATH": "/usr/bin:/bin"},
    ).stdout
    shown = _flat(out)
    flags = {a.option_strings[0] for a in build_parser()._actions if a.option_strings}
    assert flags - {"-h"} == {s.flag for s in option_specs(SimOptions)}
    for spec in option_specs(SimOptions):
        assert _flat(spec.help) in shown, spec.help


def test_defaults_are_the_models_through_both_entry_points() -> None:
    assert parse_options([]) == SimOptions()
    argv = ["--endpoints", "2", "--check"]
    typer_out = CliRunner().invoke(app, ["sim", *argv]).output
    module_out = subprocess.run(
        [sys.executable, "-m", "servekit.sim", *argv], capture_output=True, text=True, check=True
    ).stdout
    assert typer_out == module_out
    assert '"port": 8100' in module_out and '"served_model_name": "sim-model"' in module_out


@pytest.mark.parametrize("host", ["", " "])
def test_an_empty_host_is_refused_not_bound_on_every_interface(host: str) -> None:
    """Issue 36 item 8: ``servekit sim --host ""`` bound every interface, said 127.0.0.1."""
    doc = {"endpoints": [{"name": "e", "port": 0, "host": host}], "admin": None}
    with pytest.raises(UsageError, match=r"host: .*every interface"):
        spec_from_mapping(doc)
