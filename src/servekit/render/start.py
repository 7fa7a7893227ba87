"""How each render target's files are started: the commands, stated once per target.

A rendering is only useful with the commands that start it, and those depend on
the target: ModelArts runs one entry on every node from the job's script folder,
plain nodes each run their own folder, Kubernetes applies the kustomization. Each
rendering's ``plan.md``, the release report and the catalog page ("how to use it")
print these lines, so every path they name is one the target's renderer writes
(``tests/platforms/test_start.py`` renders each target and checks each path).
Before (issue 45), the report said ``servekit render NAME --out OUT`` (ModelArts,
a flat folder) then ``bash OUT/node<i>/run.sh``, a folder only ``--target nodes``
writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from servekit.render.plan import Plan

StartTarget = Literal["modelarts", "nodes", "k8s"]
"""The render targets (``servekit.platforms.TargetName``; tests/platforms checks they agree)."""
START_TARGETS: tuple[StartTarget, ...] = get_args(StartTarget)
SCRIPT_FOLDER = "/root/script"
"""Where ModelArts mounts the job's script folder on every node."""


@dataclass(frozen=True)
class Start:
    """The render command of one target and the commands that start what it wrote."""

    target: StartTarget
    title: str
    render: str
    lines: tuple[str, ...]
    files: tuple[str, ...]
    """The rendered files (relative to the output folder) the lines run."""


def _folder(out: str) -> str:
    return "this folder" if out == "." else f"{out}/"


def _modelarts(plan: Plan, out: str) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
    nodes = len(plan.nodes)
    return (
        f"ModelArts: {_folder(out)} is the job's script folder; all {nodes} node(s) run its "
        "one entry",
        (
            f"# upload {_folder(out)} as the job's script folder ({SCRIPT_FOLDER} on every node)",
            f"sh {SCRIPT_FOLDER}/run.sh   # the job's command on every node: reads the rank "
            "table, starts that node's processes",
        ),
        ("run.sh",),
    )


def _nodes(plan: Plan, out: str) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
    addresses = " ".join(f"NODE{n.index}_IP=..." for n in plan.nodes)
    lines = [f"export {addresses}   # every node's address, on every node"]
    lines += [f"bash {out}/node{n.index}/run.sh   # on node {n.index}" for n in plan.nodes]
    files = tuple(f"node{n.index}/run.sh" for n in plan.nodes)
    return f"Plain nodes: {out}/node<i>/ on node i", tuple(lines), files


def _k8s(plan: Plan, out: str) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
    return (
        f"Kubernetes: LeaderWorkerSets and the proxy; {out}/k8s.md lists what the cluster needs",
        (f"kubectl apply -k {out}   # after setting the image and namespace in an overlay",),
        ("kustomization.yaml", "k8s.md"),
    )


STARTS = {"modelarts": _modelarts, "nodes": _nodes, "k8s": _k8s}


def start_steps(plan: Plan, target: StartTarget, out: str) -> Start:
    """How ``plan`` rendered for ``target`` into ``out`` is started (``out`` as printed)."""
    title, lines, files = STARTS[target](plan, out)
    render = f"servekit render {plan.layout} --target {target} --out {out}"
    return Start(target, title, render, lines, files)
