"""The proxy's configuration: one frozen dataclass, whose fields generate the parser.

``python -m servekit.proxy`` and the zipapp go through :func:`parse_args`,
``servekit proxy`` through the typer command generated from the same fields,
and both end in :func:`config_from_values`, so the entry points cannot drift.
Each field's metadata (help, flag, choices, bounds) is one row of the field
table :mod:`servekit.vocabulary.cliargs` reads: it builds the argparse flag and
checks the value (in ``__post_init__``, so code that builds a config directly
gets the same checks); bad input becomes a one-line
:class:`~servekit.errors.UsageError` naming the flag and the fix. Standard
library only (``cliargs`` too, bundled in the zipapp), so the proxy runs where
only aiohttp is installed.

Keys never travel in argv (``ps`` shows argv to every user): the client API key
and the admin key are read from an environment variable or a file named by a
flag, and only those names go in argv.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from servekit.errors import UsageError
from servekit.guard import metaserver_key
from servekit.kvprotocol import handoff_of_mode
from servekit.proxy.discovery_spec import DiscoverySpec, load_spec
from servekit.proxy.policies import KV_POLICY, POLICY_NAMES
from servekit.vocabulary import (
    PD_ROLES,
    PROXY_MODES,
    PROXY_POOLS,
    OptionSpec,
    build_parser as build_argparser,
    check_fields,
    check_url,
    dataclass_options,
    option as opt,
    parse_values,
)

LOG_LEVELS = ("debug", "info", "warning", "error")
KEY_FLAGS = ("--api-key", "--admin-key")
DISCOVERY_SOURCES = ("off", "kubernetes")
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


@dataclass(frozen=True)
class ProxyConfig:
    """Everything the proxy process needs; immutable after start.

    Each field is one flag (``--`` + the name in kebab case, ``_s`` dropped) unless
    its metadata says ``flag=False``; its help is the flag's help.
    """

    prefill: tuple[str, ...] = opt((), "prefill instances (http://HOST:PORT)", metavar="URL",
                                   nargs="+")  # fmt: skip
    decode: tuple[str, ...] = opt((), "decode instances", metavar="URL", nargs="+")
    replica: tuple[str, ...] = opt((), "replicas, no PD (excludes the two above)", metavar="URL",
                                   nargs="+")  # fmt: skip
    mode: str = opt("pd", "PD flavour (pd: pull, the prefill's kv_transfer_params; bootstrap: "
                    "vLLM's MooncakeConnector; prompt-keyed: ExampleConnector; layerwise: vllm-ascend's MooncakeLayerwiseConnector); replica mode "
                    "follows from --replica", choices=PROXY_MODES[:4], allowed=PROXY_MODES)  # fmt: skip
    prefill_bootstrap: tuple[str, ...] = opt(
        (), "bootstrap mode: ENGINE_ID=http://HOST:PORT of each --prefill's bootstrap server, "
        "in --prefill order", metavar="ID=URL", nargs="+",
    )  # fmt: skip
    metaserver_url: str | None = opt(
        None, "layerwise: the URL decoders call back with their blocks (default "
        "http://HOST:PORT/v1/metaserver; needed when --host is a wildcard)", metavar="URL",
    )  # fmt: skip
    metaserver_timeout_s: float = opt(300.0, "layerwise: longest wait for a decoder's call to "
                                      "/v1/metaserver (it comes when the decoder schedules the "
                                      "request)", gt=0)  # fmt: skip
    host: str = opt("127.0.0.1", "address to listen on")
    port: int = opt(8000, "port to listen on (0: any free one)", ge=0, le=65535, metavar="PORT")
    api_key: str | None = opt(None, "client key (in-process only)", flag=False, repr=False)
    api_key_env: str | None = opt(
        None, "environment variable holding the key clients must send as Bearer", metavar="NAME"
    )
    api_key_file: str | None = opt(None, "file holding that key (first line)", metavar="PATH")
    admin: bool = opt(False, "serve /admin/* and /instances/* (off: 404)")
    admin_key: str | None = opt(None, "admin key (in-process only)", flag=False, repr=False)
    admin_key_env: str | None = opt(
        None, "environment variable holding the admin key; without a key, admin answers "
        "loopback clients only", metavar="NAME",
    )  # fmt: skip
    admin_key_file: str | None = opt(None, "file holding the admin key", metavar="PATH")
    prefill_policy: str = opt("least-loaded", "how prefill is chosen", choices=POLICY_NAMES)
    decode_policy: str = opt("least-loaded", "how decode/replica is chosen", choices=POLICY_NAMES)
    debug: bool = opt(False, "name backend URLs in error bodies")
    max_body_bytes: int = opt(64 * 1024 * 1024, "larger bodies get 413", gt=0)
    max_parse_bytes: int = opt(256 * 1024 * 1024, "a request body whose parse would take more "
                               "than this (2 x its bytes + 64 per comma + 144 per colon) "
                               "gets 413", gt=0)  # fmt: skip
    memory_budget: int = opt(2 * 1024**3, "bytes of bodies (requests, answers, parses) held "
                             "at once across all requests; past it a request gets 503",
                             gt=0)  # fmt: skip
    parse_workers: int = opt(1, "processes that parse bodies larger than --parse-inline-bytes, "
                             "so the event loop serves meanwhile (0: all parsed on the loop)",
                             ge=0, le=64)  # fmt: skip
    parse_inline_bytes: int = opt(1024 * 1024, "bodies (requests, unstreamed answers) up to "
                                  "this size are parsed on the event loop, larger ones by a "
                                  "--parse-workers process", ge=0)  # fmt: skip
    parse_worker_rss: int = opt(64 * 1024 * 1024, "a parse worker whose resident memory "
                                "passes this once it is idle is replaced by a fresh one (about "
                                "40 MB; CPython keeps much of a big parse's heap; 0: never)",
                                ge=0)  # fmt: skip
    max_answer_bytes: int = opt(64 * 1024 * 1024, "an engine's unstreamed answer larger than "
                                "this is a 502", gt=0)  # fmt: skip
    header_timeout_s: float = opt(60.0, "request line and headers must arrive within this "
                                  "(from connect, or a keep-alive request's first byte); "
                                  "then 408 and close", gt=0, le=3600)  # fmt: skip
    body_timeout_s: float = opt(60.0, "a request body must arrive within this after its "
                                "headers; then 408 and close", gt=0, le=3600)  # fmt: skip
    send_timeout_s: float = opt(60.0, "a write to a client that takes none of it for this long "
                                "closes the connection and the engine's request",
                                gt=0, le=3600)  # fmt: skip
    keepalive_timeout_s: float = opt(75.0, "an idle keep-alive connection is closed after this",
                                     gt=0, le=3600)  # fmt: skip
    max_connections: int = opt(4096, "open client connections; at the cap the longest-waiting "
                               "idle or slow one is closed (503 when all are busy); lowered "
                               "to fit the fd limit", ge=1, le=1_000_000)  # fmt: skip
    log_burst: int = opt(10, "lines per --log-interval of each repeated kind (bad requests, "
                         "shed connections); the rest are summed in one line", ge=1)  # fmt: skip
    log_interval_s: float = opt(10.0, "window of --log-burst", gt=0, le=3600)
    connect_timeout_s: float = opt(5.0, "per connection attempt", gt=0)
    prefill_timeout_s: float = opt(600.0, "whole prefill exchange", gt=0)
    decode_timeout_s: float = opt(3600.0, "first byte of a stream, or a whole unstreamed answer",
                                  gt=0)  # fmt: skip
    stream_idle_timeout_s: float = opt(300.0, "longest gap between chunks", gt=0)
    max_attempts: int = opt(3, "tries per stage for the whole request (a PD decode retry "
                            "re-runs the prefill, from the same prefill budget)",
                            ge=1, le=10)  # fmt: skip
    retry_backoff_s: float = opt(0.05, "first retry delay, then doubled", ge=0)
    failure_domains: tuple[str, ...] = opt(
        (), "URL=ENGINE@NODE of each backend: the engine whose DP rank it is and its node "
        "(processes of one engine, and of one node, fail together: after a failure their "
        "siblings take no retry or migration until probed alive; the Plan sets it)",
        metavar="URL=ENGINE@NODE", nargs="+",
    )  # fmt: skip
    kv_lease_s: float | None = opt(None, "seconds a prefill keeps its KV for the decoder (the "
                                   "connector's abort timeout; the Plan sets it): decode params "
                                   "older than this less a margin are never sent, a new prefill "
                                   "runs", gt=0, metavar="SECONDS")  # fmt: skip
    migration_limit: int = opt(3, "times a stream whose decoder fails mid-answer is carried on "
                               "by another prefill/decode pair, as the answer would have been "
                               "or not at all (an error event says why); 0: off",
                               ge=0, le=10)  # fmt: skip
    drain_grace_s: float = opt(30.0, "a leaving engine's streams run on it at most this long; "
                               "then those that can migrate (--migration-limit) are carried on "
                               "elsewhere, the rest finish there", ge=0, le=86400)  # fmt: skip
    pool_wait_s: float = opt(0.0, "a request that finds no engine of a stage routable waits "
                             "this long for one to join or come back (a role's only pod "
                             "replaced, new pods not probed yet) before it gets 503 "
                             "no_healthy_instance; 0: refused at once", ge=0,
                             le=3600)  # fmt: skip
    health_interval_s: float = opt(2.0, "between probe rounds", gt=0)
    health_timeout_s: float = opt(2.0, "a slower probe fails", gt=0)
    eject_after: int = opt(3, "failed probes before ejection", ge=1)
    readmit_after: int = opt(2, "good probes before re-admission", ge=1)
    outlier_after: int = opt(3, "consecutive 5xx / empty 200 / connection errors on requests "
                             "before an instance is ejected", ge=1)  # fmt: skip
    outlier_eject_s: float = opt(10.0, "least time an outlier stays out (times its ejections, "
                                 "at most 30x)", ge=0)  # fmt: skip
    engine_metrics_timeout_s: float = opt(5.0, "per engine, for GET /metrics/engines", gt=0)
    engine_metrics_ttl_s: float = opt(0.0, "GET /metrics/engines: a page made this recently "
                                      "is served again (0: each GET gets a page scraped "
                                      "after it arrived; GETs meanwhile share one)", ge=0)  # fmt: skip
    max_engine_metrics_bytes: int = opt(4 * 1024 * 1024, "an engine's /metrics page larger "
                                        "than this is not relayed (scrape_ok 0)", gt=0)  # fmt: skip
    prefix_chars: int = opt(512, "prompt prefix keyed by prefix-affinity", ge=1)
    kv_events: tuple[str, ...] = opt(
        (), "kv-events policy: ENGINE_URL=tcp://HOST:PORT[,tcp://HOST:REPLAY_PORT] of each "
        "engine's --kv-events-config publisher (and replay socket); engines not named are "
        "scored approximately", metavar="URL=ZMQ", nargs="+",
    )  # fmt: skip
    kv_events_topic: str = opt("", "kv-events policy: the publishers' topic")
    kv_events_resync_s: float = opt(10.0, "kv-events policy: after lost events that could not "
                                    "be replayed, an engine is scored approximately this long "
                                    "while its index fills again", ge=0)  # fmt: skip
    kv_index_bytes: int = opt(512 * 1024 * 1024, "kv-events policy: memory of the engines' "
                              "block indexes, shared equally; an index that would pass its "
                              "share is emptied and fills again", ge=1 << 20)  # fmt: skip
    kv_overlap_weight: float = opt(3.0, "kv-events policy: weight of a prompt's uncached "
                                   "tokens against an engine's outstanding ones (Dynamo's "
                                   "overlap_score_weight; 1 weighs this request's wait alone)",
                                   gt=0, le=100)  # fmt: skip
    discovery: str = opt("off", "where engines come from besides --prefill/--decode/--replica "
                         "(kubernetes: the pods of each role of --discovery-spec, listed and "
                         "watched through the API)", choices=DISCOVERY_SOURCES)  # fmt: skip
    discovery_spec: str | None = opt(
        None, "discovery: JSON file naming each role's pod labels and, per LeaderWorkerSet "
        "worker index, the API ports its pods serve with their KV-event and bootstrap ports",
        metavar="PATH",
    )  # fmt: skip
    discovered: DiscoverySpec | None = opt(None, "the spec, read", flag=False)  # noqa: RUF009 (frozen)
    kube_api: str | None = opt(None, "discovery: the API server (default: in the cluster, "
                               "https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT)",
                               metavar="URL")  # fmt: skip
    kube_token_file: str = opt(SA_DIR + "/token", "discovery: the service account's token "
                               "(read again at each reconnect: it rotates)", metavar="PATH")  # fmt: skip
    kube_ca_file: str = opt(SA_DIR + "/ca.crt", "discovery: the CA of the API server's "
                            "certificate (for https)", metavar="PATH")  # fmt: skip
    kube_namespace: str | None = opt(None, "discovery: the pods' namespace (default: the spec's, "
                                     "else the service account's)", metavar="NAME")  # fmt: skip
    workers: int = opt(1, "proxy processes sharing --port (SO_REUSEPORT), each with its own "
                       "event loop, routing and migration; one per core", ge=1, le=64)  # fmt: skip
    autoscale: bool = opt(False, "compute the engines each role needs and export them as "
                          "servekit_desired_replicas{role} for KEDA or an HPA")  # fmt: skip
    autoscale_interval_s: float = opt(5.0, "autoscale: between computations", gt=0, le=3600)
    slo_ttft_s: float = opt(2.0, "autoscale: time to first token the prefill role is sized for "
                            "(p90)", gt=0)  # fmt: skip
    slo_tpot_s: float = opt(0.1, "autoscale: time per output token the decode role is sized "
                            "for (p90)", gt=0)  # fmt: skip
    autoscale_target: float = opt(0.8, "autoscale: the share of an engine's measured capacity "
                                  "planned to be used", gt=0, le=1)  # fmt: skip
    min_replicas: int = opt(1, "autoscale: fewest engines of a role", ge=1, le=10000)
    max_replicas: int = opt(16, "autoscale: most engines of a role", ge=1, le=10000)
    scale_up_window_s: float = opt(15.0, "autoscale: a scale-up takes the lowest need of this "
                                   "window (a shorter spike adds nothing)", ge=0,
                                   le=3600)  # fmt: skip
    scale_down_window_s: float = opt(300.0, "autoscale: a scale-down takes the highest need of "
                                     "this window", ge=0, le=86400)  # fmt: skip
    scale_up_period_s: float = opt(30.0, "autoscale: a scale-up adds at most --scale-up-step "
                                   "of the engines (at least one) per period", gt=0,
                                   le=3600)  # fmt: skip
    scale_up_step: float = opt(1.0, "autoscale: the share of the engines one period may add",
                               gt=0, le=10)  # fmt: skip
    scale_down_period_s: float = opt(60.0, "autoscale: a scale-down removes at most one engine "
                                     "per period", gt=0, le=86400)  # fmt: skip
    decode_capacity: int = opt(0, "autoscale: streams one decoder serves within --slo-tpot, to "
                               "start from (0: learned from what the proxy measures)", ge=0,
                               le=1_000_000)  # fmt: skip
    prefill_capacity: float = opt(0.0, "autoscale: prompt tokens a second one prefill serves "
                                  "within --slo-ttft, to start from (0: learned)", ge=0)  # fmt: skip
    log_level: str = opt("info", "log verbosity", choices=LOG_LEVELS)

    def __post_init__(self) -> None:
        check_fields(self, flag_of)
        if not self.host.strip("[] "):  # the socket layer reads "" as every interface
            _bad("host", f"{self.host!r} would listen on every interface; give an address "
                 "(127.0.0.1: this machine only; 0.0.0.0: every interface, said so)")  # fmt: skip
        _check_layerwise(self)
        for value in self.prefill_bootstrap:  # refused here, not as a 500 per request
            parse_bootstrap(value)
        _check_kv_events(self)
        _check_discovery(self)
        if self.min_replicas > self.max_replicas:
            _bad("min_replicas", f"{self.min_replicas} is above --max-replicas "
                 f"{self.max_replicas}; lower it or raise --max-replicas")  # fmt: skip
        self.domains()  # refused here, not when the router starts

    def domains(self) -> dict[str, tuple[str, str]]:
        """Backend URL -> (engine, node), from ``--failure-domains``."""
        known = {*self.prefill, *self.decode, *self.replica}
        out: dict[str, tuple[str, str]] = {}
        for value in self.failure_domains:
            url, sep, where = value.rpartition("=")
            engine, at, node = where.rpartition("@")
            if not sep or not at or not engine.strip() or not node.strip():
                _bad("failure_domains", f"{value!r}: expected URL=ENGINE@NODE (the backend, "
                     "its engine's name and its node's)")  # fmt: skip
            url = check_url(url, "--failure-domains")
            if url not in known:
                _bad("failure_domains", f"{url!r} is none of --prefill/--decode/--replica; "
                     "name each backend as it is given there")  # fmt: skip
            out[url] = (engine.strip(), node.strip())
        return out

    @property
    def stage_roles(self) -> tuple[str, ...]:
        """The instance roles this mode routes to."""
        return ("replica",) if self.mode == "replica" else PD_ROLES


def _check_layerwise(config: ProxyConfig) -> None:
    """Decoders must be able to call the metaserver URL, and their guard must accept it."""
    if config.metaserver_url is not None and metaserver_key(config.metaserver_url) is None:
        _bad("metaserver_url", f"{config.metaserver_url!r} is not a plain "
             "http(s)://HOST[:PORT]/PATH URL (no user, query, %-escapes or dot segments)")  # fmt: skip
    wildcard = config.host.strip("[]") in ("0.0.0.0", "::", "0:0:0:0:0:0:0:0", "")
    handoff = handoff_of_mode(config.mode)
    calls_back = handoff is not None and handoff.decoder_first
    if calls_back and config.metaserver_url is None and wildcard:
        _bad("host", f"{config.host} is a wildcard, and decoders call the proxy back at "
             "HOST:PORT/v1/metaserver in layerwise mode; give --metaserver-url "
             "http://ADDRESS:PORT/v1/metaserver with an address they reach")  # fmt: skip
    if calls_back and config.workers > 1:
        _bad("workers", f"{config.workers}: in layerwise mode each decoder calls the proxy "
             "back at /v1/metaserver, and the kernel hands that call to any worker, not "
             "the one waiting for it; give --workers 1")  # fmt: skip


def _check_kv_events(config: ProxyConfig) -> None:
    """``--kv-events`` values are well formed, and the policy can run in this Python."""
    for value in config.kv_events:
        url, sep, rest = value.partition("=")
        ends = rest.split(",")
        if not sep or len(ends) > 2 or not all(e.startswith(("tcp://", "ipc://")) for e in ends):
            _bad("kv_events", f"{value!r}: expected ENGINE_URL=tcp://HOST:PORT"
                 "[,tcp://HOST:REPLAY_PORT]")  # fmt: skip
        check_url(url, "--kv-events")
    if KV_POLICY not in (config.prefill_policy, config.decode_policy):
        if config.kv_events:
            _bad("kv_events", "applies to --prefill-policy/--decode-policy kv-events; drop it")
        return
    missing = [m for m in ("zmq", "msgspec") if importlib.util.find_spec(m) is None]
    if missing:
        _bad("prefill_policy" if config.prefill_policy == KV_POLICY else "decode_policy",
             f"kv-events needs {' and '.join(missing)} (pip install pyzmq msgspec); the "
             "zipapp carries aiohttp only: run servekit's proxy, or pick another policy")  # fmt: skip


def _check_discovery(config: ProxyConfig) -> None:
    """Discovery needs its spec; the spec's roles are the mode's."""
    if config.discovery == "off":
        for name in ("discovery_spec", "kube_api", "kube_namespace"):
            if getattr(config, name) is not None:
                _bad(name, "applies to --discovery kubernetes; drop it or turn discovery on")
        return
    if config.discovery_spec is None:
        _bad("discovery_spec", "discovery needs the roles' spec: give --discovery-spec PATH")
    if config.kube_api is not None:
        check_url(config.kube_api, "--kube-api")
    spec = config.discovered
    if spec is not None and set(spec.role_names()) - set(config.stage_roles):
        _bad("discovery_spec", f"roles {sorted(spec.role_names())} do not fit --mode "
             f"{config.mode} (PD: prefill and decode; replica: replica only)")  # fmt: skip
    handoff = handoff_of_mode(config.mode)
    if spec is not None and handoff is not None and handoff.bootstrap_server:
        for role in spec.roles:
            unnamed = [e for w in role.workers for e in w.endpoints if e.bootstrap_port is None]
            if role.role == "prefill" and role.bootstrap_port is None and unnamed:
                _bad("discovery_spec", f"--mode {config.mode}: prefill role "
                     f"{role.label_selector()} has no bootstrap_port, so no engine of it could "
                     "be named to a decoder; give it bootstrap_port (the role's, on the "
                     "leader, or each endpoint's own)")  # fmt: skip


def flag_of(name: str) -> str:
    """A config field's flag: ``--`` + its name in kebab case, ``_s`` dropped."""
    return "--" + name.removesuffix("_s").replace("_", "-")


