"""Command lines from a field table: one row per option, one argparse emitter, one checker.

Every servekit command line is generated from the fields of one model: a
pydantic model (read by :func:`servekit.cliopts.option_specs`) or a stdlib
dataclass (read here, by :func:`dataclass_options`, whose field metadata says
``help``, ``flag``, ``short``, ``choices``, ``allowed``, ``ge``/``gt``/``le``,
``metavar`` and ``nargs="+"``). Both readers give the same rows
(:class:`OptionSpec`); typer commands are emitted from them by
:mod:`servekit.cliopts`, and the standalone entry points (``python -m
servekit.proxy``, the proxy zipapp, ``python -m servekit.sim``, the drop-in
``vllm serve``) by :func:`build_parser`. Standard library only: the proxy's
zipapp runs on engine images without pydantic or typer, and bundles this module.

Option conventions (the typer half follows the same ones): only what the user
gave is in the parsed values (defaults live in the model); ``bool`` is a switch,
``bool | None`` (or a ``True`` default) a ``--x/--no-x`` pair; ``tuple[X, ...]``
repeats the flag, and with ``nargs="+"`` also takes several values after one
flag; ``int`` and ``float`` are converted, anything else is passed on as text.
Bad input is one :class:`~servekit.errors.UsageError` line naming the flag.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NoReturn, get_args, get_origin

from servekit.errors import UsageError

FlagOf = Callable[[str], str]


@dataclasses.dataclass(frozen=True)
class OptionSpec:
    """One option, as the command line, the help and the docs show it.

    ``choices`` is what the command line offers, ``allowed`` what the value may be
    (a superset the code may set, such as the proxy's ``replica`` mode); ``bounds``
    maps ``ge``/``gt``/``le`` to their limits.
    """

    name: str
    flag: str
    annotation: Any
    default: Any
    help: str
    required: bool
    argument: bool
    short: str | None = None
    greedy: bool = False
    on_cli: bool = True
    choices: tuple[str, ...] | None = None
    allowed: tuple[str, ...] | None = None
    bounds: tuple[tuple[str, Any], ...] = ()
    metavar: str | None = None


def option(default: Any, help: str, **meta: Any) -> Any:
    """A dataclass field that is an option: its default, its help and what the flag accepts.

    ``meta`` keys: ``choices`` (what the command line offers), ``allowed`` (what the
    value may be, when wider), ``ge``/``gt``/``le`` (bounds), ``metavar``, ``short``,
    ``nargs="+"`` (several values after one flag), ``flag`` (its own flag, or False:
    not on the command line), ``repr=False`` (a secret).
    """
    return dataclasses.field(
        default=default, metadata={"help": help, **meta}, repr=meta.get("repr", True)
    )


def kebab_flag(name: str) -> str:
    """The default flag of a field: ``--`` + its name in kebab case."""
    return "--" + name.replace("_", "-")


def spec_of(
    name: str,
    meta: Mapping[str, Any],
    *,
    hint: Any,
    default: Any,
    help_text: str,
    required: bool,
    arguments: Sequence[str] = (),
    flag_of: FlagOf = kebab_flag,
) -> OptionSpec:
    """The row of one field from its metadata (dataclass metadata or json_schema_extra)."""
    flag = meta.get("flag")
    choices = meta.get("choices")
    allowed = meta.get("allowed", choices)
    return OptionSpec(
        name=name,
        flag=flag if isinstance(flag, str) else flag_of(name),
        annotation=hint,
        default=default,
        help=help_text,
        required=required,
        argument=name in arguments,
        short=meta.get("short"),
        greedy=meta.get("nargs") == "+",
        on_cli=meta.get("cli") is not False and meta.get("flag") is not False,
        choices=tuple(choices) if choices is not None else None,
        allowed=tuple(allowed) if allowed is not None else None,
        bounds=tuple((k, meta[k]) for k in ("ge", "gt", "le") if k in meta),
        metavar=meta.get("metavar"),
    )


def _dataclass_default(field: dataclasses.Field[Any]) -> tuple[bool, Any]:
    """(required, default) of a dataclass field."""
    if field.default is not dataclasses.MISSING:
        return False, field.default
    if field.default_factory is not dataclasses.MISSING:
        return False, field.default_factory()
    return True, None


_TABLES: dict[tuple[type[Any], FlagOf], tuple[OptionSpec, ...]] = {}


def dataclass_table(model: type[Any], flag_of: FlagOf = kebab_flag) -> tuple[OptionSpec, ...]:
    """Every field of a dataclass as a row, those off the command line too.

    Cached: a dataclass model checks its fields against it on every construction.
    """
    key = (model, flag_of)
    if key not in _TABLES:
        _TABLES[key] = _read_dataclass(model, flag_of)
    return _TABLES[key]


def _read_dataclass(model: type[Any], flag_of: FlagOf) -> tuple[OptionSpec, ...]:
    hints = typing.get_type_hints(model)
    rows = []
    for field in dataclasses.fields(model):
        meta = field.metadata
        required, default = _dataclass_default(field)
        help_text = str(meta.get("help", ""))
        if meta.get("choices"):
            help_text += f" ({', '.join(meta['choices'])})"
        rows.append(
            spec_of(field.name, meta, hint=hints[field.name], default=default,
                    help_text=help_text, required=required, flag_of=flag_of)
        )  # fmt: skip
    return tuple(rows)


def dataclass_options(
    model: type[Any], arguments: Sequence[str] = (), flag_of: FlagOf = kebab_flag
) -> list[OptionSpec]:
    """The options of a dataclass: its fields on the command line, in field order."""
    rows = [s for s in dataclass_table(model, flag_of) if s.on_cli]
    return [dataclasses.replace(s, argument=True) if s.name in arguments else s for s in rows]


def value_type(annotation: Any) -> tuple[Any, bool]:
    """(type of one value, repeated?): ``X | None`` is X, ``tuple[X, ...]`` X repeated;
    a ``Literal`` or a union of several types is text (the model checks it)."""
    origin = get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in get_args(annotation) if a is not type(None)]
        return value_type(inner[0]) if len(inner) == 1 else (str, False)
    if origin is tuple:
        args = [a for a in get_args(annotation) if a is not Ellipsis]
        return (value_type(args[0])[0] if args else str), True
    return (str if origin is typing.Literal else annotation), False


class UsageParser(argparse.ArgumentParser):
    """argparse that raises one UsageError line instead of printing usage and exiting 2."""

    def __init__(self, *, who: str, hint: str = "; see --help", **kw: Any) -> None:
        super().__init__(**{"allow_abbrev": False, **kw})
        self.who = who
        self.hint = hint

    def error(self, message: str) -> NoReturn:
        # argparse quotes argv as given; UsageError keeps a newline in it on the one line.
        raise UsageError(f"{self.who}: {message}{self.hint}")

    def _get_values(self, action: argparse.Action, arg_strings: list[str]) -> Any:
        # Python 3.11's argparse drops "--" from an option's own value ("--flag=--"),
        # which left a one-value option holding an empty list: a missing value.
        if action.option_strings and action.nargs is None and arg_strings == ["--"]:
            self.error(f"argument {'/'.join(action.option_strings)}: expected one argument")
        return super()._get_values(action, arg_strings)


def _show_default(spec: OptionSpec) -> str:
    if spec.default in ((), None) or spec.required:
        return spec.help
    return f"{spec.help} (default {spec.default})"


def _add(p: argparse.ArgumentParser, spec: OptionSpec) -> None:
    names = [spec.flag, *([spec.short] if spec.short else [])]
    kw: dict[str, Any] = {"dest": spec.name, "default": argparse.SUPPRESS}
    item, repeated = value_type(spec.annotation)
    if item is bool and not repeated:
        tri = spec.default is None or spec.default is True
        kw["action"] = argparse.BooleanOptionalAction if tri else "store_true"
        p.add_argument(*names, help=spec.help, **kw)
        return
    if repeated:
        # --prefill A B and --prefill A --prefill B alike; without nargs="+": one per flag
        kw["action"] = "extend" if spec.greedy else "append"
        if spec.greedy:
            kw["nargs"] = "+"
    elif spec.choices is not None:
        kw["choices"] = spec.choices
    if item in (int, float):
        kw["type"] = item
        kw["metavar"] = "SECONDS" if spec.name.endswith("_s") else "N"
    if spec.metavar is not None:
        kw["metavar"] = spec.metavar
    p.add_argument(*names, help=_show_default(spec), **kw)


def build_parser(
    specs: Sequence[OptionSpec],
    *,
    prog: str,
    who: str,
    description: str | None = None,
    hint: str = "; see --help",
    add_help: bool = True,
) -> argparse.ArgumentParser:
    """An argparse parser whose flags are ``specs``; errors are ``who: ...`` UsageErrors.

    The parsed namespace holds only the options given, under their field names.
    """
    p = UsageParser(prog=prog, description=description, who=who, hint=hint, add_help=add_help)
    for spec in specs:
        if spec.on_cli and not spec.argument:
            _add(p, spec)
    return p


def _as_given(ns: argparse.Namespace) -> dict[str, Any]:
    return {k: tuple(v) if isinstance(v, list) else v for k, v in vars(ns).items()}


def parse_values(parser: argparse.ArgumentParser, argv: Sequence[str]) -> dict[str, Any]:
    """Field name -> value of the options given (repeated ones as tuples, as the model has them)."""
    return _as_given(parser.parse_args(list(argv)))


def parse_known_values(
    parser: argparse.ArgumentParser, argv: Sequence[str]
) -> tuple[dict[str, Any], list[str]]:
    """:func:`parse_values`, and the tokens no option took (``vllm serve`` records them)."""
    ns, rest = parser.parse_known_args(list(argv))
    return _as_given(ns), rest


def _bad(spec: OptionSpec, message: str) -> NoReturn:
    raise UsageError(f"{spec.flag}: {message}")


def _check_type(spec: OptionSpec, kind: Any, value: Any) -> None:
    if kind is bool and not isinstance(value, bool):
        _bad(spec, f"expected true or false, got {value!r}")
    if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
        _bad(spec, f"expected a whole number, got {value!r}")
    if kind is float and (
        isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value)
    ):
        _bad(spec, f"expected a finite number, got {value!r}")
    if kind is str and not isinstance(value, str):
        _bad(spec, f"expected text, got {value!r}")
    if kind is tuple and not (isinstance(value, tuple) and all(isinstance(v, str) for v in value)):
        _bad(spec, f"expected a tuple of text, got {value!r}")


_BOUNDS: dict[str, tuple[Callable[[Any, Any], bool], str]] = {
    "ge": (lambda v, b: v < b, "must be at least"),
    "gt": (lambda v, b: v <= b, "must be above"),
    "le": (lambda v, b: v > b, "must be at most"),
}


def check_value(spec: OptionSpec, value: Any) -> None:
    """One value's type, choices and bounds (a dataclass model checks its fields with this).

    The first problem is one UsageError line naming the flag.
    """
    if value is None and type(None) in get_args(spec.annotation):
        return
    item, repeated = value_type(spec.annotation)
    _check_type(spec, tuple if repeated else item, value)
    if spec.allowed is not None and value not in spec.allowed:
        _bad(spec, f"pick one of {', '.join(spec.allowed)} (got {value!r})")
    for key, bound in spec.bounds:
        failed, words = _BOUNDS[key]
        if failed(value, bound):
            _bad(spec, f"{words} {bound} (got {value})")


def check_fields(obj: Any, flag_of: FlagOf = kebab_flag) -> None:
    """Check every field of a dataclass instance against its row (for ``__post_init__``)."""
    for spec in dataclass_table(type(obj), flag_of):
        check_value(spec, getattr(obj, spec.name))
