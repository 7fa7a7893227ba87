"""Rendering a Plan into launch scripts, for two launch models.

``modelarts``: one flat folder the platform copies to every node; ``run.sh`` (POSIX
sh) waits for the rank table, finds its node, checks the node count and group 0,
resolves the node's address and NIC, and starts and supervises the node's
processes. ``nodes``: one folder per node for clusters without a rank table;
``node<i>/run.sh`` (bash) starts the node's processes once ``NODE<i>_IP`` are
exported. Both targets share the per-process scripts (POSIX sh): tunables as
``VAR=${VAR:-default}``, typed environment values resolved on the node, the
command as a quoted word list, ``DRY_RUN=1`` to print it. servekit's bundled
files (the decode guard module, the proxy) sit beside the scripts.
"""

from __future__ import annotations

import functools
import shlex
from pathlib import Path
from typing import Literal

import jinja2

from servekit import __version__
from servekit.catalog import NodeValue
from servekit.defaults import SETTINGS_BY_KEY
from servekit.errors import UsageError
from servekit.fsutil import staged_dir
from servekit.render.bundle import bundle_files, entry_files
from servekit.render.command import references, shell_words
from servekit.render.envvalues import shell_value
from servekit.render.plan import NodePlan, Plan, ProcessPlan

Target = Literal["modelarts", "nodes"]
TARGETS: tuple[Target, ...] = ("modelarts", "nodes")


def device_span(devices: tuple[int, ...], shortest: int = 2) -> str:
    """``0-15`` for a run of at least ``shortest`` ids, else the ids (``-`` for none)."""
    if not devices:
        return "-"
    if list(devices) == list(range(devices[0], devices[-1] + 1)) and len(devices) >= shortest:
        return f"{devices[0]}-{devices[-1]}"
    return ",".join(map(str, devices))


