"""What the engines say they are: the ledger's engine kind, versions and image, observed.

A flag or the catalog cannot say what ran; only the engines can. Every engine
endpoint the run reaches is asked, and the run is recorded as what they answer:

- **sim**: ``GET /version`` answers ``servekit-sim``, ``GET /sim/state`` answers
  the simulator's state, or (through a proxy's ``/metrics/engines`` relay) the
  engine's metrics carry ``servekit_sim_info`` (the simulator's names are vLLM's
  on purpose, so that family is how it tells itself apart);
- **vllm**: every one of vLLM's own marks at once: ``/version`` answers
  ``{"version": "<X.Y...>"}``, the response's ``Server`` header is ``uvicorn``
  (vLLM's HTTP server), ``/metrics`` has the ``vllm:cache_config_info`` family,
  and ``/sim/state`` is not the simulator's;
- **unconfirmed**: anything else, with the reason (an engine out of reach, a
  server that answers ``/version`` like vLLM but lacks the rest of vLLM's
  marks, engines that disagree). An unconfirmed run never verifies a layout.

The vLLM version comes from ``/version``, or from a ``--logs`` start-up line
(``vLLM server version X, serving model ...``, vLLM 0.32's line); no engine
endpoint and no start-up line names the container image, so the image is
recorded ``not observed``. Nothing is filled in from the layout. Every probe
is bounded in bytes and time.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from servekit.catalog import NOT_OBSERVED
from servekit.deployment import Deployment, Endpoint, split_relay
from servekit.sim import SIM_INFO, SIM_VERSION
from servekit.vocabulary import CACHE_CONFIG_INFO, ROLES, Observed, ServedBy

VLLM_SERVER = "uvicorn"
VERSION_LIKE = re.compile(r"\d+\.\d+[0-9A-Za-z.+_-]{0,60}")
LOG_VERSION = re.compile(rb"vLLM (?:API )?server version (\d+\.\d+[0-9A-Za-z.+_-]{0,60})")
MAX_BODY = 32 << 20
MAX_LOG_HEAD = 256 << 10
PROBE_TIMEOUT_S = 5.0
NO_ANSWER = " did not answer"
FETCH_TIMEOUT_S = 10.0


def fetch_text(url: str) -> str:
    """GET ``url`` and return its body, at most :data:`MAX_BODY` bytes (OSError when it
    cannot be read)."""
    with urllib.request.urlopen(url, timeout=FETCH_TIMEOUT_S) as resp:
        body: bytes = resp.read(MAX_BODY)
    return body.decode("utf-8", errors="replace")


@dataclass(frozen=True)
class Answer:
    """One GET: its status (0: no answer), the headers that matter and the body."""

    status: int
    server: str = ""
    body: str = ""


Probe = Callable[[str], Answer]
"""GET a URL; never raises (a failure is ``Answer(0)``)."""


def probe_url(url: str) -> Answer:
    """GET ``url`` with a time limit, reading at most :data:`MAX_BODY` bytes."""
    try:
        with urllib.request.urlopen(url, timeout=PROBE_TIMEOUT_S) as resp:
            body: bytes = resp.read(MAX_BODY)
            return Answer(
                resp.status, resp.headers.get("Server", ""), body.decode(errors="replace")
            )
    except urllib.error.HTTPError as exc:
        return Answer(exc.code, exc.headers.get("Server", "") if exc.headers else "")
    except (OSError, ValueError):
        return Answer(0)


@dataclass(frozen=True)
class EngineVerdict:
    """What one engine answered: its kind, its version when it gave one, and why."""

    url: str
    kind: Observed
    why: str
    version: str | None = None


@dataclass(frozen=True)
class Identity:
    """The run's engines as observed: kind, versions, image and how each was observed."""

    kind: Observed
    why: str
    versions: dict[str, str] = field(default_factory=dict)
    image: str = NOT_OBSERVED
    observed: dict[str, str] = field(default_factory=dict)

    @property
    def engine(self) -> ServedBy:
        """The deployment's engine kind: unconfirmed engines are ``external``."""
        return "external" if self.kind == "unconfirmed" else self.kind


def _version_field(body: str) -> str | None:
    try:
        doc = json.loads(body)
    except ValueError:
        return None
    value = doc.get("version") if isinstance(doc, dict) else None
    return value if isinstance(value, str) and len(value) <= 80 else None


def _is_sim_state(answer: Answer) -> bool:
    if answer.status != 200:
        return False
    try:
        doc = json.loads(answer.body)
    except ValueError:
        return False
    return isinstance(doc, dict) and isinstance(doc.get("launch"), dict)


def _has_family(page: str, name: str) -> bool:
    return re.search(rf"^{re.escape(name)}(\{{| )", page, re.M) is not None


