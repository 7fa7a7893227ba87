"""``servekit layouts diff A B``: the semantic difference of two Plans.

The source's own debugging advice is to diff a broken layout's ``run_*.sh``
against its baseline by hand, over dozens of files. Both sides here become a
Plan (a catalog layout, a rendered folder's ``plan.json``, or a folder in the
source's convention imported into a scratch catalog), and the difference is
read in the Plan's own terms:

- **engines**: each engine's role, nodes, DP size, TP, engine id, kv port and
  API ports (the topology);
- **processes** added and removed, and for each process on both sides where it
  runs (node) and its typed facts;
- **flags** added, removed and changed per process, with JSON flags
  (``--kv-transfer-config``) compared key by key: an engine's from its command's
  words, the proxy's from its wiring (each word with the config field it comes
  from). Node addresses are compared placement-free (a node's address reads as
  ``${NODE_IP}``) and the flags that only restate typed facts (ports, DP rank and
  sizes, TP, the engine id and kv port inside the KV config, the proxy's backend
  lists and each backend's failure domain, which is its engine and node) are left
  to those facts, so moving an engine to another node is a placement change, not a
  flag change;
- **env** added, removed and changed per process;
- **fan-out**: the proxy's prefill, decode and replica backends added and removed,
  read from its references (process, node, port), shown at the Plan's addresses.
"""

from __future__ import annotations

import json
import re
import tempfile
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from rich.console import Console

from servekit.catalog import load
from servekit.errors import UsageError, first_error
from servekit.importer import SOURCE_FILE, port_runs
from servekit.render import (
    Address,
    Plan,
    ProcessPlan,
    ProxyWiring,
    build_plan,
    proxy_words,
    resolved_argv,
    url,
)
from servekit.termtable import fit_tables
from servekit.vocabulary import PROXY_POOLS, read_at_most, url_for

PLAN_FILE = "plan.json"
MAX_PLAN_BYTES = 16 * 1024 * 1024
NEUTRAL_NODE = "${NODE_IP}"
# Flags whose value restates a typed fact of the process (compared as that fact).
FACT_FLAGS = frozenset(
    {
        "--port",
        "--data-parallel-size",
        "--data-parallel-size-local",
        "--data-parallel-rank",
        "--data-parallel-start-rank",
        "--data-parallel-rpc-port",
        "--tensor-parallel-size",
    }
)
# The proxy's config fields that restate its typed facts (its port, its backends).
PROXY_FACT_FIELDS = frozenset(
    {"port", "prefill", "decode", "replica", "kv_events", "failure_domains"}
)
FACT_KEYS = (
    "node",
    "engine",
    "role",
    "kind",
    "engine_id",
    "dp_rank",
    "dp_size",
    "dp_local",
    "tp",
    "headless",
    "guard",
    "kv_mode",
    "devices",
    "api_port",
    "kv_port",
    "rpc_port",
    "kv_events_port",
    "cwd",
)
_KV_FACTS = ("engine_id", "kv_port")


def _flatten(prefix: str, value: Any, out: dict[str, str]) -> None:
    if isinstance(value, dict) and value:
        for k, v in value.items():
            _flatten(f"{prefix}.{k}", v, out)
    else:
        out[prefix] = json.dumps(value, sort_keys=True) if not isinstance(value, str) else value


def flag_words(words: Sequence[str]) -> Iterator[tuple[str | None, str]]:
    """``(--flag, value)`` per flag (its value words joined, ``(set)`` when it has none)
    and ``(None, word)`` per other word."""
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if not word.startswith("--"):
            yield None, word
            continue
        name, eq, value = word.partition("=")
        if not eq:
            values = []
            while i < len(words) and not words[i].startswith("--"):
                values.append(words[i])
                i += 1
            value = " ".join(values) if values else "(set)"
        yield name, value


def put_flag(out: dict[str, str], name: str, value: str, *, strip: bool = False) -> None:
    """``out[name] = value``, or a JSON object's keys one by one (the KV config's engine id
    and kv port left to the facts); ``strip``: a JSON value may follow whitespace."""
    try:
        parsed = json.loads(value) if (value.strip() if strip else value)[:1] in "{[" else None
    except ValueError:
        parsed = None
    if isinstance(parsed, dict):
        if name == "--kv-transfer-config":
            parsed = {k: v for k, v in parsed.items() if k not in _KV_FACTS}
        _flatten(name, parsed, out)
    else:
        out[name] = value