@functools.cache
def _environment() -> jinja2.Environment:
    """One environment per process: its templates are compiled once, not per script."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("servekit.render", "templates"),
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
        autoescape=False,
    )
    env.filters["shq"] = shlex.quote
    env.filters["devices"] = device_span
    return env


def _env_lines(p: ProcessPlan) -> list[tuple[str, str]]:
    """``export`` lines; a value owned by a setting stays tunable through its variable."""
    from_setting = {
        s.target: s.var for s in SETTINGS_BY_KEY.values() if s.how == "env" and s.var in p.settings
    }
    lines = []
    for key in sorted(p.env):
        if key in from_setting:
            lines.append((key, '"${' + from_setting[key] + '}"'))
        else:
            lines.append((key, shell_value(key, p.env[key])))
    return lines


def describe(p: ProcessPlan) -> str:
    """One line saying what a process is, for script headers."""
    if p.kind == "proxy":
        return f"{p.name} (PD proxy)"
    parts = [f"{p.role} engine {p.engine}"]
    if p.engine_id is not None:
        parts.append(f"engine_id {p.engine_id}")
    if p.dp_rank is not None:
        parts.append(f"dp rank {p.dp_rank}")
    if p.headless:
        parts.append("headless")
    return f"{p.name} ({', '.join(parts)})"


def _needs(p: ProcessPlan) -> dict[str, str]:
    """Variables the node must provide, with what each one is."""
    names = references(p.command)
    for value in p.env.values():
        if isinstance(value, NodeValue):
            names.add("NODE_IP" if value.node == "ip" else "NODE_NIC")
    wanted = {}
    for name in sorted(names):
        if name in ("NODE_IP", "NODE_NIC"):
            wanted[name] = (
                "the " + ("address" if name == "NODE_IP" else "interface") + " of this node"
            )
        elif name.startswith("NODE") and name.endswith("_IP"):
            wanted[name] = f"the address of node {name[4:-3]}"
    return wanted


def _uses_nic(node: NodePlan) -> bool:
    return any("NODE_NIC" in _needs(p) for p in node.processes)


def _referenced_nodes(node: NodePlan) -> list[int]:
    found = {node.index}
    for p in node.processes:
        found |= {int(n[4:-3]) for n in _needs(p) if n.startswith("NODE") and n[4:-3].isdigit()}
    return sorted(found)


def process_script(plan: Plan, p: ProcessPlan) -> str:
    """The POSIX sh script of one process."""
    return (
        _environment()
        .get_template("process.sh.j2")
        .render(
            p=p,
            layout=plan.layout,
            version=__version__,
            describe=describe(p),
            required=_needs(p),
            bind=p.bind_host if p.kind == "engine" else None,
            argv=shell_words(p.command),
            env_lines=_env_lines(p),
        )
    )


def _group0_rule(plan: Plan) -> tuple[bool, str]:
    """Whether group 0 must be one node, and why (for the entry's message)."""
    if any(p.kind == "proxy" for p in plan.processes):
        return (
            True,
            "a second group-0 node would run a second proxy that cannot see the first's load",
        )
    if any(p.headless for p in plan.processes):
        return True, "the other nodes run headless ranks that serve no API"
    return False, ""


def _modelarts(plan: Plan) -> dict[str, str | bytes]:
    env = _environment()
    proxy = next((p for p in plan.processes if p.kind == "proxy"), None)
    if proxy is not None and proxy.node != 0:
        raise UsageError(
            f"{plan.layout}: the platform routes traffic to group 0 (node 0), but the proxy is on "
            f"node {proxy.node}; set proxy.node: 0 or render --target nodes"
        )
    single, why = _group0_rule(plan)
    files: dict[str, str | bytes] = {
        "run.sh": env.get_template("modelarts_run.sh.j2").render(
            layout=plan.layout,
            version=__version__,
            node_count=len(plan.nodes),
            nodes=plan.nodes,
            nic_nodes=[n.index for n in plan.nodes if _uses_nic(n)],
            proxy_node=None if proxy is None else proxy.node,
            group0_single=single and len(plan.nodes) > 1,
            group0_why=why,
        )
    }
    for p in plan.processes:
        files[f"{p.name}.sh"] = process_script(plan, p)
    files.update(bundle_files())
    files.update(entry_files())
    return files


def _nodes(plan: Plan) -> dict[str, str | bytes]:
    env = _environment()
    files: dict[str, str | bytes] = {}
    common = {"layout": plan.layout, "version": __version__}
    bundled = bundle_files()
    for node in plan.nodes:
        base = f"node{node.index}"
        files[f"{base}/env.sh"] = env.get_template("nodes_env.sh.j2").render(
            node=node, referenced_nodes=_referenced_nodes(node), needs_nic=_uses_nic(node), **common
        )
        files[f"{base}/run.sh"] = env.get_template("nodes_run.sh.j2").render(
            node=node, node_count=len(plan.nodes), **common
        )
        for p in node.processes:
            files[f"{base}/{p.name}.sh"] = process_script(plan, p)
        files.update({f"{base}/{name}": text for name, text in bundled.items()})
    return files


def render_files(plan: Plan, target: Target = "modelarts") -> dict[str, str | bytes]:
    """Every rendered file of a Plan, by relative path (pure: used by tests and kits)."""
    files = _modelarts(plan) if target == "modelarts" else _nodes(plan)
    files["plan.md"] = _environment().get_template("plan.md.j2").render(plan=plan, target=target)
    files["plan.json"] = plan.model_dump_json(indent=2) + "\n"
    return files


def write_rendering(
    plan: Plan, out: Path, target: Target = "modelarts", *, force: bool = False
) -> list[Path]:
    """Write the rendering to ``out`` atomically (the folder appears whole or not at all)."""
    return write_files(render_files(plan, target), out, force=force)


def write_files(files: dict[str, str | bytes], out: Path, *, force: bool = False) -> list[Path]:
    """Write rendered files to ``out`` atomically (the folder appears whole or not at all)."""
    with staged_dir(out, force=force) as tmp:
        for rel, content in files.items():
            path = tmp / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            data = content.encode("utf-8") if isinstance(content, str) else content
            path.write_bytes(data)
            path.chmod(0o755 if rel.endswith((".sh", ".pyz")) else 0o644)  # scripts, the proxy
    return [out / rel for rel in sorted(files)]
