"""The layout schema: one immutable model per ``layouts/<hardware>/<name>/layout.yaml``.

It encodes what the hand-kept folders held as prose (meta.yaml notes, README
tables): engines with their DP/TP shape and ports, the KV connector, the proxy's
fan-out, the image, and the provenance (source, derivation, deviations with
reasons, the verification record). Everything the seeds state is a field here,
so validation and rendering can check it instead of trusting it.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from servekit.catalog.names import LAYOUT_NAME
from servekit.defaults import SettingValue, check_settings
from servekit.vocabulary import (
    EndpointGroup,
    EngineKind,
    KvRole,
    LayoutProxyMode,
    Role,
    StrictModel,
)

Accelerator = Literal["ascend-a3", "ascend-a2", "nvidia", "cpu"]
LaunchMode = Literal["single", "builtin-dp", "external-dp"]
Capability = Literal["retrieval", "vision", "tools"]

ENGINE_KIND_OF: dict[Accelerator, EngineKind] = {
    "ascend-a3": "vllm-ascend",
    "ascend-a2": "vllm-ascend",
    "nvidia": "vllm",
    "cpu": "vllm-cpu",
}

_PORT_RANGE = re.compile(r"^(\d{1,5})(?:-(\d{1,5}))?$")
_ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
_FLAG_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
_CONTEXT = re.compile(r"^[1-9][0-9]{0,9}[km]?$")

# Bounds on every count, so that nothing is built from an absurd value: a Plan
# is computed (and scripts rendered) only from a layout these already passed.
MAX_NODES = 256
MAX_DEVICES = 1024
MAX_DP = 4096
MAX_TP = 1024
MAX_REPLICAS = 256
MAX_ENGINES = 256
MAX_PROCESSES = 4096
MAX_CONCURRENCY = 4096
MAX_MODEL_LEN = 1 << 30
PORT = Annotated[int, Field(ge=1, le=65535)]
NodeIndex = Annotated[int, Field(ge=0, lt=MAX_NODES)]
DeviceId = Annotated[int, Field(ge=0, lt=MAX_DEVICES)]
VERIFY_WORKLOADS = (
    "single-stream",
    "multi-stream",
    "prefill",
    "kv-capacity",
    "rate-sweep",
    "concurrency-sweep",
)


def _env_name(name: str) -> str:
    if not re.fullmatch(_ENV_NAME, name):
        raise ValueError(
            f"{name[:40]!r} is not an environment variable name; use letters, digits and _ "
            "(not a digit first), e.g. HCCL_BUFFSIZE"
        )
    return name


def _flag_name(name: str) -> str:
    if not _FLAG_NAME.match(name):
        raise ValueError(
            f"{name[:40]!r} is not a vLLM flag name; write the flag without its dashes, "
            "e.g. max_num_seqs or enforce_eager"
        )
    return name


def _no_leading_dash(text: str) -> str:
    if text.startswith("-"):
        raise ValueError(f"{text[:40]!r} starts with '-'; give a path, e.g. /root/kernel_cache")
    return text


def _shown_key(key: object) -> str:
    text = str(key)
    return text if re.fullmatch(r"[\w.-]{1,40}", text) else repr(text)[:40]


def refuse_nul(data: object, where: str = "") -> None:
    """No text anywhere in a layout or profile may hold a NUL character (argv cannot)."""
    stack: list[tuple[object, str]] = [(data, where)]
    while stack:
        item, path = stack.pop()
        if isinstance(item, str) and "\x00" in item:
            raise ValueError(f"{path or '(top level)'}: a NUL character; remove it")
        if isinstance(item, dict):
            stack.extend((v, f"{path}.{_shown_key(k)}".lstrip(".")) for k, v in item.items())
            stack.extend((k, f"{path}.{_shown_key(k)}".lstrip(".")) for k in item)
        elif isinstance(item, list | tuple):
            stack.extend((v, f"{path}.{i}".lstrip(".")) for i, v in enumerate(item))


EnvName = Annotated[str, AfterValidator(_env_name)]
FlagName = Annotated[str, AfterValidator(_flag_name)]
Settings = Annotated[dict[str, SettingValue], BeforeValidator(check_settings)]


class Model(StrictModel):
    """The served model and what it can do (capabilities gate acceptance checks)."""

    path: str = Field(description="model directory on every node")
    served_name: str
    quantization: str | None = None
    max_model_len: int | None = Field(
        gt=0,
        le=MAX_MODEL_LEN,
        description="every engine's --max-model-len; null: the engine's default (no flag is "
        "passed, so vLLM takes the model's own context length, as a source that passes none)",
    )
    capabilities: tuple[Capability, ...] = ()
    trust_remote_code: bool = False


class Hardware(StrictModel):
    accelerator: Accelerator
    devices_per_node: int = Field(
        ge=0, le=MAX_DEVICES, description="accelerator devices per node (0 on cpu)"
    )

    @field_validator("devices_per_node")
    @classmethod
    def _devices_here(cls, value: int, info: ValidationInfo) -> int:
        accelerator = info.data.get("accelerator")
        if value == 0 and accelerator not in (None, "cpu"):
            raise ValueError(
                f"0 devices on {accelerator}; give the devices of one node (16 on an A3 "
                "node); 0 is for cpu layouts only"
            )
        return value

    @property
    def engine_kind(self) -> EngineKind:
        return ENGINE_KIND_OF[self.accelerator]

    @property
    def is_ascend(self) -> bool:
        return self.accelerator.startswith("ascend")


class KVConnector(StrictModel):
    """vLLM's --kv-transfer-config, minus what the Plan fills in (engine_id, kv_port)."""

    name: str
    module_path: str | None = None
    role: KvRole
    extra_config: dict[str, Any] = Field(default_factory=dict)
    buffer_device: str | None = None


