"""The proxy's configuration: one frozen model, parsed once from the command line.

``python -m servekit.proxy`` and ``servekit proxy`` both go through
:func:`parse_args`, so the two entry points cannot drift. Bad input becomes a
:class:`~servekit.errors.UsageError` naming the flag and the fix.
"""

from __future__ import annotations

import argparse
from typing import Any, Literal, NoReturn, get_args, get_origin
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.fields import FieldInfo

from servekit.errors import UsageError

Mode = Literal["pd", "prompt-keyed", "replica"]
PolicyName = Literal["least-loaded", "round-robin", "prefix-affinity"]
LogLevel = Literal["debug", "info", "warning", "error"]
POLICY_NAMES: tuple[PolicyName, ...] = ("least-loaded", "round-robin", "prefix-affinity")


class ProxyConfig(BaseModel):
    """Everything the proxy process needs; immutable after start.

    Each field is one flag (``--`` + the name in kebab case, ``_s`` dropped); its
    description is the flag's help, so the model and the command line cannot drift.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    prefill: tuple[str, ...] = Field((), description="prefill instances (http://HOST:PORT)")
    decode: tuple[str, ...] = Field((), description="decode instances")
    replica: tuple[str, ...] = Field((), description="replicas, no PD (excludes the two above)")
    mode: Mode = Field("pd", description="PD flavour; replica mode follows from --replica")
    host: str = Field("127.0.0.1", description="address to listen on")
    port: int = Field(8000, ge=0, le=65535, description="port to listen on (0: any free one)")
    api_key: str | None = Field(None, description="Bearer key required, forwarded to backends")
    prefill_policy: PolicyName = Field("least-loaded", description="how prefill is chosen")
    decode_policy: PolicyName = Field("least-loaded", description="how decode/replica is chosen")
    debug: bool = Field(False, description="name backend URLs in error bodies")
    max_body_bytes: int = Field(64 * 1024 * 1024, gt=0, description="larger bodies get 413")
    connect_timeout_s: float = Field(5.0, gt=0, description="per connection attempt")
    prefill_timeout_s: float = Field(600.0, gt=0, description="whole prefill exchange")
    decode_timeout_s: float = Field(
        3600.0, gt=0, description="first byte of a stream, or a whole unstreamed answer"
    )
    stream_idle_timeout_s: float = Field(300.0, gt=0, description="longest gap between chunks")
    max_attempts: int = Field(3, ge=1, le=10, description="instances tried per stage")
    retry_backoff_s: float = Field(0.05, ge=0, description="first retry delay, then doubled")
    health_interval_s: float = Field(2.0, gt=0, description="between probe rounds")
    health_timeout_s: float = Field(2.0, gt=0, description="a slower probe fails")
    eject_after: int = Field(3, ge=1, description="failed probes before ejection")
    readmit_after: int = Field(2, ge=1, description="good probes before re-admission")
    prefix_chars: int = Field(512, ge=1, description="prompt prefix keyed by prefix-affinity")
    log_level: LogLevel = Field("info", description="log verbosity")

    @property
    def stage_roles(self) -> tuple[str, ...]:
        """The instance roles this mode routes to."""
        return ("replica",) if self.mode == "replica" else ("prefill", "decode")


# Choices offered on the command line where they differ from the field's type.
FLAG_CHOICES = {"mode": ("pd", "prompt-keyed")}


class _Parser(argparse.ArgumentParser):
    """argparse that raises UsageError instead of printing usage and exiting."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"proxy: {message}; see --help")


def flag_of(field: str) -> str:
    return "--" + field.removesuffix("_s").replace("_", "-")


def _add_flag(p: argparse.ArgumentParser, name: str, info: FieldInfo) -> None:
    kw: dict[str, Any] = {"dest": name, "default": argparse.SUPPRESS}
    helptext = info.description or ""
    if info.annotation is bool:
        p.add_argument(flag_of(name), action="store_true", help=helptext, **kw)
        return
    if name in ("prefill", "decode", "replica"):
        kw.update(nargs="+", metavar="URL")
    elif name in FLAG_CHOICES or get_origin(info.annotation) is Literal:
        kw["choices"] = FLAG_CHOICES.get(name) or get_args(info.annotation)
    elif info.annotation in (int, float):
        kw["type"] = info.annotation
        kw["metavar"] = "SECONDS" if name.endswith("_s") else ("PORT" if name == "port" else "N")
    if info.default not in ((), None):
        helptext += f" (default {info.default})"
    p.add_argument(flag_of(name), help=helptext, **kw)


def build_parser() -> argparse.ArgumentParser:
    """The flags of ``python -m servekit.proxy`` (and ``servekit proxy``), from the model."""
    p = _Parser(prog="servekit proxy", description="PD / replica router with the decode guard.")
    for name, info in ProxyConfig.model_fields.items():
        _add_flag(p, name, info)
    return p


def check_url(flag: str, url: str) -> str:
    """One backend URL, normalised without a trailing slash."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise UsageError(f"{flag} {url}: expected http://HOST:PORT")
    return url.rstrip("/")


def _check_topology(prefill: list[str], decode: list[str], replica: list[str]) -> None:
    if replica and (prefill or decode):
        raise UsageError("--replica cannot be combined with --prefill/--decode; pick one topology")
    if not replica and not (prefill and decode):
        raise UsageError("give --prefill URL... and --decode URL... (PD) or --replica URL...")


def parse_args(argv: list[str]) -> ProxyConfig:
    """Parse and validate the command line into a :class:`ProxyConfig`."""
    ns = vars(build_parser().parse_args(argv))
    for role in ("prefill", "decode", "replica"):
        ns[role] = tuple(check_url(f"--{role}", u) for u in ns.get(role, ()))
    _check_topology(list(ns["prefill"]), list(ns["decode"]), list(ns["replica"]))
    if ns["replica"]:
        if "mode" in ns:
            raise UsageError("--mode applies to PD (--prefill/--decode); drop it with --replica")
        ns["mode"] = "replica"
    try:
        return ProxyConfig(**ns)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise UsageError(f"{flag_of(str(err['loc'][0]))}: {err['msg']}") from None


def to_argv(config: ProxyConfig) -> list[str]:
    """The flags that reproduce ``config`` (defaults left out), for launchers.

    ``servekit up`` and the renderer build a :class:`ProxyConfig` and run
    ``python -m servekit.proxy *to_argv(config)``, so no launcher spells a flag.
    """
    argv: list[str] = []
    defaults = ProxyConfig.model_fields
    for name, value in config.model_dump().items():
        if name == "mode" and value == "replica":
            continue  # follows from --replica
        if value == defaults[name].default:
            continue
        flag = flag_of(name)
        if isinstance(value, bool):
            argv.append(flag)
        elif isinstance(value, tuple | list):
            argv += [flag, *value]
        else:
            argv.append(f"{flag}={value}")  # "=" keeps values such as "-x" values
    return argv