def _bad(name: str, message: str) -> NoReturn:
    raise UsageError(f"{flag_of(name)}: {message}")


def cli_fields() -> list[OptionSpec]:
    """The fields that are flags, in declaration order (the config's field table)."""
    return dataclass_options(ProxyConfig, flag_of=flag_of)


def build_parser() -> argparse.ArgumentParser:
    """The flags of ``python -m servekit.proxy`` (and ``servekit proxy``), from the dataclass."""
    return build_argparser(
        cli_fields(), prog="servekit proxy", who="proxy",
        description="PD / replica router with the decode guard.",
    )  # fmt: skip


def parse_bootstrap(value: str) -> tuple[str, str]:
    """``ENGINE_ID=http://HOST:PORT`` -> (engine id, URL); UsageError naming the flag if not."""
    engine_id, sep, url = value.partition("=")
    if not sep or not engine_id.strip():
        raise UsageError(f"--prefill-bootstrap {value}: expected ENGINE_ID=http://HOST:PORT")
    return engine_id.strip(), check_url(url, "--prefill-bootstrap")


def _check_bootstrap(mode: str, prefill: tuple[str, ...], bootstrap: tuple[str, ...]) -> None:
    handoff = handoff_of_mode(mode)
    if handoff is None or not handoff.bootstrap_server:
        if bootstrap:
            raise UsageError("--prefill-bootstrap applies to --mode bootstrap; drop it")
        return
    if len(bootstrap) != len(prefill):
        raise UsageError(
            f"--prefill-bootstrap: give one ENGINE_ID=URL per --prefill ({len(prefill)}), "
            f"got {len(bootstrap)}"
        )
    for value in bootstrap:
        parse_bootstrap(value)


