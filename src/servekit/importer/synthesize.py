"""Facts -> layout data: the recorded processes of a source folder as a typed layout.

The importer runs a folder's scripts on the fake platform and records every
process (the fidelity fixture format of tests/render/fidelity/README.md). This
module turns those facts back into what servekit's Plan is built from: engines
with their role, nodes, launch mode, DP/TP shape, ports, engine id, KV connector
and speculative config as typed fields (issue 21 derives new topologies from
them), and every other flag and variable as per-engine data. What the schema
cannot say becomes an :class:`Unexpressed` line naming the file and line it came
from (or the process, when the facts name no line), never a silent drop.

Pure: the same facts give the same data, so importing twice changes nothing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from servekit.catalog import LayoutName
from servekit.defaults import SETTINGS_BY_KEY, format_value
from servekit.importer.platform.normalize import flags_from_json
from servekit.kvprotocol import LAYERWISE_CONNECTOR
from servekit.vocabulary import role_of_kv

JSON = Any

# Flags the Plan writes from typed fields; everything else stays per-engine data.
DP_FLAGS = frozenset(
    {
        "--data-parallel-size",
        "--data-parallel-size-local",
        "--data-parallel-rank",
        "--data-parallel-start-rank",
        "--data-parallel-address",
        "--data-parallel-rpc-port",
        "--headless",
    }
)
TYPED_FLAGS = DP_FLAGS | {
    "--host",
    "--port",
    "--served-model-name",
    "--max-model-len",
    "--tensor-parallel-size",
    "--enable-expert-parallel",
    "--quantization",
    "--trust-remote-code",
    "--speculative-config",
    "--kv-transfer-config",
    "--additional-config",
}
# The defaults table's flag settings, by flag: their values become tunables.
SETTING_FLAGS = {
    s.target: s.key for s in SETTINGS_BY_KEY.values() if s.how in ("flag", "bool-flag")
}
DEVICE_ENV = "ASCEND_RT_VISIBLE_DEVICES"
# A layout name's hardware: its accelerator and NPUs per node.
HARDWARE = {"a3": ("ascend-a3", 16), "a2": ("ascend-a2", 8)}
KV_TYPED = {"kv_connector", "kv_role", "kv_port", "engine_id", "kv_connector_module_path"}
KV_OPTIONAL = {"kv_buffer_device", "kv_connector_extra_config"}
# The PD proxy's backends per pool: (hosts flag, ports flag).
PROXY_BACKENDS = {
    "prefill": ("--prefiller-hosts", "--prefiller-ports"),
    "decode": ("--decoder-hosts", "--decoder-ports"),
}
_NODE_IP = re.compile(r"^\{NODE(\d+)_IP\}$")
_NODE_NIC = re.compile(r"^\{NODE(\d+)_NIC\}$")


NOT_EXPRESSED = "not expressed: "
"""How a caveat of the layout starts that records a difference the import could not express."""
UNSET = "\x00unset"  # a variable the source unsets (recorded as a deviation: env cannot unset)


@dataclass(frozen=True)
class Unexpressed:
    """One thing of the source the layout cannot say, with where it came from."""

    file: str
    line: int | None
    what: str

    def text(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        return f"{where}: {self.what}"


@dataclass
class Synthesis:
    """A layout's data (before profiles are split out) and what could not be expressed."""

    layout: dict[str, Any]
    unexpressed: list[Unexpressed] = field(default_factory=list)
    caveats: list[str] = field(default_factory=list)


@dataclass
class _Proc:
    key: str
    node: int
    kind: str
    program: tuple[str, ...]
    flags: list[tuple[str, tuple[JSON, ...]]]
    env: dict[str, str | None]
    cwd: str | None

    def one(self, flag: str) -> JSON:
        found = [v for f, v in self.flags if f == flag]
        return found[0][0] if found and found[0] else None

    def has(self, flag: str) -> bool:
        return any(f == flag for f, _ in self.flags)

    @property
    def kv(self) -> dict[str, Any] | None:
        value = self.one("--kv-transfer-config")
        return value if isinstance(value, dict) else None


