"""A ``vllm serve`` command line, read as vLLM reads it, into what the simulator needs.

``servekit sim serve MODEL [flags]`` must accept whatever a rendered launch
script runs. The flags that decide what a simulated engine is (address, role
and KV identity from ``--kv-transfer-config``, DP rank and size, TP, the guard
middleware, served name, context length, headless) are the fields of
:class:`VllmFlags`, parsed by the one generator
(:mod:`servekit.vocabulary.cliargs`), in both ``--flag value`` and
``--flag=value`` forms; every other flag is
accepted and recorded as given (``--no-X`` as ``X: false``), never evaluated.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
from typing import Any

from pydantic import Field, ValidationError, model_validator

from servekit.errors import UsageError, first_error
from servekit.guard import MIDDLEWARE_CLASS, guard_state
from servekit.kvprotocol import protocol_of
from servekit.vocabulary import (
    GuardMode,
    KvProtocol,
    Role,
    StrictModel,
    build_parser as build_argparser,
    dataclass_options,
    option,
    parse_known_values,
    role_of_kv,
)

_SIZE = re.compile(r"^(\d+(?:\.\d+)?)([kKmMgG]?)$")
_POWERS = {"": 0, "k": 1, "m": 2, "g": 3}

Flags = dict[str, str | bool | list[str]]


class VllmLaunch(StrictModel):
    """What one ``vllm serve`` process is, as its command line says."""

    argv: tuple[str, ...] = Field(description="the command line after 'serve', as given")
    model: str
    served_model_name: str
    host: str
    port: int = Field(ge=0, le=65535)
    role: Role
    kv_mode: KvProtocol
    guard_mode: GuardMode
    kv_connector: str | None
    kv_port: int = Field(ge=0, le=65535)
    engine_id: str | None
    dp_size: int = Field(ge=1)
    dp_rank: int | None = Field(description="--data-parallel-rank: this API server's own rank")
    dp_local: int = Field(ge=1, description="--data-parallel-size-local: ranks in this process")
    dp_start_rank: int = Field(ge=0, description="--data-parallel-start-rank")
    tp: int = Field(ge=1)
    headless: bool
    middleware: tuple[str, ...]
    guard: bool
    max_model_len: int | None
    prefix_caching: bool | None
    kv_events: dict[str, Any] | None = Field(
        default=None, description="--kv-events-config when it publishes (sim.kvevents)"
    )
    speed: float | None = Field(gt=0, description="the simulator's own --speed")
    shutdown_timeout: int = Field(
        default=0, ge=0, description="--shutdown-timeout: seconds requests may finish after SIGTERM"
    )
    ignored: Flags = Field(description="flags the simulator does not act on, as given")

    @model_validator(mode="after")
    def _ranks_fit(self) -> VllmLaunch:
        if max(self.ranks) >= self.dp_size:
            raise ValueError(
                f"DP rank {max(self.ranks)} is not below --data-parallel-size {self.dp_size}"
            )
        return self

    @property
    def ranks(self) -> tuple[int, ...]:
        """The DP ranks this process runs."""
        first = self.dp_rank if self.dp_rank is not None else self.dp_start_rank
        return tuple(range(first, first + (1 if self.dp_rank is not None else self.dp_local)))


@dataclasses.dataclass(frozen=True)
class VllmFlags:
    """The ``vllm serve`` flags the simulator acts on, as vLLM names and defaults them."""

    model: str | None = option(None, "the model, when not given first")
    host: str = option("0.0.0.0", "listen address")
    port: int = option(8000, "API port")
    served_model_name: tuple[str, ...] = option(
        (), "served name (the first one); default MODEL", nargs="+"
    )
    max_model_len: str | None = option(None, "context length: 32768, 128k (x1000), 1M (x1024x1024)")
    tensor_parallel_size: int = option(1, "TP size", short="-tp")
    data_parallel_size: int = option(1, "DP size", short="-dp")
    data_parallel_rank: int | None = option(None, "this API server's DP rank", short="-dpn")
    data_parallel_size_local: int | None = option(None, "DP ranks in this process", short="-dpl")
    data_parallel_start_rank: int = option(0, "first local rank", short="-dpr")
    headless: bool = option(False, "no API server: stay up until SIGTERM")
    kv_transfer_config: str | None = option(None, "JSON: kv_role, kv_connector, kv_port, engine_id")
    kv_events_config: str | None = option(
        None, "JSON: enable_kv_cache_events, publisher, endpoint, replay_endpoint, topic"
    )
    middleware: tuple[str, ...] = option((), "...DecodeGuardMiddleware: guard")
    enable_prefix_caching: bool | None = option(None, "prefix cache")
    speed: float | None = option(None, "virtual seconds per wall second (the simulator's own)")
    shutdown_timeout: int = option(
        0, "seconds in-flight requests may finish after SIGTERM; 0 (vLLM's default) aborts "
        "them at once", ge=0,
    )  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    """The flags the simulator acts on; everything else is left for :func:`group_flags`."""
    return build_argparser(
        dataclass_options(VllmFlags),
        prog="servekit sim serve MODEL",
        who="sim serve",
        hint="",
        add_help=False,
        description="One simulated engine from a 'vllm serve' command line. Flags not "
        "listed are accepted and recorded (engine log, GET /sim/state). Environment: "
        "SERVEKIT_SIM_PROFILE, SERVEKIT_SIM_SPEED, SERVEKIT_SIM_FAULTS, SERVEKIT_SIM_TRANSCRIPTS "
        "(docs/sim.md).",
    )


def wants_help(argv: list[str]) -> bool:
    return "--help" in argv or "-h" in argv


def group_flags(tokens: list[str]) -> Flags:
    """Unparsed tokens as flags: ``--x v``, ``--x=v``, ``--x`` (true), ``--no-x`` (false)."""
    out: Flags = {}
    name: str | None = None
    for token in tokens:
        if token.startswith("-") and not _is_number(token):
            name, _, value = token.lstrip("-").partition("=")
            if value:
                out[name] = value
            elif name.startswith("no-"):
                name = name[3:]
                out[name] = False
            else:
                out[name] = True
            continue
        if name is None:
            out.setdefault("", []).append(token)  # type: ignore[union-attr]
            continue
        prev = out[name]
        out[name] = token if isinstance(prev, bool) else [*_as_list(prev), token]
    return out


def _as_list(value: str | bool | list[str]) -> list[str]:
    return value if isinstance(value, list) else [str(value)]


def _is_number(token: str) -> bool:
    try:
        float(token)
    except ValueError:
        return False
    return True


def parse_size(text: str, flag: str) -> int:
    """vLLM's sizes: ``1048576``, ``128k`` (x1000), ``1M`` (x1024 x1024)."""
    match = _SIZE.match(text.strip())
    if match is None:
        raise UsageError(f"{flag} {text!r}: expected a number of tokens such as 32768, 128k or 1M")
    number, unit = match.groups()
    base = 1024 if unit.isupper() else 1000
    return int(float(number) * base ** _POWERS[unit.lower()])