def engine_verdict(url: str, probe: Probe) -> EngineVerdict:
    """One engine reached directly: ask ``/version``, ``/sim/state`` and ``/metrics``."""
    base = url.rstrip("/")
    version = probe(f"{base}/version")
    said = _version_field(version.body) if version.status == 200 else None
    state = probe(f"{base}/sim/state")
    if said == SIM_VERSION or _is_sim_state(state):
        return EngineVerdict(url, "sim", "GET /version or /sim/state: servekit's simulator")
    if version.status == 0:
        return EngineVerdict(url, "unconfirmed", f"{base}/version{NO_ANSWER}")
    if said is None or VERSION_LIKE.fullmatch(said) is None:
        return EngineVerdict(url, "unconfirmed", f"{base}/version gave no vLLM version")
    missing = []
    if version.server.strip().lower() != VLLM_SERVER:
        missing.append(f"Server header {version.server.strip()[:40] or 'absent'!r}, not uvicorn")
    metrics = probe(f"{base}/metrics")
    if metrics.status != 200 or not _has_family(metrics.body, CACHE_CONFIG_INFO):
        missing.append(f"/metrics has no {CACHE_CONFIG_INFO}")
    if missing:
        why = f"{base}/version says {said} but " + "; ".join(missing)
        return EngineVerdict(url, "unconfirmed", why, said)
    return EngineVerdict(url, "vllm", "GET /version, Server: uvicorn, vLLM metrics", said)


def relay_verdicts(
    relay_url: str, engines: Iterable[Endpoint], probe: Probe
) -> list[EngineVerdict]:
    """Engines reached only through the proxy: their relayed metrics are all there is."""
    page = probe(relay_url)
    parts = split_relay(page.body) if page.status == 200 else {}
    found: list[EngineVerdict] = []
    for engine in engines:
        part = parts.get(engine.url)
        if part is None:
            found.append(EngineVerdict(engine.url, "unconfirmed", f"{relay_url} lists no metrics"))
        elif _has_family(part, SIM_INFO):
            found.append(EngineVerdict(engine.url, "sim", f"{SIM_INFO} in {relay_url}"))
        else:
            why = "reached only through the proxy: /version and the Server header are out of reach"
            found.append(EngineVerdict(engine.url, "unconfirmed", why + "; pass --nodes"))
    return found


def identify(dep: Deployment, probe: Probe = probe_url) -> Identity:
    """Ask every engine of ``dep`` what it is, and read the logs' start-up lines."""
    engines = [e for e in dep.endpoints if e.role in ROLES]
    if not engines:
        engines = [Endpoint(name="entry", role="mixed", url=dep.entry_url)]
    if dep.direct or not dep.metrics_relay:
        verdicts = []
        for engine in engines:
            verdicts.append(engine_verdict(engine.url, probe))
            if verdicts[-1].why.endswith(NO_ANSWER):
                break  # one silent engine settles it (unconfirmed); no 5 s wait per engine
    else:
        verdicts = relay_verdicts(dep.metrics_relay, engines, probe)
    return _combine(verdicts, log_facts(dep.log_files().values()))


def _combine(verdicts: list[EngineVerdict], logs: dict[str, str]) -> Identity:
    kinds = {v.kind for v in verdicts}
    n = len(verdicts)
    if "sim" in kinds:
        sims = sum(v.kind == "sim" for v in verdicts)
        why = f"{sims}/{n} engines answered as servekit's simulator"
        return Identity("sim", why, {}, NOT_OBSERVED, {"engine": why})
    if kinds != {"vllm"}:
        first = next(v for v in verdicts if v.kind != "vllm")
        why = (
            f"{n - sum(v.kind == 'vllm' for v in verdicts)}/{n} engines not identified: {first.why}"
        )
        return Identity("unconfirmed", why, {}, NOT_OBSERVED, {"engine": why})
    said = sorted({v.version for v in verdicts if v.version})
    observed = {"engine": f"{n}/{n} engines: GET /version, Server: uvicorn, vLLM metrics"}
    versions: dict[str, str] = {}
    if len(said) == 1:
        versions["vllm"] = said[0]
        observed["vllm"] = f"GET /version on {n} engine(s)"
    elif len(said) > 1:
        observed["vllm"] = f"engines disagree ({', '.join(said)}): not recorded"
    if "vllm" not in versions and "vllm" in logs and not said:
        versions["vllm"] = logs["vllm"]
        observed["vllm"] = "the logs' start-up line (vLLM API server version)"
    observed["image"] = NOT_OBSERVED
    return Identity("vllm", observed["engine"], versions, NOT_OBSERVED, observed)


def log_facts(paths: Iterable[Path]) -> dict[str, str]:
    """The vLLM version the logs' first lines state, when they all agree."""
    versions: set[str] = set()
    for path in paths:
        try:
            with path.open("rb") as fh:
                head = fh.read(MAX_LOG_HEAD)
        except OSError:
            continue
        versions.update(m.group(1).decode() for m in LOG_VERSION.finditer(head))
    found: dict[str, str] = {}
    if len(versions) == 1:
        found["vllm"] = versions.pop()
    return found
