"""'How to use it': the commands that start this layout, derived from its Plan.

The seeds' release pages spell out unpack, apply, start. Here every line comes
from the Plan (entry node and port, served model name, the node folders the
renderer writes), so the instructions cannot drift from what was verified.
"""

from __future__ import annotations

import json

from servekit.render import Plan
from servekit.report.view import Command


def _request(plan: Plan, host: str, port: int | None) -> str:
    body = {
        "model": plan.served_model_name,
        "messages": [{"role": "user", "content": "Say hello."}],
        "max_tokens": 32,
    }
    return (
        f"curl -s http://{host}:{port}/v1/chat/completions "
        f"-H 'Content-Type: application/json' -d '{json.dumps(body)}'"
    )


def _node_line(plan: Plan, index: int) -> str:
    node = plan.nodes[index]
    names = [p.name for p in node.processes]
    shown = ", ".join(names[:4]) + (f", ... ({len(names)} processes)" if len(names) > 4 else "")
    return f"# node {index}: {shown}"


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


def cluster_usage(plan: Plan) -> tuple[Command, ...]:
    """A multi-node layout: render, start every node, request the entry."""
    out = f"out/{plan.layout.replace('/', '-')}"
    entry = plan.process(plan.entry)
    starts = [_node_line(plan, n.index) for n in plan.nodes]
    for n in plan.nodes:
        starts.append(f"bash {out}/node{n.index}/run.sh   # on node {n.index}")
    host = "${NODE" + str(entry.node) + "_IP}"
    return (
        Command(
            f"Render the launch scripts ({len(plan.nodes)} node folders)",
            (f"servekit render {plan.layout} --out {out}",),
        ),
        Command(
            f"Start every node (image {plan.image}; NODE<i>_IP set per env.sh)",
            tuple(starts),
        ),
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