def _check_topology(
    prefill: list[str], decode: list[str], replica: list[str], discovered: bool = False
) -> None:
    if replica and (prefill or decode):
        raise UsageError("--replica cannot be combined with --prefill/--decode; pick one topology")
    if not replica and not (prefill and decode) and not discovered:
        raise UsageError(
            "give --prefill URL... and --decode URL... (PD) or --replica URL..., "
            "or --discovery kubernetes --discovery-spec PATH"
        )


def refuse_keys_in_argv(argv: list[str]) -> None:
    """``--api-key KEY`` / ``--admin-key KEY`` are refused: ``ps`` shows argv to everyone."""
    for arg in argv:
        flag = arg.split("=", 1)[0]
        if flag in KEY_FLAGS:
            raise UsageError(
                f"{flag}: keys are not taken on the command line (ps shows it to everyone); "
                f"use {flag}-env NAME or {flag}-file PATH"
            )


def read_key(name: str, env: str | None, path: str | None) -> str | None:
    """The key named by ``--NAME-env`` or ``--NAME-file`` (one of them), stripped."""
    if env is not None and path is not None:
        raise UsageError(f"--{name}-env and --{name}-file: give one of them")
    if env is not None:
        value = os.environ.get(env, "").strip()
        if not value:
            raise UsageError(f"--{name}-env {env}: that environment variable is unset or empty")
        return value
    if path is None:
        return None
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(
            f"--{name}-file {path}: cannot read it ({exc.__class__.__name__})"
        ) from None
    if not lines or not lines[0].strip():
        raise UsageError(f"--{name}-file {path}: the first line is empty; put the key there")
    return lines[0].strip()


