"""Looking at runs: ``servekit status [--json]`` (live health per process) and ``servekit logs``.

Both read the run directories only (``state.json``, ``launch.json``, ``logs/``)
in every root :func:`servekit.deployment.run_roots` names (the per-user state
folder, and the current folder's ``.servekit/runs``); neither touches the
processes. ``status`` tells a run whose supervisor was killed from a live one:
its phase becomes ``unsupervised`` (processes left running) or ``dead``.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path

from rich.console import Console

from servekit.catalog import LayoutName
from servekit.deployment import run_dirs_of, run_roots
from servekit.errors import UsageError
from servekit.local import procs
from servekit.local.display import view_table
from servekit.local.options import LogsOptions
from servekit.local.rundir import RunDir
from servekit.local.runview import RunView, run_view
from servekit.local.state import state_or_why
from servekit.logscan import open_log

POLL_S = 0.5
PROCESS_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def check_layout_name(name: str) -> str:
    """A layout name as ``hardware/name`` (or ``hardware/model/topology``); else exit 2."""
    try:
        LayoutName.parse(name)
    except ValueError:
        raise UsageError(
            f"{name!r} is not a layout name; give it as hardware/name, e.g. local/1p1d"
        ) from None
    return name


def names_of_one_layout(name: str, catalog: Path | str | None = None) -> list[str]:
    """``name``, the layout it is an alias of, and that layout's other aliases.

    A run is recorded under the name ``up`` was given; ``down``, ``status`` and
    ``logs`` find it by any name of the same layout, and ``up`` refuses to start
    the layout twice under two names.
    """
    from servekit.catalog import aliases_of, canonical_name, resolve_catalog

    try:
        root = resolve_catalog(catalog)
        real = canonical_name(name, root)
        names = [name, real, *aliases_of(real, root)]
    except UsageError:  # no readable catalog: the name alone
        names = [name]
    return list(dict.fromkeys(names))


def runs_of(name: str | None) -> list[RunDir]:
    """The run directories of ``name`` (or of every layout), in every root that has them."""
    if name is not None:
        names = names_of_one_layout(check_layout_name(name))
        return [RunDir(d) for n in names for d in run_dirs_of(n)]
    found = [p.parent for root in run_roots() for p in sorted(root.glob("*/state.json"))]
    return [RunDir(d) for d in found]


def collect(name: str | None) -> tuple[list[RunView], list[tuple[RunDir, str]]]:
    """Every recorded run of ``name`` (or every run) as it is now, and the runs whose
    state.json exists but cannot be read, with why (each state file is read once)."""
    views, broken = [], []
    for run in runs_of(name):
        found = state_or_why(run.state)
        if isinstance(found, str):
            broken.append((run, found))
        elif found is not None:
            views.append(run_view(run, found))
    return views, broken


def _warn_unreadable(broken: list[tuple[RunDir, str]]) -> None:
    for run, why in broken:
        print(
            f"warning: {run.root}: {why}; its processes cannot be listed and may still run. "
            f"'servekit down {run.root.name.replace('__', '/', 1)}' sets the record aside",
            file=sys.stderr,
        )


def status(name: str | None, console: Console, as_json: bool = False) -> int:
    """Print a table per run (or, with ``as_json``, one JSON document for scripts)."""
    views, broken = collect(name)
    _warn_unreadable(broken)
    if not views and broken and not as_json:
        return 1
    if not views and (name is not None or not as_json):
        where = ", ".join(str(r) for r in run_roots())
        what = f"no run of {name}" if name else "no runs"
        raise UsageError(f"{what} under {where}; start one with: servekit up NAME")
    if as_json:
        doc = [v.model_dump(mode="json") for v in views]
        console.file.write(json.dumps(doc, indent=2) + "\n")
        return 0
    for view in views:
        show_run(view, console)
    return 0


def show_run(view: RunView, console: Console) -> None:
    """The table of one run, its entry URL, and what to do when its supervisor is gone."""
    console.print(view_table(view))
    if view.entry_url:
        console.print(f"entry: {view.entry_url}", highlight=False, soft_wrap=True)
    alive = "alive" if view.supervisor_alive else "gone"
    console.print(
        f"supervisor pid {view.supervisor_pid} ({alive}); records: {view.run_dir}",
        highlight=False,
        soft_wrap=True,
    )
    if view.phase == "unsupervised":
        console.print(
            f"[red]the supervisor of {view.layout} was killed; its processes run unwatched[/red]"
            f": stop them with: servekit down {view.layout}"
        )
    elif view.phase == "dead":
        console.print(
            f"[red]{view.layout} died with its supervisor (killed; no teardown recorded)[/red]"
            f"; start it again with: servekit up {view.layout}"
        )
    if view.message:
        console.print(f"last event: {view.message}", highlight=False, soft_wrap=True)


def find_log(process: str, name: str | None) -> Path:
    """The log of ``process`` in the named run, or in the only run that has it."""
    if not PROCESS_NAME.fullmatch(process):
        raise UsageError(f"{process!r} is not a process name; see 'servekit status' for names")
    runs = [r for r in runs_of(name) if r.launch.is_file()]
    hits = [r for r in runs if (r.log_of(process)).is_file()]
    if len(hits) == 1:
        return hits[0].log_of(process)
    if len(hits) > 1:
        names = ", ".join(r.root.name.replace("__", "/") for r in hits)
        raise UsageError(
            f"process {process!r} exists in several runs ({names}); pick one with --layout"
        )
    known = sorted({p.stem for r in runs for p in r.logs.glob("*.log")})
    raise UsageError(
        f"no log for process {process!r}; known processes: {', '.join(known) or 'none'}"
    )


def logs(opts: LogsOptions, out: Callable[[str], None]) -> None:
    """Print the last ``--lines`` of one process log; with ``--follow``, keep printing."""
    path = find_log(opts.process, opts.layout)
    for line in procs.tail(path, opts.lines):
        out(line)
    if not opts.follow:
        return
    try:
        fh = open_log(path)
    except OSError as exc:
        raise UsageError(f"cannot follow {path}: {exc}") from None
    with fh:
        fh.seek(0, os.SEEK_END)
        while True:
            chunk = fh.readline()
            if chunk:
                out(chunk.decode("utf-8", errors="replace").rstrip("\n"))
            else:
                time.sleep(POLL_S)