def _proc(data: Mapping[str, Any]) -> _Proc:
    return _Proc(
        key=str(data["key"]),
        node=int(data["node"]),
        kind=str(data["kind"]),
        program=tuple(data["program"]),
        flags=[(str(name), values) for name, values in flags_from_json(data["flags"])],
        env=dict(data.get("env") or {}),
        cwd=data.get("cwd"),
    )


def _int(value: JSON) -> int | None:
    return int(value) if isinstance(value, str) and value.isdigit() else None


def _arg_value(values: tuple[JSON, ...]) -> JSON:
    """A flag's recorded value as layout data: true for a bare flag, numbers where exact."""
    if not values:
        return True
    if len(values) > 1:
        return list(values)
    value = values[0]
    if isinstance(value, str) and value.isdigit() and str(int(value)) == value:
        return int(value)
    return value


def _setting_value(key: str, values: tuple[JSON, ...]) -> JSON | None:
    """The setting's typed value when it renders back to the very same words."""
    setting = SETTINGS_BY_KEY[key]
    if setting.how == "bool-flag":
        return None
    if len(values) != 1 or not isinstance(values[0], str):
        return None
    text = values[0]
    for parsed in (_int(text), _float(text)):
        if parsed is not None and format_value(parsed) == text:
            return parsed
    return text if format_value(text) == text and key == "kv_cache_dtype" else None


