"""What ``servekit sim`` and ``python -m servekit.sim`` do once their options are parsed."""

from __future__ import annotations

import json
import logging
import sys

from servekit.errors import UsageError
from servekit.sim.options import SimOptions, quick_spec_of
from servekit.sim.spec import SimSpec, load_spec

LOG_FORMAT = "%(levelname)s %(asctime)s [%(name)s] %(message)s"


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


def main(opts: SimOptions) -> int:
    """Validate the spec, then serve it until SIGTERM/SIGINT (or print it with --check)."""
    spec = build_spec(opts)
    if opts.check:
        print(json.dumps(spec.model_dump(mode="json"), indent=2))
        return 0
    configure_logging()
    from servekit.sim.server import run

    run(spec, ready_file=opts.ready_file)
    return 0
