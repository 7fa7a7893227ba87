"""What ``servekit accept`` does once its flags are parsed (the CLI holds no logic)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from rich.console import Console

from servekit.accept.markdown import render_markdown
from servekit.accept.matrix import print_matrix
from servekit.accept.models import AcceptResult
from servekit.accept.options import DEFAULT_CONTEXTS, AcceptOptions, parse_contexts, parse_depths
from servekit.accept.progress import accept_progress, weights_for
from servekit.accept.registry import all_checks, select
from servekit.deployment import Deployment, load_deployment
from servekit.errors import UsageError
from servekit.vocabulary import atomic_write_text

MARKDOWN_FILE = "accept.md"


def build_options(
    only: list[str],
    contexts: list[str],
    depths: str | None,
    *,
    seed: str,
    timeout_s: float,
    concurrency: int,
) -> AcceptOptions:
    """Parse the flags into options; a bad value is a UsageError naming the flag."""
    parsed = parse_contexts(contexts or list(DEFAULT_CONTEXTS))
    base = AcceptOptions(contexts=parsed, seed=seed, timeout_s=timeout_s, concurrency=concurrency)
    if depths is not None:
        base = base.model_copy(update={"depths": parse_depths(depths)})
    select(all_checks(base), only)  # validate --only before sending anything
    return base.model_copy(update={"only": tuple(only)})


def resolve_target(target: str | None, model: str | None, capabilities: list[str]) -> Deployment:
    """``--target`` as a Deployment, with --model/--capability filled in."""
    if not target:
        raise UsageError("--target: missing; pass the entry URL or a layout run by 'servekit up'")
    deployment = load_deployment(target)
    update: dict[str, object] = {}
    if model:
        update["model"] = model
    if capabilities:
        update["capabilities"] = tuple(dict.fromkeys((*deployment.capabilities, *capabilities)))
    return deployment.model_copy(update=update)


def _finish(result: AcceptResult, out: Path, console: Console) -> int:
    atomic_write_text(out / MARKDOWN_FILE, render_markdown(result))
    print_matrix(result, console)
    console.print(f"result: {out / 'result.json'}  report section: {out / MARKDOWN_FILE}")
    return result.exit_code


def main(
    *,
    target: str | None,
    only: list[str],
    contexts: list[str],
    depths: str | None,
    model: str | None,
    capabilities: list[str],
    seed: str,
    timeout_s: float,
    concurrency: int,
    out: Path,
    selfcheck: bool,
    list_checks: bool,
) -> int:
    """Run what the flags ask for and return the exit code."""
    console = Console()
    options = build_options(
        only, contexts, depths, seed=seed, timeout_s=timeout_s, concurrency=concurrency
    )
    if list_checks:
        for check in select(all_checks(options), options.only):
            console.print(f"{check.id:40} {check.summary}")
        return 0
    if selfcheck:
        from servekit.accept.selfcheck import run_selfcheck_async

        return _finish(asyncio.run(run_selfcheck_async(out)), out, console)
    from servekit.accept.runner import run_acceptance_async

    deployment = resolve_target(target, model, capabilities)
    with accept_progress(weights_for(options), Console(stderr=True)) as show:
        result = asyncio.run(
            run_acceptance_async(deployment, options, out, target=target, on_result=show)
        )
    return _finish(result, out, console)
