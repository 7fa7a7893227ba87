"""What to simulate: the endpoints, their roles and identities, profiles and faults.

A :class:`SimSpec` is the one input of the simulator. servekit's planner converts
a layout's Plan into one (``servekit up NAME --engine sim``); people write one by
hand as JSON or YAML (``servekit sim --spec FILE``) or build a quick one
(``servekit sim --endpoints N``, :func:`servekit.sim.options.quick_spec`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, ValidationError, model_validator

from servekit import safeyaml
from servekit.errors import UsageError, first_error
from servekit.kvprotocol import kv_engine_id
from servekit.sim.faults import FaultSpec
from servekit.sim.profile import Profile, load_profile
from servekit.vocabulary import GuardMode, KvProtocol, Role, StrictModel

KvPeers = Literal["process", "any"]
MAX_BOOTSTRAP_RANKS = 1024  # DP ranks one bootstrap server answers for


def _bind_address(host: str) -> str:
    """An empty listen address binds every interface while it reads like none: refused."""
    if not host.strip("[] "):
        raise ValueError(
            "an empty address would listen on every interface; give one "
            "(127.0.0.1: this machine only; 0.0.0.0: every interface, said so)"
        )
    return host


BindHost = Annotated[str, AfterValidator(_bind_address)]


class KvEventsSpec(StrictModel):
    """vLLM's ``--kv-events-config``: where the engine publishes its KV events (sim.kvevents)."""

    endpoint: str = Field(
        default="tcp://*:5557", description="PUB socket; * binds the endpoint's host, port 0 a "
        "free port",
    )  # fmt: skip
    replay_endpoint: str | None = Field(default=None, description="ROUTER socket for replays")
    topic: str = ""
    buffer_steps: int = Field(default=10_000, ge=1, description="batches kept for replay")


class EndpointSpec(StrictModel):
    """One simulated API server (a DP rank or an instance) on its own port."""

    name: str = Field(min_length=1)
    host: BindHost = "127.0.0.1"
    port: int = Field(ge=0, le=65535, description="0 picks a free port")
    role: Role = "mixed"
    engine_id: str | None = Field(default=None, description="defaults to the endpoint name")
    kv_port: int = Field(default=0, ge=0, le=65535)
    kv_mode: KvProtocol = Field(
        default="params",
        description="params: pull kv_transfer_params; bootstrap: the proxy's transfer_id "
        "(vLLM's MooncakeConnector); prompt: KV found by prompt; layerwise: "
        "decoder first, it calls the metaserver, prefill pushes the KV (sim.layerwise)",
    )
    kv_connector: str = Field(
        default="NixlConnector", description="the connector whose kv_transfer_params shape is used"
    )
    metaservers: tuple[str, ...] = Field(
        default=(), description="layerwise decoder: the proxy URLs its guard trusts "
        "(SERVEKIT_GUARD_METASERVER)",
    )  # fmt: skip
    kv_peers: KvPeers = Field(
        default="process",
        description="process: KV moves between endpoints of this process only (checked); "
        "any: engines run one per process (sim serve), so decode trusts well-formed "
        "kv_transfer_params and prefill frees its blocks once offered",
    )
    dp_rank: int = Field(default=0, ge=0)
    dp_size: int = Field(default=1, ge=1)
    tp: int = Field(default=1, ge=1)
    bootstrap_port: int | None = Field(
        default=None, ge=1, le=65535, description="bootstrap mode, a prefill: where its "
        "bootstrap server listens (vLLM: VLLM_MOONCAKE_BOOTSTRAP_PORT); default its side_port "
        "(kv_port + dp_rank x tp)",
    )  # fmt: skip
    bootstrap_ranks: dict[str, int] | None = Field(
        default=None, description="bootstrap mode: the entries its bootstrap server's /query "
        "answers, key -> the global DP rank whose engine id it names (vLLM's internal load "
        "balancing: every rank of the engine registers with rank 0's server, keyed by rank); "
        "default {'0': dp_rank} (each API server its own server, as external load balancing)",
    )  # fmt: skip
    kv_host: str | None = Field(
        default=None, description="the address its KV workers advertise (vLLM: VLLM_HOST_IP); "
        "default its host, 127.0.0.1 where that is a wildcard",
    )  # fmt: skip
    served_model_name: str = "sim-model"
    max_model_len: int = Field(default=32768, ge=16)
    profile: str | Profile = "zero"
    guard: bool = Field(default=False, description="decode guard loaded")
    guard_mode: GuardMode = Field(
        default="strict",
        description="strict: remote prefill only; prompt-keyed: also servekit's marker "
        "(SERVEKIT_DECODE_GUARD, as the real guard reads it)",
    )
    unguarded_incident: bool = Field(
        default=False, description="a request needing local prefill kills the engine"
    )
    disagree_seed: int | None = Field(default=None, description="makes this output differ")
    retrieval: bool = Field(default=True, description="answer needle questions correctly")
    vision: bool = Field(
        default=True, description="read images (their colours); false: images get 400"
    )
    responses_api: bool = Field(default=True, description="serve /v1/responses; false: 404")
    reasoning_parser: bool = Field(
        default=False, description="chat streams thinking as delta.reasoning "
        "(vLLM's --reasoning-parser; the request asks with chat_template_kwargs.thinking)",
    )  # fmt: skip
    tool_call_parser: bool = Field(
        default=False, description="chat streams a tool call as delta.tool_calls "
        "(vLLM's --tool-call-parser with --enable-auto-tool-choice)",
    )  # fmt: skip
    node: str | None = Field(
        default=None, description="the node it runs on (a lost node takes all its endpoints)"
    )
    default_max_tokens: int | None = Field(
        default=None, ge=1, description="the model's generation config max_new_tokens: the "
        "limit of a chat request that sets none (vLLM's default_sampling_params)",
    )  # fmt: skip
    faults: FaultSpec = FaultSpec()
    kv_events: KvEventsSpec | None = Field(
        default=None, description="publish KV events (vLLM's --kv-events-config)"
    )
    launch: dict[str, Any] | None = Field(
        default=None, description="the vllm serve command line this endpoint stands for"
    )
    log: Path | None = Field(default=None, description="engine log file (KV cache size line)")

    @model_validator(mode="after")
    def _check(self) -> EndpointSpec:
        if self.dp_rank >= self.dp_size:
            raise ValueError(f"dp_rank {self.dp_rank} must be below dp_size {self.dp_size}")
        if self.unguarded_incident and self.role != "decode":
            raise ValueError("unguarded_incident applies to role decode only")
        ranks = self.bootstrap_ranks
        if ranks is not None and (not ranks or len(ranks) > MAX_BOOTSTRAP_RANKS):
            raise ValueError(f"bootstrap_ranks: give 1 to {MAX_BOOTSTRAP_RANKS} entries")
        if ranks is not None and any(not 0 <= r < self.dp_size for r in ranks.values()):
            raise ValueError(f"bootstrap_ranks: every rank must be below dp_size {self.dp_size}")
        return self

    @property
    def engine(self) -> str:
        return self.engine_id if self.engine_id is not None else self.name

    @property
    def side_port(self) -> int:
        """The KV side-channel port a prefill instance advertises (kv_port + dp_rank x tp)."""
        return self.kv_port + self.dp_rank * self.tp

    @property
    def kv_engine_id(self) -> str:
        """The engine id its KV connector goes by: vLLM's ``<id>_dp<rank>`` under DP."""
        return kv_engine_id(self.engine, self.dp_rank, self.dp_size)

    @property
    def bootstrap_server_port(self) -> int:
        """Where its bootstrap server listens (bootstrap mode)."""
        return self.bootstrap_port if self.bootstrap_port is not None else self.side_port

    @property
    def worker_host(self) -> str:
        """The address its KV workers advertise to decoders."""
        if self.kv_host:
            return self.kv_host
        return "127.0.0.1" if self.host.strip("[]") in ("0.0.0.0", "::") else self.host

    def resolved_profile(self) -> Profile:
        return self.profile if isinstance(self.profile, Profile) else load_profile(self.profile)


