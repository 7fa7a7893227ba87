"""``python -m servekit.sim``: the simulator without the CLI's imports (starts faster).

Same flags as ``servekit sim``; used by ``servekit up NAME --engine sim``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from servekit.errors import UsageError
from servekit.sim.cli_main import SimArgs, main


def _parse(argv: list[str]) -> SimArgs:
    p = argparse.ArgumentParser(prog="python -m servekit.sim", description=__doc__)
    p.add_argument("--spec", type=Path, help="a SimSpec file (.json, .yaml)")
    p.add_argument("--endpoints", type=int, help="quick form: N endpoints")
    p.add_argument("--role", default="mixed", help="quick form: mixed, prefill or decode")
    p.add_argument("--base-port", type=int, default=8100, help="quick form: first port")
    p.add_argument("--model", default="sim-model", help="quick form: served model name")
    p.add_argument("--profile", default="zero", help="zero, cpu-tiny or a3-dsv4-flash")
    p.add_argument("--host", default="127.0.0.1", help="quick form: listen address")
    p.add_argument("--max-model-len", type=int, default=32768)
    p.add_argument("--admin-port", type=int, help="quick form: admin server port")
    p.add_argument("--time-scale", type=float, help="wall s per simulated s (default 1)")
    p.add_argument("--ready-file", type=Path, help="write the bound URLs here once listening")
    p.add_argument("--check", action="store_true", help="validate and print the spec")
    ns = p.parse_args(argv)
    return SimArgs(**vars(ns))


def entry(argv: list[str] | None = None) -> int:
    """Run with ``argv``; a UsageError is one line on stderr and exit code 2."""
    try:
        return main(_parse(sys.argv[1:] if argv is None else argv))
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(entry())
