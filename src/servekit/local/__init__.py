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
