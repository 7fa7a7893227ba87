"""The per-process script every platform ships, and what the platforms' renderers share.

Each platform (:mod:`servekit.platforms`: ModelArts, plain nodes, Kubernetes) has
its own launch model and entry, and the same per-process scripts (POSIX sh):
tunables as ``VAR=${VAR:-default}``, typed environment values resolved on the
node, the command as a quoted word list, ``DRY_RUN=1`` to print it. servekit's
bundled files (the decode guard module, the proxy) sit beside the scripts. The
templates shared by the platforms (``process.sh.j2``, ``_nic.sh.j2``,
``plan.md.j2``) live here; each platform's own live in its folder.
"""

from __future__ import annotations

import functools
import shlex
from collections.abc import Sequence
from pathlib import Path

import jinja2

from servekit import __version__
from servekit.catalog import NodeValue
from servekit.defaults import SETTINGS, SETTINGS_BY_KEY, SWITCHES
from servekit.fsutil import staged_dir
from servekit.render.command import node_var, referenced_nodes, references, shell_words
from servekit.render.envvalues import shell_value
from servekit.render.plan import NodePlan, Plan, ProcessPlan


def device_span(devices: tuple[int, ...], shortest: int = 2) -> str:
    """``0-15`` for a run of at least ``shortest`` ids, else the ids (``-`` for none)."""
    if not devices:
        return "-"
    if list(devices) == list(range(devices[0], devices[-1] + 1)) and len(devices) >= shortest:
        return f"{devices[0]}-{devices[-1]}"
    return ",".join(map(str, devices))


@functools.cache
def script_environment(package: str | None = None) -> jinja2.Environment:
    """The templates of ``package`` (a platform's) and render's own shared ones.

    One environment per package and process: templates compile once, not per script.
    """
    own = jinja2.PackageLoader("servekit.render", "templates")
    loader: jinja2.BaseLoader = (
        own
        if package is None
        else jinja2.ChoiceLoader([jinja2.PackageLoader(package, "templates"), own])
    )
    env = jinja2.Environment(
        loader=loader,
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


def process_needs(p: ProcessPlan) -> dict[str, str]:
    """Variables the node must provide, with what each one is."""
    needs = {node_var(k): f"the address of node {k}" for k in referenced_nodes(p.command)}
    for value in p.env.values():
        if isinstance(value, NodeValue):
            what = "address" if value.node == "ip" else "interface"
            needs["NODE_IP" if value.node == "ip" else "NODE_NIC"] = f"the {what} of this node"
    return dict(sorted(needs.items()))


def uses_nic(node: NodePlan) -> bool:
    """Whether a node's processes need its network interface (``NODE_NIC``)."""
    return any("NODE_NIC" in process_needs(p) for p in node.processes)


def process_script(plan: Plan, p: ProcessPlan) -> str:
    """The POSIX sh script of one process."""
    return (
        script_environment()
        .get_template("process.sh.j2")
        .render(
            p=p,
            layout=plan.layout,
            version=__version__,
            describe=describe(p),
            required=process_needs(p),
            bind=p.bind_host if "BIND_HOST" in references(p.command) else None,
            argv=shell_words(p.command),
            env_lines=_env_lines(p),
            bool_flags=_bool_flags(p),
            switches=[s.var for s in SETTINGS if s.how in SWITCHES and s.var in p.settings],
        )
    )


def _bool_flags(p: ProcessPlan) -> list[tuple[str, str, str]]:
    """(variable, flag when 1, flag when 0) of each on/off setting the process uses."""
    return [
        (s.var, s.target, "--no-" + s.target.removeprefix("--"))
        for s in SETTINGS
        if s.how == "bool-flag" and s.var in p.settings
    ]


def plan_page(plan: Plan, title: str, lines: Sequence[str], note: str) -> str:
    """``plan.md``: the Plan as a table, and how its platform starts it (``title``,
    ``lines``: the platform's start commands for this folder; ``note``: its own words)."""
    start = {"title": title, "lines": tuple(lines), "note": note}
    return script_environment().get_template("plan.md.j2").render(plan=plan, start=start)


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