class Speculative(StrictModel):
    method: str
    num_speculative_tokens: int = Field(ge=1, le=64)
    enforce_eager: bool | None = None
    extra: dict[str, Any] = Field(default_factory=dict)

    def to_config(self) -> dict[str, Any]:
        cfg: dict[str, Any] = {
            "num_speculative_tokens": self.num_speculative_tokens,
            "method": self.method,
        }
        if self.enforce_eager is not None:
            cfg["enforce_eager"] = self.enforce_eager
        cfg.update(self.extra)
        return cfg


class NodeValue(StrictModel):
    """An environment value only the node knows when it starts: its IP or the NIC holding it.

    YAML: ``HCCL_IF_IP: {node: ip}``, ``GLOO_SOCKET_IFNAME: {node: nic}``.
    """

    node: Literal["ip", "nic"]


class Prepend(StrictModel):
    """A value put in front of the one the process inherits, as ``VAR=value:${VAR:-}``.

    YAML: ``LD_LIBRARY_PATH: {prepend: /usr/local/lib}``.
    """

    prepend: str = Field(min_length=1)
    sep: str = ":"


EnvValue = str | NodeValue | Prepend
ArgValue = bool | int | float | str | dict[str, Any] | list[Any]
EnvMap = dict[EnvName, EnvValue]
ArgMap = dict[FlagName, ArgValue]