def _kv_config(text: str | None) -> dict[str, Any]:
    if text is None:
        return {}
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise UsageError(f"--kv-transfer-config: not valid JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise UsageError("--kv-transfer-config: expected a JSON object")
    return doc


def _kv_events(text: str | None, first_rank: int) -> dict[str, Any] | None:
    """``--kv-events-config`` as the simulator's ``kv_events`` spec, None when it is off.

    As vLLM: ``publisher`` defaults to zmq when events are enabled, and each DP
    rank publishes on the endpoint's port plus its rank.
    """
    if text is None:
        return None
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise UsageError(f"--kv-events-config: not valid JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise UsageError("--kv-events-config: expected a JSON object")
    if doc.get("enable_kv_cache_events") is not True or doc.get("publisher", "zmq") != "zmq":
        return None
    out: dict[str, Any] = {}
    for key in ("endpoint", "replay_endpoint", "topic", "buffer_steps"):
        if doc.get(key) is not None:
            out[key] = _offset(doc[key], first_rank) if key.endswith("endpoint") else doc[key]
    return out


def _offset(endpoint: Any, rank: int) -> Any:
    if not isinstance(endpoint, str) or not endpoint.startswith("tcp://") or not rank:
        return endpoint
    base, _, port = endpoint.rpartition(":")
    return endpoint if not port.isdigit() or port == "0" else f"{base}:{int(port) + rank}"


def _kv_port(kv: dict[str, Any]) -> int:
    value = kv.get("kv_port", 0)
    try:
        return int(value)
    except (TypeError, ValueError):
        raise UsageError(f"--kv-transfer-config: kv_port {value!r} is not a port") from None


def parse_launch(argv: list[str]) -> VllmLaunch:
    """Read a ``vllm serve`` command line (without ``serve``); UsageError when it is wrong."""
    positional = argv[0] if argv and not argv[0].startswith("-") else None  # vllm serve MODEL
    given, unknown = parse_known_values(build_parser(), argv if positional is None else argv[1:])
    ns = VllmFlags(**given)
    model = positional or ns.model
    if not model:
        raise UsageError("sim serve: give the model, as 'vllm serve MODEL' does")
    try:
        return _launch(argv, ns, unknown, model=model)
    except ValidationError as exc:
        where, msg = first_error(exc, "command line")
        raise UsageError(f"sim serve: {where}: {msg.removeprefix('Value error, ')}") from None


def _engine_kind(kv: dict[str, Any]) -> str:
    """vLLM's own MooncakeConnector (bootstrap) is configured by ``mooncake_protocol``;
    a MooncakeConnector without it is vllm-ascend's (pull), as the A3/A2 scripts run it."""
    extra = kv.get("kv_connector_extra_config")
    return "vllm" if isinstance(extra, dict) and "mooncake_protocol" in extra else "vllm-ascend"


def _launch(argv: list[str], ns: VllmFlags, unknown: list[str], *, model: str) -> VllmLaunch:
    kv = _kv_config(ns.kv_transfer_config)
    middleware = ns.middleware
    connector = kv.get("kv_connector")
    return VllmLaunch(
        argv=tuple(argv),
        model=model,
        served_model_name=(ns.served_model_name or (model,))[0],
        host=ns.host,
        port=ns.port,
        role=role_of_kv(kv.get("kv_role")),
        kv_mode=protocol_of(connector, _engine_kind(kv))
        if isinstance(connector, str)
        else "params",
        guard_mode="prompt-keyed" if guard_state() == "prompt-keyed" else "strict",
        kv_connector=connector if isinstance(connector, str) else None,
        kv_port=_kv_port(kv),
        engine_id=str(kv["engine_id"]) if kv.get("engine_id") is not None else None,
        dp_size=ns.data_parallel_size,
        dp_rank=ns.data_parallel_rank,
        dp_local=ns.data_parallel_size_local or 1,
        dp_start_rank=ns.data_parallel_start_rank,
        tp=ns.tensor_parallel_size,
        headless=ns.headless,
        middleware=middleware,
        guard=any(m.endswith(MIDDLEWARE_CLASS) for m in middleware) and guard_state() != "off",
        max_model_len=(
            parse_size(ns.max_model_len, "--max-model-len") if ns.max_model_len else None
        ),
        prefix_caching=ns.enable_prefix_caching,
        kv_events=_kv_events(
            ns.kv_events_config,
            ns.data_parallel_rank
            if ns.data_parallel_rank is not None
            else ns.data_parallel_start_rank,
        ),
        speed=ns.speed,
        shutdown_timeout=ns.shutdown_timeout,
        ignored=group_flags(unknown),
    )
