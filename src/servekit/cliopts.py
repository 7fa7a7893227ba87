"""One options model per command: its fields are the command's options, once.

A command's options (name, type, default, help) are the fields of one pydantic
model or stdlib dataclass, read into one field table
(:class:`~servekit.vocabulary.cliargs.OptionSpec` rows: pydantic fields here,
dataclass fields by :mod:`servekit.vocabulary.cliargs`, which also emits the
argparse parsers of the standalone entry points); :func:`command_from_model`
turns that table into a function typer registers, :func:`parse_argv` parses a
standalone argv with it, and :func:`options_table` gives the Markdown rows the
docs show. So the CLI, the model the code reads and the docs cannot drift: a
test renders all three and compares them.

Field conventions are :mod:`servekit.vocabulary.cliargs`'s (the flag is ``--`` +
the name in kebab case, or what ``flag_of`` makes of it; defaults live in the
model only); a pydantic field sets its metadata in ``json_schema_extra``
(``{"flag": "--x", "short": "-x", "nargs": "+"}``, ``cli``/``flag`` False: off
the command line) and its help is its description; names listed in
``arguments`` become positional arguments. Values are validated by the model,
and a failure becomes one :class:`~servekit.errors.UsageError` naming the flag
(a validator whose message starts with ``--`` names its flag and the fix
itself, and is shown as it is).
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from pydantic import BaseModel, TypeAdapter, ValidationError

from servekit.errors import UsageError, first_error_detail
from servekit.vocabulary import (
    FlagOf,
    OptionSpec,
    build_parser,
    dataclass_options,
    kebab_flag,
    markdown_cell,
    parse_values,
    spec_of,
    value_type,
)

T = TypeVar("T")


def _pydantic_specs(
    model: type[BaseModel], arguments: Sequence[str], flag_of: FlagOf
) -> list[OptionSpec]:
    """The field table of a pydantic model (its options read like a dataclass's)."""
    specs = []
    hints = typing.get_type_hints(model)
    for name, field in model.model_fields.items():
        extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
        required = field.is_required()
        default = None if required else field.get_default(call_default_factory=True)
        spec = spec_of(name, extra, hint=hints[name], default=default,
                       help_text=field.description or "", required=required,
                       arguments=arguments, flag_of=flag_of)  # fmt: skip
        if spec.on_cli:
            specs.append(spec)
    return specs


def option_specs(
    model: type[Any], arguments: Sequence[str] = (), flag_of: FlagOf = kebab_flag
) -> list[OptionSpec]:
    """The options of a pydantic model or a dataclass, in field order."""
    if isinstance(model, type) and issubclass(model, BaseModel):
        return _pydantic_specs(model, arguments, flag_of)
    if dataclasses.is_dataclass(model):
        return dataclass_options(model, arguments, flag_of)
    raise TypeError(f"{model!r} is neither a pydantic model nor a dataclass")


def _cli_type(annotation: Any) -> Any:
    """The type typer parses: tuples of X become lists of X (a repeatable option)."""
    item, repeated = value_type(annotation)
    return list[item] if repeated else item  # type: ignore[valid-type]


def _is_flag(spec: OptionSpec) -> bool:
    return _cli_type(spec.annotation) is bool


def default_text(spec: OptionSpec) -> str:
    """The default as the help and the docs show it."""
    if spec.required:
        return "required"
    if spec.default is None or spec.default == ():
        return "-"
    if isinstance(spec.default, bool):
        return "on" if spec.default else "off"
    if isinstance(spec.default, tuple):
        return ",".join(str(v) for v in spec.default)
    return str(spec.default)


def _declarations(spec: OptionSpec) -> list[str]:
    flag = spec.flag
    if _is_flag(spec) and spec.default is True:
        flag = f"{flag}/--no-{flag.removeprefix('--')}"
    return [flag, *([spec.short] if spec.short else [])]


def _parameter(spec: OptionSpec) -> inspect.Parameter:
    import typer

    cli_type = _cli_type(spec.annotation)
    help_text = spec.help or None
    shown = default_text(spec)
    show: str | bool = shown if shown not in ("-", "required") and not _is_flag(spec) else False
    if spec.argument:
        info: Any = typer.Argument(help=help_text, show_default=show)
    else:
        info = typer.Option(*_declarations(spec), help=help_text, show_default=show)
    if spec.required:
        default: Any = inspect.Parameter.empty
    elif _is_flag(spec) and spec.default is None:
        # A tri-state flag (--quick/--full): None means "the user chose neither".
        default, cli_type = None, bool | None
    elif _is_flag(spec):
        default = bool(spec.default)
    else:
        default, cli_type = None, cli_type | None
    return inspect.Parameter(
        spec.name,
        inspect.Parameter.KEYWORD_ONLY,
        default=default,
        annotation=typing.Annotated[cli_type, info],
    )


def given_values(specs: Sequence[OptionSpec], given: Mapping[str, Any]) -> dict[str, Any]:
    """What the user gave: options left out (None, an unchanged flag) are absent."""
    values = {}
    for spec in specs:
        value = given.get(spec.name)
        if value is None or (_is_flag(spec) and value == spec.default and not spec.required):
            continue
        values[spec.name] = tuple(value) if isinstance(value, list) else value
    return values


def _usage(exc: ValidationError, specs: Sequence[OptionSpec]) -> UsageError:
    """One line naming the flag; a validator's message that starts with a flag is kept whole."""
    first = first_error_detail(exc)
    name = str(first.loc[0]) if first.loc else ""
    flag = next((s.flag for s in specs if s.name == name), name or "(options)")
    msg = first.reason
    if msg.startswith("--"):
        return UsageError(msg)
    if first.kind == "literal_error":
        return UsageError(f"{flag} {first.input!r}: {msg}")
    return UsageError(f"{flag}: {msg}")


def validate_model(model: type[T], values: Mapping[str, Any], specs: Sequence[OptionSpec]) -> T:
    """The model from option values; a bad value is one UsageError naming its flag."""
    try:
        return TypeAdapter(model).validate_python(dict(values))
    except ValidationError as exc:
        raise _usage(exc, specs) from None
    except (TypeError, ValueError) as exc:  # a dataclass's own __post_init__ checks
        raise UsageError(str(exc)) from None


def build_options(
    model: type[T],
    given: Mapping[str, Any],
    arguments: Sequence[str] = (),
    flag_of: FlagOf = kebab_flag,
) -> T:
    """Validate CLI values into the model; a bad value is one UsageError naming its flag."""
    specs = option_specs(model, arguments, flag_of)
    return validate_model(model, given_values(specs, given), specs)


def argparser(model: type[Any], *, prog: str, who: str) -> argparse.ArgumentParser:
    """A standalone entry point's argparse parser: the model's field table, one emitter."""
    return build_parser(option_specs(model), prog=prog, who=who, description=model.__doc__)


def parse_argv(model: type[T], argv: Sequence[str], *, prog: str, who: str) -> T:
    """A standalone entry point's argv into ``model`` (``python -m servekit.sim`` parses so).

    Its flags are the typer command's; bad input is one UsageError (``who: ...`` from
    argparse, or the flag from the model's validation).
    """
    given = parse_values(argparser(model, prog=prog, who=who), argv)
    return validate_model(model, given, option_specs(model))


def spread_greedy(args: Sequence[str], flags: Sequence[str]) -> list[str]:
    """``--f A B --g`` -> ``--f A --f B --g`` for each flag in ``flags`` (argparse's nargs='+')."""
    out: list[str] = []
    current: str | None = None
    for i, arg in enumerate(args):
        if arg == "--":
            return [*out, *args[i:]]
        if arg.startswith("-"):
            name = arg.split("=", 1)[0]
            current = name if name in flags and "=" not in arg else None
            out.append(arg)
            continue
        if current is not None and out[-1] != current:
            out.append(current)
        out.append(arg)
    return out


def command_class(
    specs: Sequence[OptionSpec], preparse: Callable[[list[str]], None] | None = None
) -> type[Any] | None:
    """A typer command class that takes greedy lists and runs ``preparse`` on argv first."""
    greedy = [s.flag for s in specs if s.greedy]
    if not greedy and preparse is None:
        return None
    from typer.core import TyperCommand

    class _Command(TyperCommand):
        def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
            if preparse is not None:
                preparse(list(args))
            return super().parse_args(ctx, spread_greedy(args, greedy))

    return _Command


@dataclasses.dataclass(frozen=True)
class CommandModel:
    """What a generated command was made from: the docs table and the help come from it."""

    model: type[Any]
    arguments: tuple[str, ...] = ()
    flag_of: FlagOf = kebab_flag

    def specs(self) -> list[OptionSpec]:
        return option_specs(self.model, self.arguments, self.flag_of)

    def table(self) -> str:
        return options_table(self.model, self.arguments, self.flag_of)


def command_from_model(
    model: type[T],
    run: Callable[[T], int | None],
    *,
    doc: str,
    arguments: Sequence[str] = (),
    flag_of: FlagOf = kebab_flag,
    build: Callable[[dict[str, Any]], T] | None = None,
) -> Callable[..., None]:
    """A typer-registrable function whose options are the model's fields.

    ``run`` gets the validated model (``build`` makes it from the values given,
    when the model needs more than field validation); its return value is the
    exit code.
    """
    import typer

    specs = option_specs(model, arguments, flag_of)
    ordered = sorted(specs, key=lambda s: not s.argument)

    def make(given: dict[str, Any]) -> T:
        values = given_values(specs, given)
        return build(values) if build is not None else validate_model(model, values, specs)

    def command(**given: Any) -> None:
        code = run(make(given))
        raise typer.Exit(code or 0)

    params = [_parameter(s) for s in ordered]
    command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in params}
    command.__doc__ = doc
    command.__name__ = model.__name__
    command.options_model = CommandModel(model, tuple(arguments), flag_of)  # type: ignore[attr-defined]
    return command


