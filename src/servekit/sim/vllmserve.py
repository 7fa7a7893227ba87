"""``servekit sim serve MODEL [vllm serve flags]``: a drop-in ``vllm`` for dry runs.

One process serves one simulated engine exactly where the ``vllm serve``
command line puts it (see :mod:`servekit.sim.vllmargs`), so a two-line ``vllm``
wrapper on ``PATH`` turns any rendered layout into a simulated cluster. A
``--headless`` rank serves no API: it stays up, sleeping until SIGTERM, so a
supervisor sees it alive. Engines run one per process here, so KV handoff trusts
well-formed ``kv_transfer_params`` (``kv_peers: any``).

The environment picks what the command line cannot say:

- ``SERVEKIT_SIM_PROFILE``: the latency profile (default ``a3-dsv4-flash``, or
  ``cpu-tiny`` when MODEL is a local tiny model: a folder whose
  ``config.json`` has ``hidden_size`` <= 1024);
- ``SERVEKIT_SIM_SPEED``: virtual seconds per wall second (``--speed`` wins);
- ``SERVEKIT_SIM_FAULTS``: a JSON object of fault fields for this engine;
- ``SERVEKIT_SIM_TRANSCRIPTS``: a folder the engine processes of one deployment
  share the prompts they answered through, so that a stream migrated to another
  engine process is carried on with the rest of its answer
  (:mod:`servekit.sim.resume`); the fake platforms set it;
- vLLM's own ``VLLM_MOONCAKE_BOOTSTRAP_PORT`` and ``VLLM_HOST_IP``, read as vLLM's
  MooncakeConnector reads them (a bootstrap-mode prefill's server and workers:
  :func:`bootstrap_fields`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import signal
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from servekit.errors import UsageError
from servekit.guard import METASERVER_ENV
from servekit.kvprotocol import BOOTSTRAP_PORT_DEFAULT, KV_PORT_ENV
from servekit.sim.faults import FaultSpec, patch_faults
from servekit.sim.options import configure_logging
from servekit.sim.profile import Profile, load_profile
from servekit.sim.spec import SimSpec, spec_from_mapping
from servekit.sim.vllmargs import VllmLaunch, build_parser, parse_launch, wants_help

PROFILE_ENV = "SERVEKIT_SIM_PROFILE"
SPEED_ENV = "SERVEKIT_SIM_SPEED"
FAULTS_ENV = "SERVEKIT_SIM_FAULTS"
DEFAULT_PROFILE = "a3-dsv4-flash"
TINY_PROFILE = "cpu-tiny"
TINY_HIDDEN_SIZE = 1024
BOOTSTRAP_PORT_ENV = KV_PORT_ENV["MooncakeConnector"]

log = logging.getLogger("servekit.sim.serve")


def is_tiny_model(model: str) -> bool:
    """A local model folder whose config.json is small (the CPU tiny model)."""
    config = Path(model) / "config.json"
    try:
        doc = json.loads(config.read_text())
    except (OSError, ValueError):
        return False
    size = doc.get("hidden_size") if isinstance(doc, dict) else None
    return isinstance(size, int) and size <= TINY_HIDDEN_SIZE


def choose_profile(launch: VllmLaunch, env: dict[str, str]) -> Profile:
    """The env's profile, else by model; scaled to the ranks one API server fronts."""
    default = TINY_PROFILE if is_tiny_model(launch.model) else DEFAULT_PROFILE
    profile = load_profile(env.get(PROFILE_ENV) or default)
    update: dict[str, Any] = {}
    n = len(launch.ranks)
    if n > 1:  # one API server fronting N local engines: their capacity together
        update = {
            "max_num_seqs": profile.max_num_seqs * n,
            "kv_capacity_tokens": profile.kv_capacity_tokens * n,
        }
    if launch.prefix_caching is not None:
        update["enable_prefix_caching"] = launch.prefix_caching
    return profile.model_copy(update=update) if update else profile


def choose_speed(launch: VllmLaunch, env: dict[str, str]) -> float:
    """``--speed``, else ``SERVEKIT_SIM_SPEED``, else real time."""
    if launch.speed is not None:
        return launch.speed
    text = env.get(SPEED_ENV)
    if not text:
        return 1.0
    try:
        speed = float(text)
    except ValueError:
        speed = 0.0
    if speed <= 0:
        raise UsageError(f"{SPEED_ENV}={text}: expected a number above 0 (50 = 50x faster)")
    return speed