def _float(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if re.fullmatch(r"\d+\.\d+", text) else None


def _flag_key(flag: str) -> str:
    return flag.removeprefix("--").replace("-", "_")


def _env_value(name: str, value: str | None, node: int, where: str, out: list[Unexpressed]) -> JSON:
    """A recorded value as a typed environment value (node IP/NIC, prefix, literal)."""
    if value is None:
        return UNSET
    ip, nic = _NODE_IP.match(value), _NODE_NIC.match(value)
    if ip and int(ip.group(1)) == node:
        return {"node": "ip"}
    if nic and int(nic.group(1)) == node:
        return {"node": "nic"}
    if value.endswith(":{INHERITED}"):
        return {"prepend": value.removesuffix(":{INHERITED}")}
    if "{" in value and re.search(r"\{(NODE\d+_(IP|NIC|POD)|INHERITED|PROXY_SCRIPT)\}", value):
        out.append(
            Unexpressed(where, None, f"{name}={value}: a run-time value the layout cannot type")
        )
        return None
    return value


def _engine_groups(procs: Sequence[_Proc]) -> list[list[_Proc]]:
    """Processes of one engine together: same KV role, DP address and rpc port."""
    groups: dict[tuple[Any, ...], list[_Proc]] = {}
    for p in procs:
        kv = p.kv or {}
        if p.has("--data-parallel-size"):
            key: tuple[Any, ...] = (
                kv.get("kv_role"),
                p.one("--data-parallel-address") or f"node{p.node}",
                p.one("--data-parallel-rpc-port"),
                kv.get("engine_id"),
            )
        else:
            key = ("single", p.node, p.one("--port"))
        groups.setdefault(key, []).append(p)
    ordered = sorted(groups.values(), key=lambda g: (min(p.node for p in g), _rank(g[0])))
    return [sorted(g, key=lambda p: (p.node, _rank(p))) for g in ordered]


def _rank(p: _Proc) -> int:
    for flag in ("--data-parallel-rank", "--data-parallel-start-rank"):
        value = _int(p.one(flag))
        if value is not None:
            return value
    return 0


def _shape(group: list[_Proc], where: str, out: list[Unexpressed]) -> dict[str, Any]:
    """Launch mode, nodes, DP/TP and ports of one engine's processes."""
    lead = group[0]
    nodes = sorted({p.node for p in group})
    shape: dict[str, Any] = {"nodes": nodes}
    if lead.has("--data-parallel-rank"):
        per_node = {n: sum(1 for p in group if p.node == n) for n in nodes}
        if len(set(per_node.values())) != 1:
            out.append(Unexpressed(where, None, f"external DP ranks per node differ: {per_node}"))
        shape.update(launch="external-dp", dp_size_per_node=per_node[nodes[0]])
        shape["api_port"] = min(_int(p.one("--port")) or 0 for p in group if p.node == nodes[0])
    elif lead.has("--data-parallel-size"):
        local = _int(lead.one("--data-parallel-size-local"))
        shape.update(
            launch="builtin-dp", dp_size_per_node=local or _int(lead.one("--data-parallel-size"))
        )
        shape["api_port"] = _int(lead.one("--port"))
    else:
        shape.update(launch="single")
        shape["api_port"] = _int(lead.one("--port"))
    dp = _int(lead.one("--data-parallel-size"))
    if dp is not None:
        shape["dp_size"] = dp
    shape["tp"] = _int(lead.one("--tensor-parallel-size")) or 1
    if lead.has("--enable-expert-parallel"):
        shape["expert_parallel"] = True
    rpc = _int(lead.one("--data-parallel-rpc-port"))
    if rpc is not None:
        shape["rpc_port"] = rpc
    return shape


def _kv(group: list[_Proc], where: str, out: list[Unexpressed]) -> dict[str, Any]:
    kv = group[0].kv
    if kv is None:
        return {}
    found: dict[str, Any] = {}
    if "engine_id" in kv:
        found["engine_id"] = str(kv["engine_id"])
    if _int(kv.get("kv_port")) is not None:
        found["kv_port"] = _int(kv["kv_port"])
    conn: dict[str, Any] = {"name": kv.get("kv_connector"), "role": kv.get("kv_role")}
    if kv.get("kv_connector_module_path"):
        conn["module_path"] = kv["kv_connector_module_path"]
    if kv.get("kv_buffer_device"):
        conn["buffer_device"] = kv["kv_buffer_device"]
    if kv.get("kv_connector_extra_config"):
        conn["extra_config"] = kv["kv_connector_extra_config"]
    for key in sorted(set(kv) - KV_TYPED - KV_OPTIONAL):
        out.append(Unexpressed(where, None, f"--kv-transfer-config key {key!r} has no field"))
    found["kv_connector"] = conn
    return found


def _speculative(value: JSON) -> dict[str, Any] | None:
    if not isinstance(value, dict) or "method" not in value:
        return None
    spec: dict[str, Any] = {
        "method": value["method"],
        "num_speculative_tokens": value.get("num_speculative_tokens", 1),
    }
    if isinstance(value.get("enforce_eager"), bool):
        spec["enforce_eager"] = value["enforce_eager"]
    extra = {
        k: v
        for k, v in value.items()
        if k not in ("method", "num_speculative_tokens", "enforce_eager")
    }
    if extra:
        spec["extra"] = extra
    return spec


def _free_flags(p: _Proc) -> dict[str, tuple[tuple[JSON, ...], ...]]:
    """Flags the Plan does not write from typed fields (an external-DP rank's local size is one)."""
    external = p.has("--data-parallel-rank")
    found: dict[str, list[tuple[JSON, ...]]] = {}
    for flag, values in p.flags:
        if flag not in TYPED_FLAGS or (external and flag == "--data-parallel-size-local"):
            found.setdefault(flag, []).append(values)
    return {k: tuple(v) for k, v in found.items()}


FlagSet = dict[str, tuple[tuple[JSON, ...], ...]]


def _same_flags(procs: list[_Proc], where: str, out: list[Unexpressed]) -> FlagSet:
    """The free flags of the first process; any other that differs is a named line."""
    first = _free_flags(procs[0])
    for p in procs[1:]:
        if _free_flags(p) != first:
            out.append(Unexpressed(where, None, f"{p.key}: flags differ from {procs[0].key}"))
    return first


def _split_leader(
    group: list[_Proc], where: str, out: list[Unexpressed]
) -> tuple[FlagSet, FlagSet]:
    """(flags every process has, flags only the API leader has)."""
    lead = _same_flags([p for p in group if not p.has("--headless")], where, out)
    workers = [p for p in group if p.has("--headless")]
    if not workers:
        return lead, {}
    worker = _same_flags(workers, where, out)
    for flag in worker:
        if flag not in lead or worker[flag] != lead[flag]:
            out.append(
                Unexpressed(where, None, f"{flag} on headless ranks only or with its own value")
            )
    common = {k: v for k, v in lead.items() if k in worker}
    return common, {k: v for k, v in lead.items() if k not in worker}


def _args_and_settings(group: list[_Proc], where: str, out: list[Unexpressed]) -> dict[str, Any]:
    """Every other flag: a tunable setting, or an engine (or leader-only) argument."""
    leaders = [p for p in group if not p.has("--headless")]
    common, only_leader = _split_leader(group, where, out)
    settings: dict[str, Any] = {}
    engine_args: dict[str, Any] = {}
    for flag, occurrences in common.items():
        if len(occurrences) > 1:
            out.append(Unexpressed(where, None, f"{flag} given {len(occurrences)} times"))
        values = occurrences[-1]
        key = SETTING_FLAGS.get(flag)
        typed = _setting_value(key, values) if key else None
        if key and typed is not None:
            settings[key] = typed
        else:
            engine_args[_flag_key(flag)] = _arg_value(values)
    leader_args = {_flag_key(f): _arg_value(v[-1]) for f, v in only_leader.items()}
    # A leader with --data-parallel-start-rank but no --headless (a DP master given rank 0).
    start = leaders[0].one("--data-parallel-start-rank")
    if start is not None and not leaders[0].has("--data-parallel-rank"):
        leader_args["data_parallel_start_rank"] = _arg_value((start,))
    found: dict[str, Any] = {"settings": settings, "engine_args": engine_args}
    if leader_args:
        found["leader_args"] = leader_args
    return found


def _engine_env(group: list[_Proc], where: str, out: list[Unexpressed]) -> dict[str, Any]:
    """The variables every process of the engine sets, typed; the device list left to the Plan."""
    typed = [
        {
            name: _env_value(name, value, p.node, f"{where} {p.key}", out)
            for name, value in sorted(p.env.items())
            if name != DEVICE_ENV
        }
        for p in group
    ]
    first = typed[0]
    for p, other in zip(group[1:], typed[1:], strict=True):
        if other != first:
            names = sorted(k for k in set(first) | set(other) if first.get(k) != other.get(k))
            out.append(Unexpressed(where, None, f"{p.key}: environment differs in {names}"))
    return {k: v for k, v in first.items() if v is not None}


def unset_names(env: Mapping[str, Any]) -> list[str]:
    return sorted(k for k, v in env.items() if v == UNSET)


def _devices_env(group: list[_Proc], per_node: int) -> str | None:
    """The device list when the source names every device of the node (the Plan omits it)."""
    values = {p.env.get(DEVICE_ENV) for p in group}
    whole = ",".join(str(i) for i in range(per_node))
    return whole if values == {whole} else None


def _proxy(procs: list[_Proc], where: str, out: list[Unexpressed]) -> dict[str, Any] | None:
    if not procs:
        return None
    if len(procs) > 1:
        out.append(Unexpressed(where, None, f"{len(procs)} proxies; a layout has one"))
    p = procs[0]
    values = {f: v for f, v in p.flags}

    def refs(hosts: str, ports: str) -> list[dict[str, Any]]:
        pairs = list(zip(values.get(hosts, ()), values.get(ports, ()), strict=False))
        by_node: dict[int, list[int]] = {}
        for host, port in pairs:
            m = _NODE_IP.match(str(host))
            if m is None or _int(port) is None:
                out.append(
                    Unexpressed(where, None, f"proxy endpoint {host}:{port} is not a node's")
                )
                continue
            by_node.setdefault(int(m.group(1)), []).append(int(port))
        return [
            {"node": n, "ports": run} for n, ports_ in by_node.items() for run in port_runs(ports_)
        ]

    host = values.get("--host", ("0.0.0.0",))[0]
    m = _NODE_IP.match(str(host))
    proxy: dict[str, Any] = {
        "node": p.node,
        "host": {"node": "ip"} if m and int(m.group(1)) == p.node else host,
        "port": _int(values.get("--port", ("8080",))[0]),
        "mode": "pd",
    }
    proxy.update({pool: refs(*flags) for pool, flags in PROXY_BACKENDS.items()})
    known = {"--host", "--port", *(f for flags in PROXY_BACKENDS.values() for f in flags)}
    for flag in sorted(set(values) - known):
        out.append(Unexpressed(where, None, f"proxy flag {flag} has no field"))
    return proxy


def port_runs(ports: list[int]) -> list[str]:
    """Consecutive ports as runs, in the order given: ``7100-7103``, ``7110``."""
    runs: list[tuple[int, int]] = []
    for port in ports:
        if runs and port == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], port)
        else:
            runs.append((port, port))
    return [str(first) if first == last else f"{first}-{last}" for first, last in runs]