def flags_of(p: ProcessPlan) -> dict[str, str]:
    """``--flag`` -> value (JSON flags flattened key by key), placement-free.

    An engine's from its command (tunables resolved, node addresses neutral), the
    proxy's from its wiring.
    """
    if p.proxy is not None:
        return _proxy_flags(p.proxy)
    out: dict[str, str] = {}
    for name, value in flag_words(resolved_argv(p.command, node_text=NEUTRAL_NODE)):
        if name is None:
            out["(args)"] = f"{out.get('(args)', '')} {value}".strip()
        elif name not in FACT_FLAGS:
            put_flag(out, name, value)
    return out


def _proxy_flags(proxy: ProxyWiring) -> dict[str, str]:
    """The proxy's flags, each from the words of its config field (facts left out)."""
    words: dict[str | None, list[str]] = defaultdict(list)
    for name, word in proxy_words(proxy, lambda _: NEUTRAL_NODE):
        words[name] += resolved_argv((word,), node_text=NEUTRAL_NODE)
    out: dict[str, str] = {}
    for name, texts in words.items():
        if name is None:
            out["(args)"] = " ".join(texts)
        elif name not in PROXY_FACT_FIELDS and texts:
            flag, values = texts[0], texts[1:]
            put_flag(out, flag, " ".join(values) if values else "(set)")
    return out


def env_of(p: ProcessPlan) -> dict[str, str]:
    return {
        k: v if isinstance(v, str) else json.dumps(v.model_dump(mode="json"), sort_keys=True)
        for k, v in p.env.items()
    }


def facts_of(p: ProcessPlan) -> dict[str, str]:
    data = p.model_dump(mode="json")
    return {k: json.dumps(data.get(k)) for k in FACT_KEYS}


@dataclass
class Change:
    """One key's difference: added (a None), removed (b None) or changed."""

    key: str
    a: str | None
    b: str | None

    def as_json(self) -> dict[str, str | None]:
        return {"key": self.key, "a": self.a, "b": self.b}

    def text(self) -> str:
        if self.a is None:
            return f"+ {self.key} {self.b}"
        if self.b is None:
            return f"- {self.key} {self.a}"
        return f"~ {self.key} {self.a} -> {self.b}"


def changes(a: dict[str, str], b: dict[str, str]) -> list[Change]:
    keys = sorted(set(a) | set(b))
    return [Change(k, a.get(k), b.get(k)) for k in keys if a.get(k) != b.get(k)]


@dataclass
class ProcessDiff:
    name: str
    role: str
    facts: list[Change]
    flags: list[Change]
    env: list[Change]


@dataclass
class PlanDiff:
    """Everything that differs between two Plans, in the Plan's own terms."""

    a: str
    b: str
    plan: list[Change] = field(default_factory=list)
    engines: list[Change] = field(default_factory=list)
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    processes: list[ProcessDiff] = field(default_factory=list)
    fanout: list[Change] = field(default_factory=list)
    places: dict[str, Place] = field(default_factory=dict)

    def flag_changes(self) -> int:
        return sum(len(p.flags) for p in self.processes)

    def env_changes(self) -> int:
        return sum(len(p.env) for p in self.processes)

    def as_json(self) -> dict[str, Any]:
        return {
            "a": self.a,
            "b": self.b,
            "plan": [c.as_json() for c in self.plan],
            "engines": [c.as_json() for c in self.engines],
            "processes_added": self.added,
            "processes_removed": self.removed,
            "processes": {
                p.name: {
                    "role": p.role,
                    "facts": [c.as_json() for c in p.facts],
                    "flags": [c.as_json() for c in p.flags],
                    "env": [c.as_json() for c in p.env],
                }
                for p in self.processes
                if p.facts or p.flags or p.env
            },
            "fanout": [c.as_json() for c in self.fanout],
            "counts": {
                "engines": len(self.engines),
                "processes_added": len(self.added),
                "processes_removed": len(self.removed),
                "flags": self.flag_changes(),
                "env": self.env_changes(),
                "fanout": len(self.fanout),
            },
        }


