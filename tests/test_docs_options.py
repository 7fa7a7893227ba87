"""Every command is generated from one options model; its help and its docs table agree with it.

For each command of ``servekit``, the test walks the real typer app: the
command's parameters must be exactly the model's fields (flag, short flag,
help, required, the default the help shows), ``--help`` must show each flag
and its help, and the block between ``<!-- options: servekit CMD ... -->`` and
``<!-- /options -->`` in the command's docs page must equal
:meth:`servekit.cliopts.CommandModel.table`. So the docs, the CLI help and the
code's defaults cannot drift.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from servekit.cli import app, leaf_commands
from servekit.cliopts import CommandModel, OptionSpec, default_text

DOCS = Path(__file__).resolve().parents[1] / "docs"
BLOCK = re.compile(r"<!-- options: servekit ([\w -]+?) \(.*?\) -->\n(.*?)<!-- /options -->", re.S)

# The page that documents each command (its generated options block lives there).
PAGES = {
    "layouts list": "layouts.md",
    "layouts show": "layouts.md",
    "layouts check": "layouts.md",
    "layouts import": "layouts.md",
    "layouts new": "layouts.md",
    "layouts diff": "layouts.md",
    "layouts drift": "layouts.md",
    "defaults": "layouts.md",
    "render": "layouts.md",
    "preflight": "preflight.md",
    "up": "local.md",
    "down": "local.md",
    "status": "local.md",
    "logs": "local.md",
    "model tiny": "local.md",
    "demo": "local.md",
    "sim": "sim.md",
    "proxy": "proxy.md",
    "accept": "accept.md",
    "bench": "bench.md",
    "advise": "advise.md",
    "advise calibrate": "advise.md",
    "kit build": "kit.md",
    "kit verify": "kit.md",
    "kit rebuild": "kit.md",
    "kit inspect": "kit.md",
    "catalog site": "catalog-site.md",
    "verify": "verify.md",
    "deployment": "verify.md",
}
# Commands without an options model of their own, and why.
NOT_GENERATED = {
    "sim serve": "takes vLLM's own 'vllm serve' flags, parsed by the simulator",
}


COMMANDS = leaf_commands()


def _model(name: str) -> CommandModel:
    callback = COMMANDS[name].callback
    found = getattr(getattr(callback, "__wrapped__", callback), "options_model", None)
    assert isinstance(found, CommandModel), f"servekit {name} is not generated from a model"
    return found


def _blocks() -> dict[str, tuple[str, str]]:
    found: dict[str, tuple[str, str]] = {}
    for page in DOCS.glob("*.md"):
        for m in BLOCK.finditer(page.read_text()):
            assert m.group(1) not in found, f"two generated blocks for {m.group(1)}"
            found[m.group(1)] = (page.name, m.group(2))
    return found


def test_every_command_is_generated_from_a_model_and_documented() -> None:
    assert set(COMMANDS) == set(PAGES) | set(NOT_GENERATED)
    assert set(_blocks()) == set(PAGES)


def _check_param(spec: OptionSpec, param: Any) -> None:
    primary, *secondary = spec.flag.split("/")
    wanted = [primary, *([spec.short] if spec.short else [])]
    if not spec.argument:
        assert sorted(param.opts) == sorted(wanted), (param.opts, wanted)
        if secondary:
            assert param.secondary_opts == secondary, (param.secondary_opts, secondary)
    assert param.help == (spec.help or None)
    assert param.required == spec.required
    shown = default_text(spec)
    if spec.argument or spec.required or shown == "-" or spec.annotation is bool:
        return
    assert param.show_default == shown, (spec.name, param.show_default, shown)


@pytest.mark.parametrize("command", sorted(PAGES))
def test_the_command_takes_exactly_the_models_fields(command: str) -> None:
    specs = _model(command).specs()
    params = {p.name: p for p in COMMANDS[command].params if p.name != "help"}
    if command == "sim":
        params.pop("ctx", None)
    assert set(params) == {s.name for s in specs}
    for spec in specs:
        _check_param(spec, params[spec.name])


def _squash(text: str) -> str:
    return re.sub(r"[\s│]+", " ", text)


@pytest.mark.parametrize("command", sorted(PAGES))
def test_help_shows_each_flag_with_its_help(command: str) -> None:
    result = CliRunner().invoke(app, [*command.split(), "--help"], env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    shown = _squash(result.output)
    for spec in _model(command).specs():
        if not spec.argument:
            assert all(part in shown for part in spec.flag.split("/")), spec.flag
        assert _squash(spec.help) in shown, (spec.name, spec.help)


@pytest.mark.parametrize("command", sorted(PAGES))
def test_docs_table_equals_the_model(command: str) -> None:
    page, block = _blocks()[command]
    assert page == PAGES[command]
    assert block == _model(command).table(), (
        f"docs/{page}: regenerate the table of servekit {command} with CommandModel.table()"
    )


def test_kit_limits_default_to_the_readers_own_limits() -> None:
    from servekit.kit.options import KitVerifyOptions
    from servekit.kit.streams import Limits

    fields = KitVerifyOptions.model_fields
    assert fields["max_size"].default == Limits().max_total
    assert fields["max_ratio"].default == Limits().max_ratio
