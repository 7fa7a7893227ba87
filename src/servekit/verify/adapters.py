"""Binding verify's Protocols to servekit's real parts (runner, accept, bench, kit).

Each adapter imports its package inside the call, so ``servekit --help`` and the
catalog site never load the engine stack.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from servekit.accept import AcceptResult
from servekit.bench import BenchResult, RunSettings, Workload
from servekit.catalog import LoadedLayout
from servekit.deployment import Deployment, load_deployment, run_dir_for
from servekit.errors import UsageError
from servekit.kit import KitVerifyOptions
from servekit.report import KitCheck
from servekit.verify.components import Components
from servekit.verify.progress import HOOKS
from servekit.vocabulary import Startable, sha256_file

READY_TIMEOUT_S = float(os.environ.get("SERVEKIT_READY_TIMEOUT", "900"))


class StartFailed(Exception):
    """The deployment was started but never became ready (a verify failure, not bad input)."""


class LocalRunner:
    """``servekit up NAME --detach --free-ports`` and ``servekit down NAME`` as calls.

    ``prepare_run`` builds the tiny model on first use, as for ``up``, so
    ``servekit verify local/1p1d`` works on a fresh machine without a separate
    ``servekit model tiny`` step.

    A layout that names a ``verify.reference`` gets that single-instance layout
    started beside it (same engine choice), so acceptance can compare PD answers
    with a single instance's byte for byte; both are torn down together.

    Every layout is remembered before its start begins and forgotten only once
    its own ``down`` returned, so an interrupt at any point (while the reference
    starts, or halfway through the stop before a benchmark-speed restart) leaves
    each started layout on the list the final teardown stops.
    """

    def __init__(self, catalog: str | None = None, ready_timeout_s: float = READY_TIMEOUT_S):
        self.catalog = catalog
        self.ready_timeout_s = ready_timeout_s
        self._started: list[str] = []

    def _start(
        self, loaded: LoadedLayout, engine: Startable, speed: float | None = None
    ) -> Deployment:
        from rich.console import Console

        from servekit.cliopts import build_options
        from servekit.local import EXIT_INTERRUPTED, UpOptions, prepare_run, up_detached

        name = loaded.layout.name
        if name not in self._started:
            self._started.append(name)
        asked = {"name": name, "engine": engine, "free_ports": True, "catalog": self.catalog}
        opts = build_options(UpOptions, {**asked, "speed": speed})
        spec = prepare_run(opts)
        code = up_detached(spec, Console(stderr=True), self.ready_timeout_s)
        if code == EXIT_INTERRUPTED:  # Ctrl-C/SIGTERM during start-up: it stopped the run
            raise KeyboardInterrupt
        if code != 0:
            raise StartFailed(f"{name} did not come up (exit {code}); see {run_dir_for(name)}")
        return load_deployment(name)

    def up(self, loaded: LoadedLayout, engine: Startable, speed: float | None = None) -> Deployment:
        from servekit.catalog import load

        dep = self._start(loaded, engine, speed)
        ref_name = loaded.layout.verify.reference
        if ref_name is None:
            return dep
        ref = self._start(load(ref_name, self.catalog), engine, speed)
        return dep.model_copy(update={"reference_url": ref.entry_url})

    def down(self, loaded: LoadedLayout) -> str:
        from servekit.local import down

        names = list(dict.fromkeys([loaded.layout.name, *self._started]))
        stopped: list[str] = []
        for name in names:
            try:
                stopped += down(name)
            except UsageError as exc:  # never started (a failed start): nothing to stop
                stopped.append(str(exc))
            if name in self._started:
                self._started.remove(name)
        return "; ".join(stopped)


def attach(target: str) -> Deployment:
    """``--target URL|NAME``: a URL or the deployment.json of a running layout."""
    return load_deployment(target)


def accept(deployment: Deployment, out_dir: Path, contexts: Sequence[str]) -> AcceptResult:
    from servekit.accept import AcceptOptions, run_accept

    options = AcceptOptions(context=tuple(contexts), out=out_dir)
    return run_accept(options, deployment=deployment, on_result=HOOKS.get().on_check)


def bench(
    deployment: Deployment, workloads: Sequence[Workload], settings: RunSettings
) -> BenchResult:
    from servekit.bench import run_workloads

    return run_workloads(deployment, workloads, settings, progress=HOOKS.get().on_bench)


def kit(options: KitVerifyOptions) -> KitCheck:
    """``servekit kit verify ARCHIVE --out DIR``: every check and the release table.

    The kit package's :func:`~servekit.kit.verify_release` writes each row's
    evidence and ``kit-table.json``/``.md`` into ``options.out``; the
    repository, base, smoke log and baseline turn the rows that need them on.
    """
    from servekit.kit import verify_release

    archive = options.archive
    table, report = verify_release(options)
    counts = {s: sum(c.status == s for c in report.checks) for s in ("pass", "fail", "skip")}
    failures = [f"{c.name}: {c.detail}" for c in report.checks if c.status == "fail"]
    summary = f"{counts['pass']}/{counts['pass'] + counts['fail']} kit checks passed"
    if failures:
        summary += f" ({failures[0]})"
    not_run = [r.item for r in table.rows if r.status == "not run"]
    if not_run:
        summary += f"; release rows not run: {', '.join(not_run)}"
    return KitCheck(
        archive=str(archive),
        archive_sha256=sha256_file(archive) if archive.is_file() else None,
        ok=report.ok and table.ok,
        summary=summary,
        evidence="kit/kit-verify.json",
        table="kit/kit-table.json",
    )


def real_components(catalog: str | None = None) -> Components:
    """The parts a real ``servekit verify`` uses."""
    return Components(
        runner=LocalRunner(catalog), attach=attach, accept=accept, bench=bench, kit=kit
    )
