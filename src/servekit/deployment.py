"""What a running deployment looks like to its clients (accept, bench, verify).

``servekit up`` writes a :class:`Deployment` as ``deployment.json`` in its run
directory, and ``servekit deployment NAME --nodes ...`` writes one for a cluster
started from the rendered scripts; ``--target NAME`` or ``--target FILE`` reads
it back; ``--target URL`` builds a minimal one. One model, so every consumer sees
the same endpoints.

Where only the proxy's node takes outside traffic, the engines' own ports are
out of reach: such a deployment says ``engine_access: relay`` and its engines'
metrics are read from the proxy's ``/metrics/engines`` page, every sample
labelled ``engine_url`` (:func:`split_relay`).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator

from servekit.errors import UsageError, first_error
from servekit.userdirs import state_dir
from servekit.vocabulary import EndpointRole, ServedBy, StrictModel, check_url, is_url

EngineAccess = Literal["direct", "relay"]
RELAY_PATH = "/metrics/engines"
"""The proxy's page of every engine's /metrics, each sample labelled by engine."""
RELAY_LABEL = re.compile(r'engine_url="([^"]*)"')


class Endpoint(StrictModel):
    """One HTTP endpoint of a deployment (an API server, a DP rank, the proxy)."""

    name: str
    role: EndpointRole
    url: str
    engine_id: str | None = None
    log: Path | None = Field(default=None, description="log file when the process runs here")
    dp_rank: int | None = Field(default=None, description="the DP rank this API server serves")
    node: int | None = Field(default=None, description="the node (rank in the rank table)")
    metrics_url: str | None = Field(
        default=None,
        description="where its vLLM metrics are read: its /metrics, or the proxy's "
        "/metrics/engines relay (samples labelled engine_url=url)",
    )


class Deployment(StrictModel):
    """A deployment as seen from outside: where to send traffic, what to expect."""

    layout: str | None = None
    layout_names: tuple[str, ...] = Field(
        default=(),
        description="every name of the layout (its own and its aliases), so --target finds "
        "the run by any of them, whichever name 'servekit up' was given",
    )
    engine: ServedBy = "external"
    model: str | None = Field(default=None, description="served model name")
    entry_url: str = Field(description="where clients send requests: the proxy or the engine")
    endpoints: tuple[Endpoint, ...] = ()
    reference_url: str | None = Field(
        default=None, description="a single non-PD instance serving the same model, for PD==single"
    )
    capabilities: tuple[str, ...] = ()
    run_dir: Path | None = None

    @field_validator("entry_url", "reference_url")
    @classmethod
    def _root_url(cls, value: str | None) -> str | None:
        """A deployment.json someone edited gets the command line's URL check too, so a
        user:pass@ in it never reaches run.json or report.html."""
        if value is None:
            return None
        try:
            return check_url(value, "url")
        except UsageError as exc:
            raise ValueError(str(exc).removeprefix("url ")) from None

    versions: dict[str, str] = Field(default_factory=dict)
    image: str | None = None
    sim_speed: float | None = Field(
        default=None, gt=0, description="simulated runs: virtual seconds per wall second"
    )
    engine_access: EngineAccess = Field(
        default="direct",
        description="direct: every endpoint answers from here; relay: only the entry does, "
        "and the engines' metrics come through the proxy's /metrics/engines",
    )
    metrics_relay: str | None = Field(
        default=None, description="the proxy's /metrics/engines URL, when it has one"
    )
    process_logs: dict[str, Path] = Field(
        default_factory=dict,
        description="every process's log file by its Plan name (headless ranks too), when known",
    )

    def by_role(self, role: EndpointRole) -> tuple[Endpoint, ...]:
        return tuple(e for e in self.endpoints if e.role == role)

    @property
    def is_pd(self) -> bool:
        return bool(self.by_role("prefill")) and bool(self.by_role("decode"))

    @property
    def simulated(self) -> bool:
        return self.engine == "sim"

    @property
    def direct(self) -> bool:
        """Whether the engines' own URLs answer from here (not only through the proxy)."""
        return self.engine_access == "direct"

    def log_files(self) -> dict[str, Path]:
        """Every known log file by process name: ``process_logs``, else the endpoints' logs."""
        if self.process_logs:
            return dict(self.process_logs)
        return {e.name: e.log for e in self.endpoints if e.log is not None}

    def metrics_source(self, endpoint: Endpoint) -> tuple[str, str | None]:
        """Where to GET an endpoint's vLLM metrics, and the ``engine_url`` to keep.

        Direct access reads the endpoint's own ``/metrics`` (the whole page);
        relay access reads the proxy's ``/metrics/engines`` and keeps the
        samples labelled with the endpoint's URL.
        """
        if not self.direct and self.metrics_relay:
            return self.metrics_relay, endpoint.url
        return endpoint.metrics_url or f"{endpoint.url.rstrip('/')}/metrics", None


