"""Run a layout's Plan on this machine: real vLLM on the CPU or the simulator.

Modules, in the order a run uses them:

- ``tinymodel``: the deterministic tiny Llama the CPU layouts serve.
- ``preflight``: checks that turn bad input into one line and exit 2.
- ``ports``: planned ports mapped to free local ones, or proven free.
- ``prepare``: layout -> Plan (loopback, port map, this interpreter) -> RunSpec,
  recorded in the run directory (``rundir``) before anything starts.
- ``runspec`` / ``simrun``: what to launch and how to know it is ready.
- ``supervisor``: start, readiness (``readiness``), watch, teardown (``procs``,
  ``proctree``), with ``state.json`` (``state``) kept current.
- ``control`` / ``daemon``: ``up`` (foreground or detached) and ``down``;
  ``observe``: ``status`` and ``logs``; ``display``: the rich tables.
- ``demo``: ``servekit demo``, PD answers checked against a single instance.

This package is imported lazily by the CLI; nothing here is loaded by
``servekit --help``.
"""

from typing import TYPE_CHECKING

from servekit.lazyface import lazy_face

if TYPE_CHECKING:
    from servekit.local.control import EXIT_INTERRUPTED, down, up_detached, up_foreground
    from servekit.local.demo import run_demo
    from servekit.local.observe import logs, status
    from servekit.local.options import (
        DemoOptions,
        DownOptions,
        LogsOptions,
        StatusOptions,
        TinyModelOptions,
        UpOptions,
    )
    from servekit.local.prepare import prepare_run
    from servekit.local.simrun import layout_sim_spec
    from servekit.local.tinymodel.build import build_tiny_model
    from servekit.local.tinymodel.ondemand import check_out

__getattr__, __dir__ = lazy_face(__name__)
__all__ = [
    "EXIT_INTERRUPTED",
    "DemoOptions",
    "DownOptions",
    "LogsOptions",
    "StatusOptions",
    "TinyModelOptions",
    "UpOptions",
    "build_tiny_model",
    "check_out",
    "down",
    "layout_sim_spec",
    "logs",
    "prepare_run",
    "run_demo",
    "status",
    "up_detached",
    "up_foreground",
]