def with_keys(config: ProxyConfig) -> ProxyConfig:
    """The config with its keys read from the environment variables or files it names."""
    api = read_key("api-key", config.api_key_env, config.api_key_file)
    admin = read_key("admin-key", config.admin_key_env, config.admin_key_file)
    return dataclasses.replace(
        config, api_key=api or config.api_key, admin_key=admin or config.admin_key
    )


def parse_args(argv: list[str], read_keys: bool = True) -> ProxyConfig:
    """Parse and validate the command line into a :class:`ProxyConfig`.

    ``read_keys`` reads the keys the flags name (the proxy process does); a
    launcher that only inspects argv passes False and needs no key.
    """
    refuse_keys_in_argv(argv)
    return config_from_values(parse_values(build_parser(), argv), read_keys)


def _check_choices(values: dict[str, Any]) -> None:
    for f in cli_fields():
        if f.choices is not None and f.name in values and values[f.name] not in f.choices:
            _bad(f.name, f"pick one of {', '.join(f.choices)} (got {values[f.name]!r})")


def config_from_values(values: dict[str, Any], read_keys: bool = True) -> ProxyConfig:
    """A :class:`ProxyConfig` from the flags given (field name -> value; absent: not given).

    Both entry points end here: argparse (``python -m servekit.proxy``, the zipapp)
    and the typer command ``servekit proxy`` generated from the dataclass.
    """
    ns = dict(values)
    _check_choices(ns)
    for role in PROXY_POOLS:
        ns[role] = tuple(check_url(u, f"--{role}") for u in ns.get(role, ()))
    discovering = ns.get("discovery", "off") != "off"
    _check_topology(list(ns["prefill"]), list(ns["decode"]), list(ns["replica"]), discovering)
    if discovering and read_keys and ns.get("discovery_spec"):
        ns["discovered"] = load_spec(ns["discovery_spec"])
    replica = ns["replica"] or (
        ns.get("discovered") is not None and ns["discovered"].role_names() == ("replica",)
    )
    if replica:
        if "mode" in ns:
            raise UsageError("--mode applies to PD (--prefill/--decode); drop it with --replica")
        ns["mode"] = "replica"
    for name in ("prefill_bootstrap", "kv_events", "failure_domains"):
        if name in ns:  # typer gives lists
            ns[name] = tuple(ns[name])
    _check_bootstrap(ns.get("mode", "pd"), ns["prefill"], tuple(ns.get("prefill_bootstrap", ())))
    config = ProxyConfig(**ns)
    return with_keys(config) if read_keys else config


