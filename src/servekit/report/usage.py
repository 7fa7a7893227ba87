"""'How to use it': the commands that start this layout, derived from its Plan.

The seeds' release pages spell out unpack, apply, start. Here every line comes
from the Plan (entry node and port, served model name) and, for a cluster, from
each platform's own start commands (its row of :data:`servekit.platforms.PLATFORMS`,
which its plan.md prints too), so the instructions name only files the renderer
writes and cannot drift from what was verified.
"""

from __future__ import annotations

import json

from servekit.platforms import PLATFORMS, start_steps
from servekit.render import Plan
from servekit.report.view import Command
from servekit.vocabulary import url_for


def _request(plan: Plan, host: str, port: int | None) -> str:
    body = {
        "model": plan.served_model_name,
        "messages": [{"role": "user", "content": "Say hello."}],
        "max_tokens": 32,
    }
    return (
        f"curl -s {url_for(host, str(port), '/v1/chat/completions')} "
        f"-H 'Content-Type: application/json' -d '{json.dumps(body)}'"
    )


def local_usage(plan: Plan) -> tuple[Command, ...]:
    """A layout that runs on this machine: up, request, down."""
    entry = plan.process(plan.entry)
    return (
        Command(
            "Start it here (detached; writes deployment.json)", (f"servekit up {plan.layout}",)
        ),
        Command("Send a request to the entry", (_request(plan, "127.0.0.1", entry.api_port),)),
        Command("Re-verify and stop", (f"servekit verify {plan.layout}", "servekit down")),
    )


def _started(plan: Plan, target: str, out: str, title: str) -> Command:
    """Render for one platform and start it: the platform's own commands."""
    render, steps = start_steps(plan, target, out)
    return Command(f"{title}: {steps.title}", (render, *steps.lines))


def _platforms(plan: Plan, out: str) -> list[Command]:
    """Each platform's render and start, the default target first (into ``out``), then
    the others, each into its own ``out-<name>``."""
    first, *rest = PLATFORMS.values()
    steps = [_started(plan, first.name, out, f"Render and start it (image {plan.image})")]
    steps += [_started(plan, p.name, f"{out}-{p.name}", f"Or on {p.where}") for p in rest]
    return steps


def cluster_usage(plan: Plan) -> tuple[Command, ...]:
    """A multi-node layout: render for a platform and start it there, request the entry."""
    out = f"out/{plan.layout.replace('/', '-')}"
    entry = plan.process(plan.entry)
    host = "${NODE" + str(entry.node) + "_IP}"
    return (
        *_platforms(plan, out),
        Command(
            f"Send a request to the entry ({entry.name} on node {entry.node})",
            (_request(plan, host, entry.api_port),),
        ),
        Command(
            "Dry-run it here on simulated engines",
            (f"servekit verify {plan.layout} --engine sim",),
        ),
    )


def usage(plan: Plan) -> tuple[Command, ...]:
    """The usage steps for ``plan``: local for CPU layouts, rendered scripts otherwise."""
    if plan.engine_kind == "vllm-cpu":
        return local_usage(plan)
    return cluster_usage(plan)
