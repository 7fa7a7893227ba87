"""Running the matrix against a deployment: one check at a time, each one judged.

Checks run in registry order so their traffic never overlaps (except where a
check makes its own concurrency). A check that raises is a failure with the
exception as its reason, never a crash of the run, and never a pass.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from servekit.accept.env import Env, Probe, base_url
from servekit.accept.evidence import EvidenceStore
from servekit.accept.models import AcceptResult, CheckResult, write_result
from servekit.accept.options import AcceptOptions
from servekit.accept.outcome import Outcome, failed
from servekit.accept.registry import Check, all_checks, select
from servekit.accept.wire import Wire
from servekit.deployment import Deployment, load_deployment
from servekit.errors import UsageError

RESULT_FILE = "result.json"
MARKDOWN_FILE = "accept.md"
OnResult = Callable[[CheckResult], None]


def now_utc() -> str:
    """The current UTC time, ISO 8601 to the second (a result's ``started_at``)."""
    return datetime.now(UTC).isoformat(timespec="seconds")


def _model_card(doc: Any) -> tuple[str | None, int | None]:
    """The first served model's id and max_model_len from a /v1/models reply."""
    if not isinstance(doc, dict) or not isinstance(doc.get("data"), list) or not doc["data"]:
        return None, None
    card = doc["data"][0]
    if not isinstance(card, dict):
        return None, None
    model = card.get("id") if isinstance(card.get("id"), str) else None
    limit = card.get("max_model_len")
    return model, limit if isinstance(limit, int) else None


DISCOVERY_TIMEOUT_S = 30.0


async def _models(env: Env, url: str) -> Any:
    """GET /v1/models, bounded: a server that takes the connection and never answers
    would otherwise hold every check for its full request timeout (600 s each)."""
    try:
        reply = await asyncio.wait_for(env.wire.get(f"{url}/v1/models"), DISCOVERY_TIMEOUT_S)
    except TimeoutError:
        raise UsageError(
            f"{url}/v1/models did not answer in {DISCOVERY_TIMEOUT_S:.0f} s; "
            "is the server up and is this its root URL?"
        ) from None
    return reply.json_body()


async def discover(env: Env) -> None:
    """Fill in the served model and max_model_len from /v1/models (entry, then engine)."""
    for url in dict.fromkeys((env.entry, env.tokenize_base)):
        model, limit = _model_card(await _models(env, url))
        env.model = env.model or env.deployment.model or model
        env.max_model_len = env.max_model_len or limit
        if env.model and env.max_model_len:
            return


async def run_check(env: Env, check: Check) -> CheckResult:
    """Run one check and turn its outcome (or exception) into a result."""
    probe = Probe(env, check.id)
    started = now_utc()
    start = time.perf_counter()
    try:
        outcome = await check.run(probe)
    except Exception as exc:  # a crashing check is a failure with its reason
        outcome = failed(f"check crashed: {type(exc).__name__}: {exc}")
    return _result(check, outcome, probe, started, time.perf_counter() - start)


def _result(check: Check, outcome: Outcome, probe: Probe, started: str, took: float) -> CheckResult:
    return CheckResult(
        id=check.id,
        group=check.group,
        verdict=outcome.verdict,
        reason=outcome.reason,
        started_at=started,
        duration_s=round(took, 6),
        timings={**probe.timings(), **outcome.timings},
        measurements=outcome.measurements,
        evidence=tuple(probe.evidence),
    )


async def run_acceptance_async(
    deployment: Deployment,
    options: AcceptOptions,
    out_dir: Path,
    *,
    target: str | None = None,
    on_result: OnResult | None = None,
) -> AcceptResult:
    """Run the selected checks, write ``out_dir/result.json`` and return the result."""
    checks = select(all_checks(options), options.only)
    started = now_utc()
    start = time.perf_counter()
    results: list[CheckResult] = []
    async with Wire(timeout_s=options.timeout_s) as wire:
        speed = deployment.sim_speed if deployment.simulated else None
        store = EvidenceStore(out_dir, sim_speed=speed)
        env = Env(deployment=deployment, options=options, wire=wire, store=store)
        await discover(env)
        for check in checks:
            result = await run_check(env, check)
            results.append(result)
            if on_result is not None:
                on_result(result)
    accept = AcceptResult(
        target=target or base_url(deployment.entry_url),
        model=env.model,
        simulated=deployment.simulated,
        started_at=started,
        duration_s=round(time.perf_counter() - start, 3),
        contexts=options.contexts,
        sim_speed=speed,
        checks=tuple(results),
    )
    write_result(accept, out_dir / RESULT_FILE)
    return accept


def resolve_target(options: AcceptOptions) -> Deployment:
    """``--target`` as a Deployment, with ``--model``/``--capability`` filled in."""
    if not options.target:
        raise UsageError("--target: missing; pass the entry URL or a layout run by 'servekit up'")
    deployment = load_deployment(options.target)
    update: dict[str, object] = {}
    if options.model:
        update["model"] = options.model
    if options.capability:
        update["capabilities"] = tuple(
            dict.fromkeys((*deployment.capabilities, *options.capability))
        )
    return deployment.model_copy(update=update)


def run_accept(
    options: AcceptOptions,
    *,
    deployment: Deployment | None = None,
    on_result: OnResult | None = None,
) -> AcceptResult:
    """The Python API (``servekit verify`` calls it): run the matrix, return the result.

    The checks run against ``options.target`` (or ``deployment``, when the caller
    already holds one, such as a layout it started); ``options.out`` receives
    ``result.json`` and the evidence.
    """
    target = deployment or resolve_target(options)
    return asyncio.run(
        run_acceptance_async(
            target, options, options.out, target=options.target, on_result=on_result
        )
    )