class Engine(StrictModel):
    """One engine: a set of DP ranks sharing an engine_id, spread over ``nodes``.

    ``launch`` says how its ranks start: ``single`` (one ``vllm serve``),
    ``builtin-dp`` (one process per node; the first node's is the API master,
    the others run ``--headless``), ``external-dp`` (one API server per DP rank,
    started by servekit's per-rank launcher).
    """

    name: str = Field(pattern=r"^[a-z][a-z0-9_-]*$")
    role: Role
    profile: str | None = Field(
        default=None, description="the family profile its role's settings, flags and env come from"
    )
    nodes: tuple[NodeIndex, ...] = Field(min_length=1, max_length=MAX_NODES)
    launch: LaunchMode = "single"
    dp_size: int = Field(default=1, ge=1, le=MAX_DP)
    dp_size_per_node: int = Field(default=1, ge=1, le=MAX_DEVICES)
    tp: int = Field(default=1, ge=1, le=MAX_TP)
    expert_parallel: bool = False
    partial_node: bool = Field(default=False, description="uses fewer devices than a node has")
    visible_devices: bool = Field(
        default=True,
        description="set the device list variable on a partial node (false: the source sets "
        "none and the runtime takes the first devices)",
    )
    devices: tuple[DeviceId, ...] | None = Field(
        default=None,
        max_length=MAX_DEVICES,
        description="explicit device ids on its node (engines sharing a node)",
    )
    api_port: PORT = Field(description="first API port; external DP rank i adds i")
    rpc_port: PORT | None = None
    engine_id: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,63}$")
    kv_port: PORT | None = None
    kv_connector: KVConnector | None = None
    speculative: Speculative | None = None
    settings: Settings = Field(
        default_factory=dict,
        description="overrides of the defaults table (keys of `servekit defaults`, typed)",
    )
    engine_args: ArgMap = Field(
        default_factory=dict,
        description="further vLLM flags without leading dashes (true: bare flag; mapping or "
        "list: JSON)",
    )
    leader_args: ArgMap = Field(
        default_factory=dict,
        description="flags only the engine's API (leader) process gets, e.g. api_server_count",
    )
    additional_config: dict[str, Any] | None = None
    max_model_len: int | None = Field(
        default=None,
        gt=0,
        le=MAX_MODEL_LEN,
        description="this engine's --max-model-len where it differs from the model's",
    )
    env: EnvMap = Field(default_factory=dict)
    extra_args: tuple[str, ...] = ()
    bind_host: str | None = Field(
        default="0.0.0.0",
        description="--host of the API server (BIND_HOST overrides at launch); null: no --host",
    )
    cwd: Annotated[str, AfterValidator(_no_leading_dash)] | None = Field(
        default=None, description="working directory, created if missing (compile caches land here)"
    )
    replicas: int = Field(
        default=1, ge=1, le=MAX_REPLICAS, description="identical copies (local replica layouts)"
    )

    @field_validator("engine_id", mode="before")
    @classmethod
    def _engine_id_text(cls, value: object) -> object:
        """Engine ids are strings in vLLM's config; accept a bare YAML number too."""
        return str(value) if isinstance(value, int) and not isinstance(value, bool) else value

    @model_validator(mode="after")
    def _shape(self) -> Engine:
        if self.launch == "single" and self.dp_size != 1:
            raise ValueError("launch 'single' needs dp_size 1; use builtin-dp or external-dp")
        if self.dp_size % self.dp_size_per_node != 0:
            raise ValueError(
                f"dp_size {self.dp_size} is not a multiple of "
                f"dp_size_per_node {self.dp_size_per_node}"
            )
        last = self.api_port + self.ports_used - 1
        if last > 65535:
            raise ValueError(
                f"api_port {self.api_port} + {self.ports_used - 1} more ports runs past 65535; "
                "pick a lower api_port"
            )
        return self

    @property
    def ports_used(self) -> int:
        """API ports counted from ``api_port`` (a replica or external DP rank adds one)."""
        if self.launch == "external-dp":
            return self.dp_size_per_node
        return self.replicas if self.launch == "single" else 1

    @property
    def process_count(self) -> int:
        """How many processes the Plan will start for this engine."""
        if self.launch == "single":
            return self.replicas
        per_node = self.dp_size_per_node if self.launch == "external-dp" else 1
        return len(self.nodes) * per_node


