"""``python -m servekit.sim``: the simulator without the CLI's imports (starts faster).

``python -m servekit.sim [options]`` takes the options of ``servekit sim``
(:class:`servekit.sim.options.SimOptions`); ``python -m servekit.sim serve MODEL
[vllm serve flags]`` is the drop-in ``vllm serve`` (:mod:`servekit.sim.vllmserve`).
Both parse through the one generator (:mod:`servekit.vocabulary.cliargs`).
"""

from __future__ import annotations

import sys

from servekit.errors import UsageError


def entry(argv: list[str] | None = None) -> int:
    """Run with ``argv``; a UsageError is one line on stderr and exit code 2."""
    args = sys.argv[1:] if argv is None else argv
    try:
        if args[:1] == ["serve"]:
            from servekit.sim.vllmserve import serve_main

            return serve_main(args[1:])
        from servekit.sim.options import parse_options, run_options

        return run_options(parse_options(args))
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(entry())
