"""The options of ``servekit sim`` and ``python -m servekit.sim``: one model, defaults once.

Each field is one flag (``--`` + the name in kebab case); its description is the
help. ``servekit sim`` generates its typer command from this model and ``python
-m servekit.sim`` its argparse parser, both from the one field table
(:mod:`servekit.cliopts`), so the two entry points, the defaults and the option
table in docs/sim.md cannot drift (a test compares all of them); both then run
:func:`run_options`.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any

from pydantic import Field

from servekit.cliopts import argparser, build_options, parse_argv
from servekit.errors import UsageError
from servekit.sim.spec import EndpointSpec, SimSpec, load_spec, spec_from_mapping
from servekit.vocabulary import Role, StrictModel

_EP = EndpointSpec.model_fields  # endpoint defaults are the quick form's defaults


class SimOptions(StrictModel):
    """What to serve, and how fast: a spec file or the quick form of N endpoints."""

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


PROG = "python -m servekit.sim"
LOG_FORMAT = "%(levelname)s %(asctime)s [%(name)s] %(message)s"


def build_parser() -> argparse.ArgumentParser:
    """``python -m servekit.sim``'s parser: :class:`SimOptions`' fields, as typer's command."""
    return argparser(SimOptions, prog=PROG, who="sim")


def parse_options(argv: list[str]) -> SimOptions:
    """``python -m servekit.sim`` flags into :class:`SimOptions` (one UsageError when bad)."""
    return parse_argv(SimOptions, argv, prog=PROG, who="sim")


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


def build_spec(opts: SimOptions) -> SimSpec:
    """``--spec FILE`` or the quick form ``--endpoints N``, never both; ``--speed`` applied."""
    if opts.spec is not None and opts.endpoints is None:
        spec = load_spec(opts.spec)
    elif opts.spec is not None or opts.endpoints is None:
        raise UsageError("sim: give exactly one of --spec FILE or --endpoints N")
    else:
        spec = quick_spec_of(opts)
    return spec if opts.speed is None else spec.at_speed(opts.speed)


def configure_logging() -> None:
    """The simulator logs to stderr, one line per record, as vLLM does."""
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format=LOG_FORMAT, datefmt="%m-%d %H:%M:%S"
    )


def run_options(opts: SimOptions) -> int:
    """Validate the spec, then serve it until SIGTERM/SIGINT (or print it with --check).

    What ``servekit sim`` and ``python -m servekit.sim`` do once their options are parsed.
    """
    spec = build_spec(opts)
    if opts.check:
        print(json.dumps(spec.model_dump(mode="json"), indent=2))
        return 0
    configure_logging()
    from servekit.sim.server import run

    run(spec, ready_file=opts.ready_file)
    return 0