def _engines(plan: Plan) -> dict[str, dict[str, str]]:
    grouped: dict[str, list[ProcessPlan]] = defaultdict(list)
    for p in plan.processes:
        if p.engine is not None:
            grouped[p.engine].append(p)
    out: dict[str, dict[str, str]] = {}
    for name, procs in grouped.items():
        first = procs[0]
        ports = sorted({p.api_port for p in procs if p.api_port is not None})
        out[name] = {
            "role": first.role,
            "nodes": ",".join(str(n) for n in sorted({p.node for p in procs})),
            "dp_size": str(first.dp_size),
            "tp": str(first.tp),
            "engine_id": str(first.engine_id),
            "kv_port": str(first.kv_port),
            "api_ports": f"{ports[0]}-{ports[-1]}" if len(ports) > 1 else ",".join(map(str, ports)),
        }
    return out


PUBLISHER = "publisher"
Place = tuple[str, str, str, int]
"""Where a backend is, for the fan-out lines: (list, scheme, host, port)."""


def _fanout(plan: Plan) -> tuple[dict[str, str], dict[str, Place]]:
    """The proxy's backends and publishers by key (the Plan's URL), and each backend's place."""
    out: dict[str, str] = {}
    places: dict[str, Place] = {}
    for p in plan.processes:
        if p.proxy is None:
            continue
        for role in PROXY_POOLS:
            for address in getattr(p.proxy, role):
                key = f"{p.name}.{role} {url(address, plan.host_of)}"
                out[key] = "backend"
                places[key] = (f"{p.name}.{role}", "http", plan.host_of(address), address.port)
        for publisher in p.proxy.kv_events:
            shown = f"{_url(publisher.engine, plan)}={_url(publisher.events, plan)}"
            out[f"{p.name}.kv_events {shown}"] = PUBLISHER
        out[f"{p.name}.mode"] = p.proxy.mode
    return out, places


def _url(address: Address, plan: Plan) -> str:
    return url(address, plan.host_of)


def _top(plan: Plan) -> dict[str, str]:
    """The Plan's own fields as text, its nodes counted."""
    top = {k: str(v) for k, v in plan.model_dump(mode="json").items() if k != "nodes"}
    return {**top, "nodes": str(len(plan.nodes))}


def diff_plans(a: Plan, b: Plan, a_name: str, b_name: str) -> PlanDiff:
    """The difference of two Plans (see the module docstring for what counts where)."""
    out = PlanDiff(a_name, b_name, plan=changes(_top(a), _top(b)))
    ea, eb = _engines(a), _engines(b)
    for name in sorted(set(ea) | set(eb)):
        fa, fb = ea.get(name, {}), eb.get(name, {})
        if not fa or not fb:
            side = fa or fb
            summary = " ".join(f"{k}={v}" for k, v in side.items())
            out.engines.append(Change(name, summary if fa else None, summary if fb else None))
            continue
        out.engines += [Change(f"{name}.{c.key}", c.a, c.b) for c in changes(fa, fb)]
    pa = {p.name: p for p in a.processes}
    pb = {p.name: p for p in b.processes}
    out.added = [n for n in pb if n not in pa]
    out.removed = [n for n in pa if n not in pb]
    for name in (n for n in pa if n in pb):
        x, y = pa[name], pb[name]
        out.processes.append(
            ProcessDiff(
                name,
                y.role,
                changes(facts_of(x), facts_of(y)),
                changes(flags_of(x), flags_of(y)),
                changes(env_of(x), env_of(y)),
            )
        )
    (fa, places_a), (fb, places_b) = _fanout(a), _fanout(b)
    out.fanout = changes(fa, fb)
    out.places = {**places_a, **places_b}
    return out


def _plan_file(path: Path) -> Plan:
    data = read_at_most(
        path, MAX_PLAN_BYTES, str(path), f"larger than {MAX_PLAN_BYTES} bytes; not a plan.json"
    )
    try:
        return Plan.model_validate_json(data)
    except ValidationError as exc:
        raise UsageError(
            f"{path}: not a servekit plan.json ({first_error(exc)[1][:80]}); "
            "render the layout again"
        ) from exc


def _imported(folder: Path, facts: Path | None) -> tuple[Plan, str]:
    """A source-convention folder (run by the contained runner) or its recorded facts."""
    from servekit.catalog import LayoutsImportOptions
    from servekit.importer import import_layout, name_for

    try:
        name = name_for(folder)
    except UsageError:
        name = f"a3/imported/{folder.name if re.fullmatch(r'[a-z0-9.-]+', folder.name) else 'x'}"
    with tempfile.TemporaryDirectory(prefix="servekit-diff-") as tmp:
        asked = LayoutsImportOptions(folder=folder, name=name, facts=facts, catalog=Path(tmp))
        real, _changed, _unexpressed = import_layout(asked)
        return build_plan(load(real, tmp).layout), f"{folder} (imported as {real})"


