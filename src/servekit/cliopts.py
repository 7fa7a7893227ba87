"""One options model per command: its fields are the command's options, once.

A command's options (name, type, default, help) are the fields of one pydantic
model or stdlib dataclass; :func:`command_from_model` turns that model into a
function typer registers, and :func:`options_table` into the Markdown rows the
docs show. So the CLI, the model the code reads and the docs cannot drift: a
test renders all three and compares them.

Field conventions: the flag is ``--`` + the name in kebab case (a field may set
``json_schema_extra={"flag": "--x"}`` or dataclass metadata ``flag``); the help
is the field's description (dataclass metadata ``help``); names listed in
``arguments`` become positional arguments; ``tuple[X, ...]`` fields take the
option several times. Values are validated by the model itself, and a failure
becomes one :class:`~servekit.errors.UsageError` naming the flag.
"""

from __future__ import annotations

import dataclasses
import inspect
import types
import typing
from collections.abc import Callable, Sequence
from typing import Any, TypeVar, get_args, get_origin

from pydantic import BaseModel, TypeAdapter, ValidationError

from servekit.errors import UsageError

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class OptionSpec:
    """One option as the CLI and the docs show it."""

    name: str
    flag: str
    annotation: Any
    default: Any
    help: str
    required: bool
    argument: bool


def _flag(name: str, extra: dict[str, Any]) -> str:
    return str(extra.get("flag") or "--" + name.replace("_", "-"))


def _pydantic_specs(model: type[BaseModel], arguments: Sequence[str]) -> list[OptionSpec]:
    specs = []
    hints = typing.get_type_hints(model)
    for name, field in model.model_fields.items():
        extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
        if extra.get("cli") is False:
            continue
        required = field.is_required()
        specs.append(
            OptionSpec(
                name=name,
                flag=_flag(name, extra),
                annotation=hints[name],
                default=None if required else field.get_default(call_default_factory=True),
                help=field.description or "",
                required=required,
                argument=name in arguments,
            )
        )
    return specs


def _dataclass_specs(model: type[Any], arguments: Sequence[str]) -> list[OptionSpec]:
    specs = []
    hints = typing.get_type_hints(model)
    for field in dataclasses.fields(model):
        meta = dict(field.metadata)
        if meta.get("cli") is False:
            continue
        required = (
            field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING
        )
        if field.default is not dataclasses.MISSING:
            default: Any = field.default
        elif field.default_factory is not dataclasses.MISSING:
            default = field.default_factory()
        else:
            default = None
        specs.append(
            OptionSpec(
                name=field.name,
                flag=_flag(field.name, meta),
                annotation=hints[field.name],
                default=default,
                help=str(meta.get("help", "")),
                required=required,
                argument=field.name in arguments,
            )
        )
    return specs


def option_specs(model: type[Any], arguments: Sequence[str] = ()) -> list[OptionSpec]:
    """The options of a pydantic model or a dataclass, in field order."""
    if isinstance(model, type) and issubclass(model, BaseModel):
        return _pydantic_specs(model, arguments)
    if dataclasses.is_dataclass(model):
        return _dataclass_specs(model, arguments)
    raise TypeError(f"{model!r} is neither a pydantic model nor a dataclass")


def _cli_type(annotation: Any) -> Any:
    """The type typer parses: tuples of X become lists of X (a repeatable option)."""
    origin = get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in get_args(annotation) if a is not type(None)]
        if len(inner) == 1:
            return _cli_type(inner[0]) | None
        return str
    if origin is tuple:
        args = [a for a in get_args(annotation) if a is not Ellipsis]
        return list[_cli_type(args[0]) if args else str]  # type: ignore[misc]
    if origin is typing.Literal:
        return str
    return annotation


def _cli_default(spec: OptionSpec) -> Any:
    if isinstance(spec.default, tuple):
        return list(spec.default) or None
    return spec.default


def _parameter(spec: OptionSpec) -> inspect.Parameter:
    import typer

    cli_type = _cli_type(spec.annotation)
    help_text = spec.help or None
    if spec.argument:
        info: Any = typer.Argument(help=help_text, show_default=not spec.required)
    else:
        info = typer.Option(spec.flag, help=help_text)
    default = inspect.Parameter.empty if spec.required else _cli_default(spec)
    return inspect.Parameter(
        spec.name,
        inspect.Parameter.KEYWORD_ONLY,
        default=default,
        annotation=typing.Annotated[cli_type, info],
    )


def _model_values(specs: Sequence[OptionSpec], given: dict[str, Any]) -> dict[str, Any]:
    values = {}
    for spec in specs:
        value = given.get(spec.name)
        if value is None and not spec.required:
            continue
        values[spec.name] = tuple(value) if isinstance(value, list) else value
    return values


def _usage(exc: ValidationError, specs: Sequence[OptionSpec]) -> UsageError:
    first = exc.errors()[0]
    name = str(first["loc"][0]) if first["loc"] else ""
    flag = next((s.flag for s in specs if s.name == name), name or "(options)")
    msg = first["msg"].removeprefix("Value error, ")
    return UsageError(f"{flag}: {msg}")


def build_options(model: type[T], given: dict[str, Any], arguments: Sequence[str] = ()) -> T:
    """Validate CLI values into the model; a bad value is one UsageError naming its flag."""
    specs = option_specs(model, arguments)
    values = _model_values(specs, given)
    try:
        return TypeAdapter(model).validate_python(values)
    except ValidationError as exc:
        raise _usage(exc, specs) from None
    except (TypeError, ValueError) as exc:  # a dataclass's own __post_init__ checks
        raise UsageError(str(exc)) from None


def command_from_model(
    model: type[T],
    run: Callable[[T], int | None],
    *,
    doc: str,
    arguments: Sequence[str] = (),
) -> Callable[..., None]:
    """A typer-registrable function whose options are the model's fields.

    ``run`` gets the validated model; its return value is the exit code.
    """
    import typer

    specs = option_specs(model, arguments)
    ordered = sorted(specs, key=lambda s: not s.argument)

    def command(**given: Any) -> None:
        code = run(build_options(model, given, arguments))
        raise typer.Exit(code or 0)

    params = [_parameter(s) for s in ordered]
    command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in params}
    command.__doc__ = doc
    command.__name__ = model.__name__
    return command


def _default_text(spec: OptionSpec) -> str:
    if spec.required:
        return "required"
    if spec.default is None or spec.default == ():
        return "-"
    if isinstance(spec.default, bool):
        return "on" if spec.default else "off"
    if isinstance(spec.default, tuple):
        return ",".join(str(v) for v in spec.default)
    return str(spec.default)


def options_table(model: type[Any], arguments: Sequence[str] = ()) -> str:
    """The Markdown option table of a command, as docs/*.md carry it."""
    rows = ["| option | default | what it does |", "|---|---|---|"]
    for spec in option_specs(model, arguments):
        name = spec.name.upper() if spec.argument else f"`{spec.flag}`"
        rows.append(f"| {name} | {_default_text(spec)} | {spec.help} |")
    return "\n".join(rows) + "\n"
