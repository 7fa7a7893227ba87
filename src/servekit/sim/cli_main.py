"""What ``servekit sim`` does once its flags are parsed (the command module holds no logic)."""

from __future__ import annotations

import json
import logging
import sys
from dataclasses import dataclass
from pathlib import Path

from servekit.errors import UsageError
from servekit.sim.spec import Role, SimSpec, load_spec, quick_spec

ROLES: tuple[Role, ...] = ("mixed", "prefill", "decode")


@dataclass(frozen=True)
class SimArgs:
    """The flags of ``servekit sim``."""

    spec: Path | None = None
    endpoints: int | None = None
    role: str = "mixed"
    base_port: int = 8100
    model: str = "sim-model"
    profile: str = "zero"
    host: str = "127.0.0.1"
    max_model_len: int = 32768
    admin_port: int | None = None
    time_scale: float | None = None
    ready_file: Path | None = None
    check: bool = False


def build_spec(args: SimArgs) -> SimSpec:
    """``--spec FILE`` or the quick form ``--endpoints N``, never both."""
    if args.time_scale is not None and args.time_scale <= 0:
        raise UsageError("--time-scale: must be above 0 (1 = real time, 0.1 = 10x faster)")
    if args.spec is not None and args.endpoints is None:
        spec = load_spec(args.spec)
        if args.time_scale is None:
            return spec
        return spec.model_copy(update={"time_scale": args.time_scale})
    if args.spec is not None or args.endpoints is None:
        raise UsageError("sim: give exactly one of --spec FILE or --endpoints N")
    role = next((r for r in ROLES if r == args.role), None)
    if role is None:
        raise UsageError(f"--role {args.role}: choose one of {', '.join(ROLES)}")
    return quick_spec(
        args.endpoints,
        role=role,
        base_port=args.base_port,
        model=args.model,
        profile=args.profile,
        host=args.host,
        max_model_len=args.max_model_len,
        admin_port=args.admin_port,
        time_scale=1.0 if args.time_scale is None else args.time_scale,
    )


def main(args: SimArgs) -> int:
    """Validate the spec, then serve it until SIGTERM/SIGINT (or print it with --check)."""
    spec = build_spec(args)
    if args.check:
        print(json.dumps(spec.model_dump(mode="json"), indent=2))
        return 0
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(levelname)s %(asctime)s [%(name)s] %(message)s",
        datefmt="%m-%d %H:%M:%S",
    )
    from servekit.sim.server import run

    run(spec, ready_file=args.ready_file)
    return 0