class EndpointRef(StrictModel):
    """Endpoints the proxy fans out to: a node and a port or an inclusive range."""

    node: NodeIndex
    ports: str = Field(description="'7100' or '7100-7115'")

    @field_validator("ports", mode="before")
    @classmethod
    def _ports(cls, value: object) -> str:
        text = str(value) if isinstance(value, int | str) else repr(value)
        m = _PORT_RANGE.match(text)
        numbers = [int(g) for g in (m.groups() if m else ()) if g is not None]
        if not m or not all(1 <= n <= 65535 for n in numbers) or numbers != sorted(numbers):
            raise ValueError(
                f"ports {text[:40]!r} must be 'PORT' or 'FIRST-LAST' with 1 <= FIRST <= LAST "
                "<= 65535"
            )
        return text

    def expand(self) -> list[tuple[int, int]]:
        m = _PORT_RANGE.match(self.ports)
        assert m is not None
        first = int(m.group(1))
        last = int(m.group(2) or first)
        return [(self.node, p) for p in range(first, last + 1)]


class Proxy(StrictModel):
    node: NodeIndex = 0
    host: str | NodeValue = Field(
        default_factory=lambda: NodeValue(node="ip"),
        description="listen address; {node: ip} is the proxy node's own address",
    )
    port: PORT
    mode: LayoutProxyMode = "pd"
    admin: bool = Field(
        default=False,
        description="serve /admin/instances/* (off unless enabled; loopback only without a key)",
    )
    admin_key_env: str | None = Field(
        default=None, pattern=_ENV_NAME, description="variable holding the admin key (never argv)"
    )
    admin_key_file: str | None = Field(default=None, description="file holding the admin key")
    api_key_env: str | None = Field(
        default=None, pattern=_ENV_NAME, description="variable holding the client API key"
    )
    api_key_file: str | None = Field(default=None, description="file holding the client API key")
    prefill: tuple[EndpointRef, ...] = ()
    decode: tuple[EndpointRef, ...] = ()
    replicas: tuple[EndpointRef, ...] = ()

    def endpoints(self, which: EndpointGroup) -> list[tuple[int, int]]:
        return [ep for ref in getattr(self, which) for ep in ref.expand()]


class Verification(StrictModel):
    """The layout's hardware-verification record as the source states it."""

    verified: bool
    image: str | None = Field(default=None, description="image the verification was made on")
    date: dt.date | None = None
    evidence: str | None = None
    previously_verified: bool = Field(
        default=False, description="was verified on an earlier image, flipped off until re-run"
    )
    note: str | None = None


class Deviation(StrictModel):
    """Where servekit's command differs from the verified source's, and why.

    ``flag`` or ``env`` names what differs, ``engines`` where (empty: every engine
    it applies to); the fidelity test accepts a difference only when a deviation
    names it, and ``servekit layouts show`` lists each one.
    """

    what: str
    reason: str
    upstream: str | None = None
    flag: str | None = Field(default=None, pattern=r"^--[a-z0-9-]+$")
    env: str | None = Field(default=None, pattern=_ENV_NAME)
    process: Literal["engine", "proxy"] | None = Field(
        default=None, description="proxy: the proxy program itself is replaced"
    )
    engines: tuple[str, ...] = ()

    @property
    def names(self) -> str:
        """The flag or variable named, for messages (``--middleware``, ``PYTHONPATH``)."""
        return self.flag or self.env or (f"{self.process} program" if self.process else "")


class SourceRef(StrictModel):
    """The exact scripts a layout was taken from: repository, folder and commit."""

    repo: str = Field(description="owner/name of the public repository")
    folder: str
    commit: str = Field(pattern=r"^[0-9a-f]{7,40}$")


class Provenance(StrictModel):
    source: str = Field(description="upstream document or tutorial the layout comes from")
    source_document: str | None = Field(default=None, description="the seed page that lists it")
    source_ref: SourceRef | None = Field(
        default=None, description="the verified scripts this layout's commands must equal"
    )
    derived_from: str | None = None
    derived: dt.date | None = None
    source_deviations: tuple[Deviation, ...] = Field(
        default=(), description="what the source itself changed against its upstream tutorial"
    )
    deviations: tuple[Deviation, ...] = Field(
        default=(), description="what servekit's rendered commands change against the source"
    )
    verification: Verification
    notes: str = ""
    caveats: tuple[str, ...] = ()