def _common_model(groups: list[list[_Proc]], path: str) -> dict[str, Any]:
    model: dict[str, Any] = {"path": path, "served_name": groups[0][0].one("--served-model-name")}
    quant = {g[0].one("--quantization") for g in groups}
    if len(quant) == 1 and None not in quant:
        model["quantization"] = quant.pop()
    lens = [_int(g[0].one("--max-model-len")) for g in groups]
    # An engine passing no --max-model-len runs at the engine's default (null): the model
    # states a length only when every engine passes one; an engine's own differs from it.
    model["max_model_len"] = None if None in lens else max(n for n in lens if n is not None)
    if all(g[0].has("--trust-remote-code") for g in groups):
        model["trust_remote_code"] = True
    return model


def _typed_engine(
    group: list[_Proc], name: str, model: dict[str, Any], where: str, out: list[Unexpressed]
) -> dict[str, Any]:
    """An engine's typed fields: role, shape, ports, KV connector, speculative config."""
    lead = group[0]
    kv = lead.kv or {}
    engine: dict[str, Any] = {"name": name, "role": role_of_kv(kv.get("kv_role"))}
    engine.update(_shape(group, where, out))
    engine.update(_kv(group, where, out))
    spec = _speculative(lead.one("--speculative-config"))
    if spec is not None:
        engine["speculative"] = spec
    elif lead.has("--speculative-config"):
        out.append(Unexpressed(where, None, "--speculative-config without a method"))
    own_name = lead.one("--served-model-name")
    if own_name != model["served_name"]:
        out.append(
            Unexpressed(
                where,
                None,
                f"a served model name of its own ({own_name!r}); rendered with the model's "
                f"{model['served_name']!r}",
            )
        )
    own_len = _int(lead.one("--max-model-len"))
    if own_len is not None and own_len != model["max_model_len"]:
        engine["max_model_len"] = own_len
    if lead.has("--quantization") != ("quantization" in model):
        out.append(Unexpressed(where, None, "--quantization on some engines only"))
    return engine