def env_faults(env: dict[str, str]) -> FaultSpec:
    """``SERVEKIT_SIM_FAULTS`` (a JSON object of fault fields), or no faults."""
    text = env.get(FAULTS_ENV)
    if not text:
        return FaultSpec()
    try:
        patch = json.loads(text)
    except ValueError as exc:
        raise UsageError(f"{FAULTS_ENV}: not valid JSON ({exc})") from None
    return patch_faults(FaultSpec(), patch)


def endpoint_name(launch: VllmLaunch) -> str:
    engine = launch.engine_id if launch.engine_id is not None else launch.served_model_name
    return f"{launch.role}-{engine}-dp{launch.ranks[0]}"


# A flag is secret when one of its dash-separated words is one of these:
# --api-key, --hf-token; not --tokenizer or --max-num-batched-tokens.
SECRET_FLAG = re.compile(
    r"(?:^|[-_])(?:key|token|secret|password|credentials?)(?:$|[-_=])", re.IGNORECASE
)
REDACTED = "<redacted>"


def redacted_argv(argv: Sequence[str]) -> list[str]:
    """The command line with the values of secret-bearing flags (``--api-key``) hidden."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next and not arg.startswith("--"):
            out.append(REDACTED)
        elif arg.startswith("--") and "=" in arg and SECRET_FLAG.search(arg.split("=", 1)[0][2:]):
            out.append(f"{arg.split('=', 1)[0]}={REDACTED}")
        else:
            out.append(arg)
        hide_next = arg.startswith("--") and "=" not in arg and bool(SECRET_FLAG.search(arg[2:]))
    return out


def redacted_flags(flags: Mapping[str, Any]) -> dict[str, Any]:
    """Grouped flags with secret-bearing values hidden (a bare switch stays as it is)."""
    return {
        k: REDACTED if SECRET_FLAG.search(k) and not isinstance(v, bool) else v
        for k, v in flags.items()
    }


def launch_record(launch: VllmLaunch, profile: Profile, speed: float) -> dict[str, Any]:
    """What ``GET /sim/state`` shows as ``launch``: the command line and what it meant.

    ``/sim/state`` answers anyone who can reach the port, so values of flags such
    as ``--api-key`` are shown as ``<redacted>`` (here and in the engine log).
    """
    return {
        **launch.model_dump(mode="json"),
        "argv": redacted_argv(launch.argv),
        "ignored": redacted_flags(launch.ignored),
        "ranks": list(launch.ranks),
        "profile": profile.name,
        "speed": speed,
    }


def build_spec(launch: VllmLaunch, env: dict[str, str]) -> SimSpec:
    """The one-endpoint spec of an API-serving launch."""
    profile = choose_profile(launch, env)
    speed = choose_speed(launch, env)
    endpoint: dict[str, Any] = {
        "name": endpoint_name(launch),
        "host": launch.host,
        "port": launch.port,
        "role": launch.role,
        "engine_id": launch.engine_id,
        "kv_port": launch.kv_port,
        "kv_mode": launch.kv_mode,
        "metaservers": tuple(env.get(METASERVER_ENV, "").replace(",", " ").split()),
        "kv_connector": launch.kv_connector or "NixlConnector",
        "guard_mode": launch.guard_mode,
        "kv_peers": "any",
        "dp_rank": launch.ranks[0],
        "dp_size": launch.dp_size,
        "tp": launch.tp,
        "served_model_name": launch.served_model_name,
        "profile": profile,
        "guard": launch.guard,
        # A decoder that prefills a prompt itself meets the seed incident, whether no
        # guard stood in front of it or a guard let a request through that its
        # connector cannot act on (the marker on a connector that reads the params).
        "unguarded_incident": launch.role == "decode",
        "faults": env_faults(env).model_dump(),
        "launch": launch_record(launch, profile, speed),
    }
    if launch.kv_mode == "bootstrap" and launch.role == "prefill":
        endpoint.update(bootstrap_fields(launch, env))
    if launch.max_model_len is not None:
        endpoint["max_model_len"] = launch.max_model_len
    if launch.kv_events is not None:
        endpoint["kv_events"] = launch.kv_events
    spec = spec_from_mapping({"endpoints": [endpoint]}, where="sim serve")
    return spec.at_speed(speed)


def bootstrap_fields(launch: VllmLaunch, env: Mapping[str, str]) -> dict[str, Any]:
    """What vLLM 0.32's MooncakeConnector takes from outside the command line, and
    whose ranks its bootstrap server names.

    The server listens on ``VLLM_MOONCAKE_BOOTSTRAP_PORT`` (8998 unset; its
    ``kv_port`` is not read) and the workers advertise ``VLLM_HOST_IP``. Under external
    load balancing (``--data-parallel-rank``) each API server's engine runs its own
    server, naming its one rank under key 0; otherwise (one API server fronting ranks)
    the process of global rank 0 runs the one server every rank of the engine registers
    with, keyed by rank (the headless nodes' ranks included), and a process whose first
    rank is above 0 (hybrid load balancing) runs its own for its ranks, keyed by local
    index (``should_launch_bootstrap_server``, ``get_mooncake_bootstrap_addr``).
    """
    raw = env.get(BOOTSTRAP_PORT_ENV, "").strip() or str(BOOTSTRAP_PORT_DEFAULT)
    if not raw.isdigit() or not 0 < int(raw) <= 65535:
        raise UsageError(f"{BOOTSTRAP_PORT_ENV} {raw[:40]!r}: expected a port (1-65535)")
    out: dict[str, Any] = {"bootstrap_port": int(raw)}
    host = env.get("VLLM_HOST_IP", "").strip()
    if host:
        out["kv_host"] = host
    if launch.dp_rank is None and launch.dp_size > 1:
        ranks = launch.ranks
        if ranks[0] == 0:
            out["bootstrap_ranks"] = {str(r): r for r in range(launch.dp_size)}
        else:
            out["bootstrap_ranks"] = {str(i): r for i, r in enumerate(ranks)}
    return out


def describe(launch: VllmLaunch) -> str:
    """One log line: what this process is."""
    ranks = ",".join(str(r) for r in launch.ranks)
    engine = launch.engine_id or "-"
    return (
        f"{launch.role} engine {engine}, DP rank(s) {ranks} of {launch.dp_size}, TP {launch.tp}, "
        f"guard {'on' if launch.guard else 'off'}, model {launch.served_model_name}"
    )


def _log_launch(launch: VllmLaunch) -> None:
    log.info("vllm serve %s", " ".join(redacted_argv(launch.argv)))
    log.info("simulating %s", describe(launch))
    if launch.ignored:
        shown = redacted_flags(launch.ignored)
        log.info("accepted, not simulated: %s", json.dumps(shown, sort_keys=True))


async def _headless(launch: VllmLaunch) -> None:
    """Log what this process is once SIGTERM is handled, then sleep until it comes."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    log.info(
        "headless rank(s) %s of engine %s: no API server; waiting for SIGTERM",
        ",".join(str(r) for r in launch.ranks),
        launch.engine_id or "-",
    )
    await stop.wait()


def serve_main(argv: list[str], env: dict[str, str] | None = None) -> int:
    """Serve (or, headless, wait) until SIGTERM; the exit code."""
    environ = dict(os.environ) if env is None else env
    if wants_help(argv):
        print(build_parser().format_help())
        return 0
    launch = parse_launch(argv)
    configure_logging()
    _log_launch(launch)
    if launch.headless:
        asyncio.run(_headless(launch))
        return 0
    spec = build_spec(launch, environ)
    from servekit.sim.resume import SHARED_ENV, TRANSCRIPTS
    from servekit.sim.server import run

    if environ.get(SHARED_ENV):
        TRANSCRIPTS.share(Path(environ[SHARED_ENV]))

    # vLLM's API server on SIGTERM: --shutdown-timeout 0 (its default) aborts the requests
    # in flight at once, N lets them finish for N s (vllm/entrypoints/launchers/launcher.py)
    run(spec, shutdown_timeout_s=float(launch.shutdown_timeout))
    return 0
