"""Command groups of the ``servekit`` CLI, one module per capability.

A module here defines ``register(app)`` and keeps its imports of the capability
inside the command bodies, so the CLI starts fast whatever is installed.
"""

from __future__ import annotations

import importlib

import typer

# Order is the order in ``servekit --help``.
GROUPS = (
    "catalog",
    "render",
    "preflight",
    "local",
    "sim",
    "proxy",
    "accept",
    "bench",
    "advise",
    "kit",
    "report",
    "deployment",
)


def register_all(app: typer.Typer) -> None:
    """Attach every command group that exists in this build to ``app``."""
    for group in GROUPS:
        try:
            module = importlib.import_module(f"servekit.commands.{group}")
        except ModuleNotFoundError as exc:
            if exc.name == f"servekit.commands.{group}":
                continue
            raise
        module.register(app)
