"""Rendering a Plan into per-node launch scripts.

Per node: ``run.sh`` (servekit's launcher: starts the node's processes in their
own process groups and stops them all when one exits), ``env.sh`` (node
addresses, resolved at run time), and one ``<process>.sh`` per process whose
tunables are ``VAR=${VAR:-default}`` lines taken from the defaults table. The
plan summary goes beside them as ``plan.md`` and ``plan.json``.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import jinja2

from servekit import __version__
from servekit.defaults import GUARD_MIDDLEWARE, SETTINGS_BY_KEY
from servekit.fsutil import staged_dir
from servekit.render.plan import NodePlan, Plan, ProcessPlan

_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(\[@\])?\}")
_NODE_REF = re.compile(r"\$\{NODE(\d+)_IP\}")


def shell_word(token: str) -> str:
    """Quote one argv token for bash, keeping ``${VAR}`` references expandable."""
    if not _REF.search(token):
        return shlex.quote(token)
    parts: list[str] = []
    pos = 0
    for m in _REF.finditer(token):
        if m.start() > pos:
            parts.append(shlex.quote(token[pos : m.start()]))
        parts.append(f'"{m.group(0)}"')
        pos = m.end()
    if pos < len(token):
        parts.append(shlex.quote(token[pos:]))
    return "".join(parts)


def _devices(devices: tuple[int, ...]) -> str:
    if not devices:
        return "-"
    if list(devices) == list(range(devices[0], devices[-1] + 1)) and len(devices) > 1:
        return f"{devices[0]}-{devices[-1]}"
    return ",".join(str(d) for d in devices)


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("servekit.render", "templates"),
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
        autoescape=False,
    )
    env.filters["shq"] = shlex.quote
    env.filters["devices"] = _devices
    return env


def _env_lines(p: ProcessPlan) -> list[tuple[str, str]]:
    """Environment exports; values owned by a setting stay tunable through its variable."""
    from_setting = {
        SETTINGS_BY_KEY[key].target: SETTINGS_BY_KEY[key].var
        for key in SETTINGS_BY_KEY
        if SETTINGS_BY_KEY[key].how == "env" and SETTINGS_BY_KEY[key].var in p.settings
    }
    lines = []
    for key in sorted(p.env):
        if key in from_setting:
            lines.append((key, '"${' + from_setting[key] + '}"'))
        else:
            lines.append((key, shlex.quote(p.env[key])))
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


def _referenced_nodes(node: NodePlan) -> list[int]:
    found = {node.index}
    for p in node.processes:
        for token in p.argv_template:
            found.update(int(m.group(1)) for m in _NODE_REF.finditer(token))
        found.update(int(m.group(1)) for m in _NODE_REF.finditer(p.host))
    return sorted(found)


def render_files(plan: Plan) -> dict[str, str]:
    """Every rendered file of a Plan, by relative path (pure: used by tests and kits)."""
    env = _environment()
    files: dict[str, str] = {}
    common = {"layout": plan.layout, "version": __version__}
    for node in plan.nodes:
        base = f"node{node.index}"
        files[f"{base}/env.sh"] = env.get_template("env.sh.j2").render(
            node=node, referenced_nodes=_referenced_nodes(node), **common
        )
        files[f"{base}/run.sh"] = env.get_template("run.sh.j2").render(
            node=node, node_count=len(plan.nodes), **common
        )
        for p in node.processes:
            files[f"{base}/{p.name}.sh"] = env.get_template("process.sh.j2").render(
                p=p,
                describe=describe(p),
                argv=[shell_word(t) for t in p.argv_template],
                env_lines=_env_lines(p),
                guard_target=GUARD_MIDDLEWARE,
                **common,
            )
    files["plan.md"] = env.get_template("plan.md.j2").render(plan=plan)
    files["plan.json"] = plan.model_dump_json(indent=2) + "\n"
    return files


def write_rendering(plan: Plan, out: Path) -> list[Path]:
    """Write the rendering to ``out`` atomically (the folder appears whole or not at all)."""
    files = render_files(plan)
    with staged_dir(out) as tmp:
        for rel, text in files.items():
            path = tmp / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            path.chmod(0o755 if rel.endswith(".sh") else 0o644)
    return [out / rel for rel in sorted(files)]
