"""``servekit proxy``: the command generated from :class:`~servekit.proxy.config.ProxyConfig`.

The same dataclass's field table generates ``python -m servekit.proxy``'s
argparse parser (:mod:`servekit.vocabulary.cliargs`), and both end in
:func:`~servekit.proxy.config.config_from_values`, so the two entry points take
the same flags (``--prefill A B`` as well as ``--prefill A --prefill B``),
defaults and checks. ``servekit.proxy.config`` is standard library only,
so importing it here costs ``servekit --help`` nothing.
"""

from __future__ import annotations

import typer

from servekit.cliopts import add_command
from servekit.proxy import ProxyConfig, config_from_values, flag_of, refuse_keys_in_argv


def _run(config: ProxyConfig) -> int:
    from servekit.proxy import run

    run(config)
    return 0


def register(app: typer.Typer) -> None:
    """Attach the ``proxy`` command."""
    add_command(
        app,
        "proxy",
        ProxyConfig,
        _run,
        doc="PD / replica router with health checks, metrics and the decode guard.",
        flag_of=flag_of,
        build=config_from_values,
        preparse=refuse_keys_in_argv,
        no_args_is_help=True,
        context_settings={"help_option_names": ["-h", "--help"]},
    )