def split_relay(page: str) -> dict[str, str]:
    """The proxy's ``/metrics/engines`` page as one Prometheus text per ``engine_url``.

    Comment lines (HELP, TYPE) go into every part, so each part parses on its
    own; a sample line goes to the engine its ``engine_url`` label names.
    Lines without the label (the proxy's own) are dropped.
    """
    lines = page.splitlines()
    owners = [None if ln.startswith("#") else RELAY_LABEL.search(ln) for ln in lines]
    parts: dict[str, list[str]] = {m.group(1): [] for m in owners if m is not None}
    for line, owner in zip(lines, owners, strict=True):
        if owner is not None:
            parts[owner.group(1)].append(line)
        elif line.startswith("#"):
            for part in parts.values():
                part.append(line)
    return {url: "\n".join(part) + "\n" for url, part in parts.items()}


FOLDER_RUNS = Path(".servekit/runs")
"""Where runs lived before the per-user state folder; still listed from the current folder."""


def runs_root() -> Path:
    """Where ``servekit up`` keeps run directories: ``SERVEKIT_RUNS``, else the per-user
    state folder (``$XDG_STATE_HOME/servekit/runs``), so a run is found from any folder."""
    chosen = os.environ.get("SERVEKIT_RUNS")
    return Path(chosen).resolve() if chosen else state_dir() / "runs"


MAX_RUNS_SCANNED = 1000  # run folders read when looking a run up by another name


def run_roots() -> list[Path]:
    """Every folder that may hold runs: :func:`runs_root`, then (unless ``SERVEKIT_RUNS``
    is set) the current folder's ``.servekit/runs`` from earlier versions."""
    roots = [runs_root()]
    here = FOLDER_RUNS.resolve()
    if "SERVEKIT_RUNS" not in os.environ and here.is_dir() and here not in roots:
        roots.append(here)
    return roots


def run_dir_for(layout: str) -> Path:
    """Where a new run of a layout name such as ``local/1p1d`` goes."""
    return runs_root() / layout.replace("/", "__")


def run_dirs_of(layout: str) -> list[Path]:
    """Every existing run directory of ``layout`` (one per root that has it)."""
    slug = layout.replace("/", "__")
    return [root / slug for root in run_roots() if (root / slug).is_dir()]


def load_deployment(target: str) -> Deployment:
    """Resolve ``--target URL|NAME|FILE`` to a Deployment.

    A URL becomes an external deployment with that entry; a ``.json`` file (or
    any existing file) is a deployment written by ``servekit deployment`` or
    ``servekit up``; a layout name reads the ``deployment.json`` that
    ``servekit up`` wrote.
    """
    if is_url(target):
        return Deployment(entry_url=check_url(target))
    given = Path(target)
    if target.endswith(".json") or given.is_file():
        return read_deployment_file(given, f"--target {target}")
    found = [d / "deployment.json" for d in run_dirs_of(target)]
    path = next((f for f in found if f.is_file()), None) or _run_known_as(target)
    path = path or run_dir_for(target) / "deployment.json"
    if not path.is_file():
        raise UsageError(
            f"--target {target}: no running deployment found at {path}; "
            f"start it with 'servekit up {target}', pass a URL, or a deployment.json "
            "written by 'servekit deployment'"
        )
    return read_deployment_file(path, f"--target {target}")


def _run_known_as(name: str) -> Path | None:
    """The deployment.json of a run started under another name of the same layout.

    ``servekit up`` records every name of its layout in the deployment
    (``layout_names``); a run started as an alias is found by the layout's own
    name and the other way round. Files that cannot be read are passed over:
    the error worth showing is the one about the name asked for.
    """
    for root in run_roots():
        for path in sorted(root.glob("*/deployment.json"))[:MAX_RUNS_SCANNED]:
            try:
                names = Deployment.model_validate_json(path.read_bytes()).layout_names
            except (OSError, ValueError):
                continue
            if name in names:
                return path
    return None


def read_deployment_file(path: Path, flag: str) -> Deployment:
    """A deployment.json, or one UsageError line saying what is wrong with it."""
    from pydantic import ValidationError

    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        why = type(exc).__name__
        raise UsageError(
            f"{flag}: cannot read {path} ({why}); give a deployment.json written by "
            "'servekit deployment'"
        ) from None
    try:
        return Deployment.model_validate_json(text)
    except ValidationError as exc:
        where, msg = first_error(exc)
        raise UsageError(
            f"{flag}: {path} is not a deployment.json: field {where}: {msg}; "
            "write one with 'servekit deployment NAME --nodes IP,... --out FILE'"
        ) from None
