"""``servekit proxy``: the same flags and entry as ``python -m servekit.proxy``.

The flags are parsed by :func:`servekit.proxy.config.parse_args` alone, so the
two entry points cannot drift; ``servekit proxy --help`` prints that parser's help.
"""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Attach the ``proxy`` command."""

    @app.command(
        "proxy",
        add_help_option=False,
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    )
    def proxy(ctx: typer.Context) -> None:
        """PD / replica router with health checks, metrics and the decode guard (--help)."""
        from servekit.proxy.config import build_parser, parse_args
        from servekit.proxy.server import run

        if not ctx.args or "--help" in ctx.args or "-h" in ctx.args:
            build_parser().print_help()
            return
        run(parse_args(list(ctx.args)))
