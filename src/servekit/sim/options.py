"""The options of ``servekit sim`` and ``python -m servekit.sim``: one model, defaults once.

Each field is one flag (``--`` + the name in kebab case); its description is the
help. ``servekit sim`` generates its typer command from this model
(:mod:`servekit.cliopts`) and ``python -m servekit.sim`` its argparse parser
(:func:`build_parser`), so the two entry points, the defaults and the option
table in docs/sim.md cannot drift (a test compares all of them).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, NoReturn

from pydantic import BaseModel, ConfigDict, Field

from servekit.cliopts import build_options, option_specs
from servekit.errors import UsageError
from servekit.sim.spec import EndpointSpec, SimSpec, spec_from_mapping
from servekit.vocabulary import Role

_EP = EndpointSpec.model_fields  # endpoint defaults are the quick form's defaults


class SimOptions(BaseModel):
    """What to serve, and how fast: a spec file or the quick form of N endpoints."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    spec: Path | None = Field(None, description="a SimSpec file (.json, .yaml)")
    endpoints: int | None = Field(None, description="quick form: N endpoints of one role")
    role: Role = Field(_EP["role"].default, description="quick form: mixed, prefill or decode")
    base_port: int = Field(8100, description="quick form: first port (0: free ports)")
    model: str = Field(
        _EP["served_model_name"].default, description="quick form: served model name"
    )
    profile: str = Field(
        _EP["profile"].default, description="quick form: zero, cpu-tiny or a3-dsv4-flash"
    )
    host: str = Field(_EP["host"].default, description="quick form: listen address")
    max_model_len: int = Field(
        _EP["max_model_len"].default, description="quick form: context length in tokens"
    )
    admin_port: int | None = Field(None, description="quick form: admin server port")
    speed: float | None = Field(
        None,
        gt=0,
        description="virtual seconds per wall second (50: 50x faster); overrides the spec's "
        "time_scale; default 1",
    )
    ready_file: Path | None = Field(
        None, description="write the bound URLs here (JSON) once listening"
    )
    check: bool = Field(False, description="validate and print the spec, serve nothing")


class _Parser(argparse.ArgumentParser):
    """argparse that raises UsageError instead of printing usage and exiting 2 itself."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"sim: {message}; see --help")


def build_parser(
    model: type[BaseModel] = SimOptions, prog: str = "python -m servekit.sim"
) -> argparse.ArgumentParser:
    """An argparse parser whose flags are ``model``'s fields (values validated by the model)."""
    p = _Parser(prog=prog, description=model.__doc__, allow_abbrev=False)
    for spec in option_specs(model):
        kw: dict[str, Any] = {"dest": spec.name, "help": spec.help, "default": None}
        if spec.annotation is bool:
            p.add_argument(spec.flag, action="store_true", **kw)
        else:
            p.add_argument(spec.flag, metavar=spec.name.upper(), **kw)
    return p


def parse_options(argv: list[str]) -> SimOptions:
    """``python -m servekit.sim`` flags into :class:`SimOptions` (one UsageError when bad)."""
    given = vars(build_parser().parse_args(argv))
    return build_options(SimOptions, {k: v for k, v in given.items() if v not in (None, False)})


def quick_spec(endpoints: int, **fields: Any) -> SimSpec:
    """N endpoints of one role on consecutive ports (``servekit sim --endpoints N``).

    ``fields`` are :class:`SimOptions` fields (``role``, ``base_port``, ``model``...).
    """
    return quick_spec_of(build_options(SimOptions, {"endpoints": endpoints, **fields}))


def quick_spec_of(opts: SimOptions) -> SimSpec:
    """The quick form of ``opts`` as a spec."""
    n = opts.endpoints or 0
    if n < 1:
        raise UsageError("--endpoints: must be at least 1")
    if opts.base_port != 0 and opts.base_port + n - 1 > 65535:
        raise UsageError("--base-port: the ports run past 65535; pick a lower base port")
    eps = [
        {
            "name": f"{opts.role}-{i}",
            "host": opts.host,
            "port": opts.base_port + i if opts.base_port else 0,
            "role": opts.role,
            "engine_id": opts.role,
            "dp_rank": i,
            "dp_size": n,
            "served_model_name": opts.model,
            "max_model_len": opts.max_model_len,
            "profile": opts.profile,
            "guard": opts.role == "decode",
        }
        for i in range(n)
    ]
    admin = None if opts.admin_port is None else {"host": opts.host, "port": opts.admin_port}
    return spec_from_mapping({"endpoints": eps, "admin": admin}, where="sim options")
