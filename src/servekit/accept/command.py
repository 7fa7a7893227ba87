"""``servekit accept``'s entry point: list the checks, self-check, or run them and show the matrix.

Above both the runner and the self-check (which runs the runner against faulty
simulators), so neither imports the other back. ``--only`` is checked first,
where the checks are selected, so a typo is one line before anything starts.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from rich.console import Console

from servekit.accept.markdown import render_markdown
from servekit.accept.matrix import print_matrix
from servekit.accept.models import AcceptResult
from servekit.accept.options import AcceptOptions
from servekit.accept.progress import accept_progress, planned_weights
from servekit.accept.registry import all_checks, select
from servekit.accept.runner import MARKDOWN_FILE, RESULT_FILE, resolve_target, run_accept
from servekit.accept.selfcheck import run_selfcheck_async
from servekit.vocabulary import atomic_write_text


def _finish(result: AcceptResult, out: Path, console: Console) -> int:
    atomic_write_text(out / MARKDOWN_FILE, render_markdown(result))
    print_matrix(result, console)
    console.print(f"result: {out / RESULT_FILE}  report section: {out / MARKDOWN_FILE}")
    return result.exit_code


def main(options: AcceptOptions) -> int:
    """``servekit accept``: list, self-check or run what the options ask; the exit code."""
    console = Console()
    checks = select(all_checks(options), options.only)  # a typo in --only: exit 2 here
    if options.list_checks:
        for check in checks:
            console.print(f"{check.id:40} {check.summary}")
        return 0
    if options.selfcheck:
        return _finish(asyncio.run(run_selfcheck_async(options.out)), options.out, console)
    deployment = resolve_target(options)
    with accept_progress(planned_weights(checks), Console(stderr=True)) as show:
        result = run_accept(options, deployment=deployment, on_result=show)
    return _finish(result, options.out, console)
