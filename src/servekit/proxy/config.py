"""The proxy's configuration: one frozen model, parsed once from the command line.

``python -m servekit.proxy`` and ``servekit proxy`` both go through
:func:`parse_args`, so the two entry points cannot drift. Bad input becomes a
:class:`~servekit.errors.UsageError` naming the flag and the fix.
"""

from __future__ import annotations

import argparse
from typing import Literal, NoReturn
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from servekit.errors import UsageError

Mode = Literal["pd", "prompt-keyed", "replica"]
PolicyName = Literal["least-loaded", "round-robin", "prefix-affinity"]
POLICY_NAMES: tuple[PolicyName, ...] = ("least-loaded", "round-robin", "prefix-affinity")


class ProxyConfig(BaseModel):
    """Everything the proxy process needs; immutable after start."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    mode: Mode = "pd"
    prefill: tuple[str, ...] = ()
    decode: tuple[str, ...] = ()
    replica: tuple[str, ...] = ()
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    api_key: str | None = None
    prefill_policy: PolicyName = "least-loaded"
    decode_policy: PolicyName = "least-loaded"
    debug: bool = False
    max_body_bytes: int = Field(default=64 * 1024 * 1024, gt=0)
    connect_timeout_s: float = Field(default=5.0, gt=0)
    prefill_timeout_s: float = Field(default=600.0, gt=0)
    decode_timeout_s: float = Field(default=3600.0, gt=0)
    stream_idle_timeout_s: float = Field(default=300.0, gt=0)
    max_attempts: int = Field(default=3, ge=1, le=10)
    retry_backoff_s: float = Field(default=0.05, ge=0)
    health_interval_s: float = Field(default=2.0, gt=0)
    health_timeout_s: float = Field(default=2.0, gt=0)
    eject_after: int = Field(default=3, ge=1)
    readmit_after: int = Field(default=2, ge=1)
    prefix_chars: int = Field(default=512, ge=1)
    log_level: str = "info"

    @property
    def stage_roles(self) -> tuple[str, ...]:
        """The instance roles this mode routes to."""
        return ("replica",) if self.mode == "replica" else ("prefill", "decode")


class _Parser(argparse.ArgumentParser):
    """argparse that raises UsageError instead of printing usage and exiting."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"proxy: {message}; see --help")


def build_parser() -> argparse.ArgumentParser:
    """The flags of ``python -m servekit.proxy`` (and ``servekit proxy``)."""
    p = _Parser(prog="servekit proxy", description="PD / replica router with the decode guard.")
    p.add_argument("--prefill", nargs="+", default=[], metavar="URL", help="prefill instances")
    p.add_argument("--decode", nargs="+", default=[], metavar="URL", help="decode instances")
    p.add_argument("--replica", nargs="+", default=[], metavar="URL", help="replicas (no PD)")
    p.add_argument("--mode", choices=("pd", "prompt-keyed"), help="PD flavour (default pd)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--api-key", help="Bearer key required from clients, forwarded to backends")
    p.add_argument("--prefill-policy", choices=POLICY_NAMES, default="least-loaded")
    p.add_argument("--decode-policy", choices=POLICY_NAMES, default="least-loaded")
    p.add_argument("--debug", action="store_true", help="name backend URLs in error bodies")
    p.add_argument("--max-body-bytes", type=int, default=64 * 1024 * 1024)
    p.add_argument("--connect-timeout", type=float, default=5.0, dest="connect_timeout_s")
    p.add_argument("--prefill-timeout", type=float, default=600.0, dest="prefill_timeout_s",
                   help="whole prefill exchange")  # fmt: skip
    p.add_argument("--decode-timeout", type=float, default=3600.0, dest="decode_timeout_s",
                   help="first byte of a stream, or a whole unstreamed answer")  # fmt: skip
    p.add_argument("--stream-idle-timeout", type=float, default=300.0, dest="stream_idle_timeout_s")
    p.add_argument("--max-attempts", type=int, default=3, help="tries per stage on connect errors")
    p.add_argument("--retry-backoff", type=float, default=0.05, dest="retry_backoff_s")
    p.add_argument("--health-interval", type=float, default=2.0, dest="health_interval_s")
    p.add_argument("--health-timeout", type=float, default=2.0, dest="health_timeout_s")
    p.add_argument("--eject-after", type=int, default=3, help="failed probes before ejection")
    p.add_argument("--readmit-after", type=int, default=2, help="good probes before re-admission")
    p.add_argument("--prefix-chars", type=int, default=512, help="prompt prefix for affinity")
    p.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
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
    _check_topology(ns["prefill"], ns["decode"], ns["replica"])
    if ns["replica"] and ns["mode"]:
        raise UsageError("--mode applies to PD (--prefill/--decode); drop it with --replica")
    for role in ("prefill", "decode", "replica"):
        ns[role] = tuple(check_url(f"--{role}", u) for u in ns[role])
    ns["mode"] = "replica" if ns["replica"] else (ns["mode"] or "pd")
    try:
        return ProxyConfig(**ns)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = str(err["loc"][0]).removesuffix("_s").replace("_", "-")
        raise UsageError(f"--{field}: {err['msg']}") from None