class VerifyPlan(StrictModel):
    """What ``servekit verify`` runs for this layout."""

    workloads: tuple[str, ...] = ("single-stream", "multi-stream", "prefill")
    contexts: tuple[str, ...] = ()
    concurrency: tuple[int, ...] = Field(default=(1, 4, 8, 16), min_length=1, max_length=64)
    reference: str | None = Field(
        default=None,
        description="a single-instance layout of the same model, run beside this one so "
        "acceptance can check PD output == single (local and simulated runs)",
    )

    @field_validator("workloads")
    @classmethod
    def _known_workloads(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        for name in names:
            if name not in VERIFY_WORKLOADS:
                raise ValueError(
                    f"unknown workload {name[:40]!r}; use any of {', '.join(VERIFY_WORKLOADS)}"
                )
        return names

    @field_validator("contexts")
    @classmethod
    def _context_sizes(cls, sizes: tuple[str, ...]) -> tuple[str, ...]:
        for size in sizes:
            if not _CONTEXT.match(size):
                raise ValueError(
                    f"context {size[:40]!r} is not a size; write tokens such as 2k, 144k or 1m"
                )
        return sizes

    @field_validator("concurrency")
    @classmethod
    def _concurrency(cls, levels: tuple[int, ...]) -> tuple[int, ...]:
        for level in levels:
            if not 1 <= level <= MAX_CONCURRENCY:
                raise ValueError(
                    f"{level} concurrent requests is not a level; give whole numbers from 1 "
                    f"to {MAX_CONCURRENCY}, e.g. [1, 4, 16]"
                )
        return levels


class HostTuning(StrictModel):
    """A host setting a source launcher writes (cpufreq governor, sysctl): recorded, not applied.

    The rendered entry does not retune the host it starts on; each entry here is
    named by a deviation, so operators see what the source would have changed.
    """

    node: NodeIndex | None = Field(default=None, description="the node whose launcher writes it")
    path: str = Field(min_length=1, max_length=4096)
    value: str = Field(max_length=4096)
    file: str | None = Field(default=None, max_length=4096, description="the script writing it")
    line: int | None = Field(default=None, ge=1)


class Layout(StrictModel):
    name: str = Field(
        pattern=LAYOUT_NAME,
        description="<hardware>/<name>, or <hardware>/<model>/<topology> for imported layouts",
    )
    title: str
    summary: str
    model: Model
    hardware: Hardware
    nodes: int = Field(ge=1, le=MAX_NODES)
    image: str
    versions: dict[str, str] = Field(default_factory=dict)
    engines: tuple[Engine, ...] = Field(min_length=1, max_length=MAX_ENGINES)
    proxy: Proxy | None = None
    env: EnvMap = Field(default_factory=dict)
    host_tuning: tuple[HostTuning, ...] = Field(
        default=(), max_length=MAX_PROCESSES, description="host writes the source makes"
    )
    provenance: Provenance
    verify: VerifyPlan = VerifyPlan()

    @model_validator(mode="before")
    @classmethod
    def _no_nul(cls, data: object) -> object:
        refuse_nul(data)
        return data

    @model_validator(mode="after")
    def _bounded(self) -> Layout:
        total = sum(e.process_count for e in self.engines)
        if total > MAX_PROCESSES:
            raise ValueError(
                f"the engines start {total} processes; at most {MAX_PROCESSES} (check nodes, "
                "dp_size_per_node and replicas)"
            )
        return self

    @property
    def engine_kind(self) -> EngineKind:
        return self.hardware.engine_kind

    @property
    def is_pd(self) -> bool:
        roles = {e.role for e in self.engines}
        return "prefill" in roles and "decode" in roles