def plan_of(source: str, catalog: Path | None) -> tuple[Plan, str]:
    """A catalog name, a rendered folder (or its plan.json), a source-convention folder or
    the facts recorded from one (a ``source.json``)."""
    path = Path(source)
    if path.is_file() and path.name == PLAN_FILE:
        return _plan_file(path), str(path)
    if path.is_file() and path.name == SOURCE_FILE:
        return _imported(path.parent, path)
    if path.is_dir():
        if (path / PLAN_FILE).is_file():
            return _plan_file(path / PLAN_FILE), str(path)
        if (path / "run.sh").is_file():
            return _imported(path, None)
        raise UsageError(
            f"{source}: a folder with neither plan.json (a rendered layout) nor run.sh "
            "(a source-convention folder); give one of those, a source.json or a catalog name"
        )
    return build_plan(load(source, catalog).layout), source


def diff_sources(a: str, b: str, catalog: Path | None) -> PlanDiff:
    plan_a, name_a = plan_of(a, catalog)
    plan_b, name_b = plan_of(b, catalog)
    return diff_plans(plan_a, plan_b, name_a, name_b)


def _by_role(diff: PlanDiff, kind: str) -> list[list[str]]:
    """One row per (role, change) with how many processes it touches: 80 columns stay readable."""
    seen: dict[tuple[str, str, str | None, str | None], list[str]] = defaultdict(list)
    for p in diff.processes:
        for c in getattr(p, kind):
            seen[(p.role, c.key, c.a, c.b)].append(p.name)
    rows = []
    for (role, key, va, vb), names in seen.items():
        where = names[0] if len(names) == 1 else f"{len(names)} processes"
        rows.append(
            [role, key, va if va is not None else "-", vb if vb is not None else "-", where]
        )
    return rows


def fanout_lines(fanout: list[Change], places: dict[str, Place]) -> list[str]:
    """Backends added/removed, one line per proxy list and host with its port runs
    (a publisher on its own line); any other change as itself, first."""
    groups: dict[tuple[str, str, str, str], list[int]] = defaultdict(list)
    lines: list[str] = []
    for c in fanout:
        place = places.get(c.key)
        added_or_removed = c.a is None or c.b is None
        sign = "+" if c.a is None else "-"
        if added_or_removed and place is not None:
            key, scheme, host, port = place
            groups[(sign, key, scheme, host)].append(port)
        elif added_or_removed and PUBLISHER in (c.a, c.b):
            groups[(sign, c.key, "", "")] = []
        else:
            lines.append(c.text())
    for (sign, key, scheme, host), ports in groups.items():
        if not scheme:  # a publisher
            lines.append(f"{sign} {key}")
            continue
        runs = ",".join(port_runs(sorted(ports)))
        lines.append(f"{sign} {key} {url_for(host, runs, scheme=scheme)}")
    return lines


def print_diff(diff: PlanDiff, console: Console | None = None) -> None:
    out = console or Console()
    out.print(f"A: {diff.a}\nB: {diff.b}", highlight=False)
    for head, found, title in (
        ("plan", diff.plan, "plan"),
        ("engine", diff.engines, "engines (topology)"),
    ):
        rows = [[c.key, c.a or "-", c.b or "-"] for c in found]
        if rows:
            for t in fit_tables(out, [head, "A", "B"], rows, title):
                out.print(t)
    for label, names in (("added", diff.added), ("removed", diff.removed)):
        if names:
            out.print(f"processes {label} ({len(names)}): {', '.join(names)}", highlight=False)
    for kind, title in (("facts", "placement and facts"), ("flags", "flags"), ("env", "env")):
        rows = _by_role(diff, kind)
        if rows:
            for t in fit_tables(
                out, ["role", kind[:-1] if kind != "env" else "var", "A", "B", "where"], rows, title
            ):
                out.print(t)
    for line in fanout_lines(diff.fanout, diff.places):
        out.print(line, highlight=False)
    counts = diff.as_json()["counts"]
    out.print("differences: " + ", ".join(f"{k} {v}" for k, v in counts.items()), highlight=False)