class AdminSpec(StrictModel):
    """The admin server: faults and state of every endpoint in one place."""

    host: BindHost = "127.0.0.1"
    port: int = Field(ge=0, le=65535)


class SimSpec(StrictModel):
    """Everything one simulator process serves."""

    endpoints: tuple[EndpointSpec, ...] = Field(min_length=1)
    admin: AdminSpec | None = None
    time_scale: float = Field(
        default=1.0, gt=0, description="wall seconds per virtual second (0.1 = 10x faster)"
    )
    seed: int = Field(default=0, description="seed of fault draws")

    @property
    def speed(self) -> float:
        """Virtual seconds per wall second (``--speed``): the inverse of ``time_scale``."""
        return 1.0 / self.time_scale

    def at_speed(self, speed: float) -> SimSpec:
        """This spec run ``speed`` times faster than real time (``time_scale = 1/speed``)."""
        if speed <= 0:
            raise UsageError(f"--speed {speed}: must be above 0 (1 = real time, 50 = 50x faster)")
        return self.model_copy(update={"time_scale": 1.0 / speed})

    @model_validator(mode="after")
    def _check(self) -> SimSpec:
        names = [e.name for e in self.endpoints]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"endpoint names must be unique; repeated: {', '.join(dup)}")
        bound = [(e.host, e.port) for e in self.endpoints if e.port != 0]
        if self.admin is not None and self.admin.port != 0:
            bound.append((self.admin.host, self.admin.port))
        clash = sorted({f"{h}:{p}" for h, p in bound if bound.count((h, p)) > 1})
        if clash:
            raise ValueError(f"each endpoint needs its own host:port; repeated: {', '.join(clash)}")
        roles: dict[str, str] = {}
        for e in self.endpoints:
            if roles.setdefault(e.engine, e.role) != e.role:
                raise ValueError(f"engine_id {e.engine} is used by endpoints of different roles")
        return self


def spec_from_mapping(data: Any, where: str = "spec") -> SimSpec:
    """Validate a mapping as a SimSpec; the first problem becomes one UsageError line."""
    try:
        spec = SimSpec.model_validate(data)
    except ValidationError as exc:
        loc, msg = first_error(exc)
        raise UsageError(f"{where}: field {loc}: {msg}") from exc
    for ep in spec.endpoints:
        ep.resolved_profile()
    return spec


def load_spec(path: Path) -> SimSpec:
    """Read a spec file: ``.json``, or YAML for ``.yaml``/``.yml``."""
    if not path.is_file():
        raise UsageError(f"--spec {path}: no such file; write a SimSpec as JSON or YAML")
    where = f"--spec {path}"
    text = safeyaml.decode(safeyaml.read_bytes(path, where), where)
    if path.suffix != ".json":
        return spec_from_mapping(safeyaml.compose(text, where)[1], where=where)
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        reason = (str(exc).splitlines() or ["nested too deeply"])[0]
        raise UsageError(f"{where}: not valid JSON ({reason}); fix the file") from None
    return spec_from_mapping(data, where=where)
