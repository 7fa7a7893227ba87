"""The one parser generator: every standalone command line parses to its model or one UsageError.

``python -m servekit.proxy`` (and the zipapp), ``python -m servekit.sim`` and the
drop-in ``vllm serve`` are emitted from their models' field tables by
:mod:`servekit.vocabulary.cliargs`; whatever argv they get, the answer is the
parsed model or a one-line UsageError, never another exception.
"""

from __future__ import annotations

import ast
import dataclasses
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import given, settings, strategies as st
from typer.testing import CliRunner

from servekit.cliopts import option_specs
from servekit.errors import UsageError
from servekit.proxy.config import KEY_FLAGS, ProxyConfig, cli_fields, parse_args
from servekit.sim.options import SimOptions, parse_options
from servekit.sim.vllmargs import VllmFlags, VllmLaunch, parse_launch
from servekit.vocabulary.cliargs import (
    build_parser,
    check_fields,
    dataclass_options,
    option,
    parse_values,
)

HELP = ("-h", "--help")
values = st.one_of(
    st.sampled_from(["http://a:1", "http://b:2/", "a:1", "0", "-1", "7", "1e400", "nan", "x",
                     "", "pd", "replica", "bootstrap", "layerwise", "round-robin", "e=http://p:1",
                     '{"kv_role":"kv_consumer"}', "{nope", "128k", "1M", "--", "-"]),
    st.integers(-(10**6), 10**6).map(str),
    # printable: a backend URL with a newline is check_url's to refuse (issue 25, vocab-utils)
    st.text(st.characters(categories=("L", "N", "P", "S", "Zs")), max_size=8),
)  # fmt: skip


def argvs(flags: list[str]) -> st.SearchStrategy[list[str]]:
    """Token lists mixing known flags (both forms), values and unknown flags."""
    flag = st.sampled_from(flags) | st.from_regex(r"--?[a-z][a-z-]{0,8}", fullmatch=True)
    joined = st.builds(lambda f, v: f"{f}={v}", flag, values)
    tokens = st.lists(st.one_of(flag, flag, joined, values), max_size=10)
    return tokens.filter(lambda argv: not any(_asks_help(a) for a in argv))


def _asks_help(token: str) -> bool:
    """--help, or -h alone or in a cluster of short flags (argparse reads -hh as -h -h)."""
    name = token.split("=", 1)[0]
    return name in HELP or (name.startswith("-") and not name.startswith("--") and "h" in name)


def _one_line(exc: UsageError) -> None:
    assert str(exc) and "\n" not in str(exc)


PROXY_FLAGS = [f.flag for f in cli_fields()] + list(KEY_FLAGS)


@settings(max_examples=300, deadline=None)
@given(argvs(PROXY_FLAGS))
def test_any_proxy_argv_is_a_config_or_one_usage_error(argv: list[str]) -> None:
    try:
        config = parse_args(argv, read_keys=False)
    except UsageError as exc:
        _one_line(exc)
    else:
        assert isinstance(config, ProxyConfig)


@settings(max_examples=300, deadline=None)
@given(argvs([s.flag for s in option_specs(SimOptions)]))
def test_any_sim_argv_is_options_or_one_usage_error(argv: list[str]) -> None:
    try:
        opts = parse_options(argv)
    except UsageError as exc:
        _one_line(exc)
    else:
        assert isinstance(opts, SimOptions)


VLLM_FLAGS = [f.flag for f in dataclass_options(VllmFlags)] + ["-tp", "-dp", "-dpn", "-dpl"]


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([[], ["/m"]]), argvs(VLLM_FLAGS))
def test_any_vllm_serve_argv_is_a_launch_or_one_usage_error(
    model: list[str], argv: list[str]
) -> None:
    try:
        launch = parse_launch([*model, *argv])
    except UsageError as exc:
        _one_line(exc)
    else:
        assert isinstance(launch, VllmLaunch)


@dataclasses.dataclass(frozen=True)
class Knobs:
    """A dataclass model: its metadata says the bounds, the generator checks them."""

    tries: int = option(3, "attempts", ge=1, le=10)
    wait_s: float = option(1.0, "pause", gt=0)
    urls: tuple[str, ...] = option((), "where", nargs="+")
    tags: tuple[str, ...] = option((), "labels (one per flag)")
    color: str = option("red", "colour", choices=("red", "blue"))
    fast: bool = option(False, "hurry")
    cache: bool | None = option(None, "cache or not")
    secret: str | None = option(None, "never on the command line", flag=False, repr=False)

    def __post_init__(self) -> None:
        check_fields(self)


def parse_knobs(argv: list[str]) -> Knobs:
    parser = build_parser(dataclass_options(Knobs), prog="knobs", who="knobs")
    return Knobs(**parse_values(parser, argv))