def option_words(name: str, value: object) -> list[object]:
    """One field's words on the proxy's command line, spelled by its field table.

    Its flag, then its value(s): a switch that is on is the flag alone; off, None
    or an empty tuple is nothing; a number is written as text; any other value (a
    string, or a launcher's own word type such as a Plan's typed word) is passed
    through as a word. A lone text value starting with ``-`` joins its flag with
    ``=`` (``--x=-y``), so the parser cannot take it for a flag. Every launcher
    (:func:`to_argv`, the Plan's proxy command) emits the proxy's flags through
    this, so none spells one.
    """
    spec = _specs().get(name)
    if spec is None:
        raise ValueError(f"{name}: not a command-line field of the proxy's config")
    if value is None or value is False or value == ():
        return []
    if value is True:
        return [spec.flag]
    values = value if isinstance(value, tuple) else (value,)
    words = [str(v) if isinstance(v, int | float) else v for v in values]
    if len(words) == 1 and isinstance(words[0], str) and words[0].startswith("-"):
        return [f"{spec.flag}={words[0]}"]
    return [spec.flag, *words]


def _specs() -> dict[str, OptionSpec]:
    return {f.name: f for f in cli_fields()}


def to_argv(config: ProxyConfig) -> list[str]:
    """The flags that reproduce ``config`` (defaults left out), for launchers.

    Launchers build a :class:`ProxyConfig` and run the proxy with
    ``to_argv(config)``, so no launcher spells a flag. A key set directly (not
    through ``api_key_env``/``api_key_file`` and the admin pair) cannot go in
    argv and is refused.
    """
    if config.api_key and not (config.api_key_env or config.api_key_file):
        raise UsageError("api_key: give the key to the proxy process with api_key_env or _file")
    if config.admin_key and not (config.admin_key_env or config.admin_key_file):
        raise UsageError("admin_key: give it with admin_key_env or admin_key_file")
    argv: list[str] = []
    for f in cli_fields():
        value = getattr(config, f.name)
        if (f.name == "mode" and value == "replica") or value == f.default:
            continue  # mode follows from --replica
        argv += [str(word) for word in option_words(f.name, value)]
    return argv