def callback_from_model(
    model: type[T], run: Callable[[T], int | None], *, doc: str
) -> Callable[..., None]:
    """A typer group callback whose options are the model's fields.

    It runs ``run`` only when no subcommand was given (``servekit sim`` serves,
    ``servekit sim serve ...`` runs its subcommand instead).
    """
    import typer

    command = command_from_model(model, run, doc=doc)

    def callback(ctx: typer.Context, **given: Any) -> None:
        if ctx.invoked_subcommand is None:
            command(**given)

    ctx_param = inspect.Parameter(
        "ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context
    )
    params = list(inspect.signature(command).parameters.values())
    callback.__signature__ = inspect.Signature([ctx_param, *params])  # type: ignore[attr-defined]
    callback.__annotations__ = {"ctx": typer.Context, **command.__annotations__}
    callback.__doc__ = command.__doc__
    callback.options_model = command.options_model  # type: ignore[attr-defined]
    return callback


def add_command(
    app: Any,
    name: str,
    model: type[T],
    run: Callable[[T], int | None],
    *,
    doc: str,
    arguments: Sequence[str] = (),
    flag_of: FlagOf = kebab_flag,
    build: Callable[[dict[str, Any]], T] | None = None,
    preparse: Callable[[list[str]], None] | None = None,
    **settings: Any,
) -> None:
    """Register the command generated from ``model`` on a typer app as ``name``."""
    cls = command_class(option_specs(model, arguments, flag_of), preparse)
    if cls is not None:
        settings["cls"] = cls
    app.command(name, **settings)(
        command_from_model(model, run, doc=doc, arguments=arguments, flag_of=flag_of, build=build)
    )


def options_table(
    model: type[Any], arguments: Sequence[str] = (), flag_of: FlagOf = kebab_flag
) -> str:
    """The Markdown option table of a command, as docs/*.md carry it."""
    rows = ["| option | default | what it does |", "|---|---|---|"]
    for spec in option_specs(model, arguments, flag_of):
        if spec.argument:
            name = spec.name.upper()
        else:
            name = ", ".join(f"`{f}`" for f in (spec.flag, *([spec.short] if spec.short else [])))
        rows.append(f"| {name} | {default_text(spec)} | {markdown_cell(spec.help)} |")
    return "\n".join(rows) + "\n"