def test_the_emitter_follows_the_field_table() -> None:
    argv = ["--tries", "4", "--urls", "a", "b", "--urls", "c", "--tags", "x", "--tags", "y",
            "--fast", "--no-cache", "--wait-s", "0.5"]  # fmt: skip
    assert parse_knobs(argv) == Knobs(4, 0.5, ("a", "b", "c"), ("x", "y"), fast=True, cache=False)
    assert parse_knobs([]) == Knobs()
    helptext = build_parser(dataclass_options(Knobs), prog="k", who="k").format_help()
    assert "--secret" not in helptext and "attempts (default 3)" in helptext


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--tries", "0"], "--tries: must be at least 1 (got 0)"),
        (["--tries", "11"], "--tries: must be at most 10 (got 11)"),
        (["--wait-s", "0"], "--wait-s: must be above 0 (got 0.0)"),
        (["--wait-s", "inf"], "--wait-s: expected a finite number, got inf"),
        (
            ["--color", "green"],
            "knobs: argument --color: invalid choice: 'green' "
            "(choose from 'red', 'blue'); see --help",
        ),
        (["--tries", "x"], "knobs: argument --tries: invalid int value: 'x'; see --help"),
        (["--tri", "4"], "knobs: unrecognized arguments: --tri 4; see --help"),
        (["a\nb"], "knobs: unrecognized arguments: a\\nb; see --help"),
    ],
)
def test_bad_values_are_one_usage_error_naming_the_flag(argv: list[str], message: str) -> None:
    with pytest.raises(UsageError) as info:
        parse_knobs(argv)
    assert str(info.value) == message


@given(st.integers(-100, 100))
def test_the_bounds_are_the_metadata_bounds(tries: int) -> None:
    try:
        knobs = parse_knobs(["--tries", str(tries)])
    except UsageError as exc:
        assert not 1 <= tries <= 10 and str(exc).startswith("--tries: must be")
    else:
        assert 1 <= tries <= 10 and knobs.tries == tries


def test_the_parser_module_is_standard_library_only() -> None:
    """The proxy's zipapp runs where pydantic and typer are not installed."""
    code = (
        "import sys; import servekit.vocabulary.cliargs, servekit.proxy.config; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pydantic', 'typer')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


SRC = Path(__file__).resolve().parents[2] / "src" / "servekit"
EMITTERS = {"add_argument": "vocabulary/cliargs.py", "ArgumentParser": "vocabulary/cliargs.py",
            "Option": "cliopts.py", "Argument": "cliopts.py"}  # fmt: skip
SHIPPED = {"preflight/node/servekit_preflight.py": "shipped to the nodes and run there by "
           "Python 3.8 without servekit, so it cannot import cliargs"}  # fmt: skip


def _emitter_uses(path: Path) -> set[str]:
    """argparse and typer parser-building names a module calls or subclasses."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        targets = [node.func] if isinstance(node, ast.Call) else []
        targets += node.bases if isinstance(node, ast.ClassDef) else []
        for target in targets:
            name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
            owner = target.value if isinstance(target, ast.Attribute) else None
            typer_name = isinstance(owner, ast.Name) and owner.id == "typer"
            if name in ("add_argument", "ArgumentParser") or (typer_name and name in EMITTERS):
                found.add(name)
    return found


def test_one_generator_builds_every_parser() -> None:
    """No parser is spelled by hand: argparse in cliargs, typer in cliopts, nowhere else."""
    elsewhere = [
        f"{path.relative_to(SRC)}: {name}"
        for path in sorted(SRC.rglob("*.py"))
        for name in sorted(_emitter_uses(path))
        if path.relative_to(SRC).as_posix() not in (EMITTERS[name], *SHIPPED)
    ]
    assert not elsewhere, elsewhere
    assert not list(SRC.rglob("sim/cli_main.py"))


@settings(max_examples=150, deadline=None)
@given(argvs(PROXY_FLAGS))
def test_any_servekit_proxy_argv_is_a_config_or_a_one_line_refusal(argv: list[str]) -> None:
    """The typer half, from the same field table: a config, or exit 2 without a traceback."""
    import servekit.proxy.server
    from servekit.cli import app

    seen: list[object] = []
    with mock.patch.object(servekit.proxy.server, "run", seen.append):
        result = CliRunner().invoke(app, ["proxy", *argv])
    if isinstance(result.exception, UsageError):
        _one_line(result.exception)
    else:
        assert result.exception is None or isinstance(result.exception, SystemExit), argv
        assert result.exit_code in (0, 2), result.output
        assert [isinstance(c, ProxyConfig) for c in seen] == (
            [True] if result.exit_code == 0 else []
        )


@pytest.mark.parametrize("argv", [["--kv-transfer-config=--"], ["--kv-transfer-config", "--"]])
def test_a_lone_double_dash_as_a_value_is_a_missing_value(argv: list[str]) -> None:
    """Python 3.11's argparse drops "--" from "--flag=--" and left the option a list."""
    with pytest.raises(UsageError, match="--kv-transfer-config: expected one argument"):
        parse_launch(["/m", *argv])