def _devices(engine: dict[str, Any], group: list[_Proc], per_node: int) -> None:
    """Partial nodes, and whether the source names the devices there (the Plan would)."""
    local = engine.get("dp_size_per_node", 1)
    if engine["tp"] * local < per_node:
        engine["partial_node"] = True
    one_process = engine["tp"] * (local if engine["launch"] == "builtin-dp" else 1)
    if one_process < per_node and all(DEVICE_ENV not in p.env for p in group):
        engine["visible_devices"] = False


def _role_data(
    group: list[_Proc], model: dict[str, Any], per_node: int, where: str, out: list[Unexpressed]
) -> dict[str, Any]:
    """What a profile role can hold: settings, flags, JSON config, env, bind host, cwd."""
    lead = group[0]
    data = _args_and_settings(group, where, out)
    if lead.has("--trust-remote-code") and not model.get("trust_remote_code"):
        data["engine_args"]["trust_remote_code"] = True
    additional = lead.one("--additional-config")
    if isinstance(additional, dict):
        data["additional_config"] = additional
    data["bind_host"] = lead.one("--host")
    data["cwd"] = lead.cwd
    env = _engine_env(group, where, out)
    devices = _devices_env(group, per_node)
    if devices is not None:
        env[DEVICE_ENV] = devices
    data["env"] = env
    return data


