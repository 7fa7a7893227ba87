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
    from servekit.local.companions import engine_env as engine_env, find_broken as find_broken
    from servekit.local.control import (
        EXIT_INTERRUPTED as EXIT_INTERRUPTED,
        down as down,
        up_detached as up_detached,
        up_foreground as up_foreground,
    )
    from servekit.local.demo import run_demo as run_demo
    from servekit.local.observe import logs as logs, status as status
    from servekit.local.options import (
        DemoOptions as DemoOptions,
        DownOptions as DownOptions,
        LogsOptions as LogsOptions,
        StatusOptions as StatusOptions,
        TinyModelOptions as TinyModelOptions,
        UpOptions as UpOptions,
    )
    from servekit.local.ports import port_is_free as port_is_free
    from servekit.local.prepare import prepare_run as prepare_run
    from servekit.local.simrun import layout_sim_spec as layout_sim_spec
    from servekit.local.tinymodel.build import build_tiny_model as build_tiny_model
    from servekit.local.tinymodel.ondemand import check_out as check_out

__getattr__, __dir__ = lazy_face(__name__)