def _check_programs(engines: list[_Proc], folder: str, out: list[Unexpressed]) -> str:
    for p in engines:
        if p.program[:2] != ("vllm", "serve") or len(p.program) != 3:
            words = " ".join(p.program)
            out.append(
                Unexpressed(folder, None, f"{p.key}: program {words} is not vllm serve MODEL")
            )
    return sorted({p.program[-1] for p in engines})[0]


def synthesize(doc: Mapping[str, Any], name: str) -> Synthesis:
    """The layout data of one folder's facts (``doc`` in the fidelity fixture format)."""
    recorded = [
        Unexpressed(str(u.get("file")), u.get("line"), str(u.get("what")))
        for u in doc.get("unexpressed", ())
    ]
    # A variable exported twice: the facts hold the value the process got, which
    # the layout states as its one value; kept as a caveat, not lost.
    twice = [u for u in recorded if re.match(r"^[A-Za-z_][A-Za-z0-9_]* exported twice", u.what)]
    out = [u for u in recorded if u not in twice]
    folder = str(doc["source"]["folder"])
    procs = [_proc(p) for p in doc["processes"]]
    engines = [p for p in procs if p.kind == "engine"]
    accelerator, per_node = HARDWARE.get(LayoutName.parse(name).hardware, HARDWARE["a3"])
    groups = _engine_groups(engines)
    model = _common_model(groups, _check_programs(engines, folder, out))
    counts: dict[str, int] = {}
    engine_data: list[dict[str, Any]] = []
    roles = [role_of_kv((g[0].kv or {}).get("kv_role")) for g in groups]
    for group, role in zip(groups, roles, strict=True):
        counts[role] = counts.get(role, 0) + 1
        where = f"{folder} {group[0].key}"
        # A lone mixed engine is "mixed" (as the hand-made layouts name it), else role + index.
        label = role if roles == ["mixed"] else f"{role}{counts[role] - 1}"
        engine = _typed_engine(group, label, model, where, out)
        _devices(engine, group, per_node)
        engine["_role_data"] = _role_data(group, model, per_node, where, out)
        engine_data.append(engine)
    proxy = _proxy([p for p in procs if p.kind == "proxy"], folder, out)
    layerwise = any((p.kv or {}).get("kv_connector") == LAYERWISE_CONNECTOR for p in engines)
    if proxy is not None and layerwise:
        proxy["mode"] = "layerwise"
    layout: dict[str, Any] = {
        "name": name,
        "model": model,
        "hardware": {"accelerator": accelerator, "devices_per_node": per_node},
        "nodes": int(doc["nodes"]),
        "engines": engine_data,
    }
    if proxy is not None:
        layout["proxy"] = proxy
    caveats = [f"{u.text()} (the layout holds that value)" for u in twice]
    # What the layout cannot say stays in it, so layouts show and render name it too.
    caveats += [f"{NOT_EXPRESSED}{u.text()}" for u in out]
    return Synthesis(layout=layout, unexpressed=out, caveats=caveats)
