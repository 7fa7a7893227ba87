"""What ``servekit verify`` is asked: one model, checked before anything starts.

The model is the command's options too: ``servekit verify`` is generated from
it (:func:`servekit.cliopts.command_from_model`) and docs/verify.md's options
table is rendered from it, so the flags, the code and the docs say the same.
``--kit`` and its ``--kit-*`` flags become ``kit verify``'s own model
(:meth:`VerifyOptions.kit_options`): one kit verification type, not a second.

Where a running cluster's processes are is ``--nodes`` (the Plan's node order,
every platform) or a platform's own attach flag (``--pods`` for Kubernetes):
those fields come from the platform table (each row's ``attach``), after
``--nodes``, so a platform's attach is its folder's, not this module's.
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from pydantic import Field, create_model, field_validator, model_validator

from servekit.errors import UsageError
from servekit.kit import KitVerifyOptions
from servekit.platforms import Attach, Platform, attaches
from servekit.vocabulary import STARTABLE, Startable, StrictModel


def _attach_fields(entry_flag: str) -> dict[str, Any]:
    """Each platform's attach flag as a field: ``--pods`` for Kubernetes."""
    return {
        a.field: (
            str | None,
            Field(
                None,
                description=f"{p.where} (render --target {p.name}): {a.what}, {a.example} "
                f"(with {entry_flag} {a.entry})",
            ),
        )
        for p, a in attaches()
    }


class AttachedBy(NamedTuple):
    """The platform attach flag given: its row, its attach and the flag's text."""

    platform: Platform
    attach: Attach
    text: str


class _Attached(StrictModel):
    """What the attach flags share: which platform's flag was given."""

    def attached_by(self) -> AttachedBy | None:
        """The platform whose attach flag was given, with its text; two given are refused."""
        given = [AttachedBy(p, a, getattr(self, a.field)) for p, a in attaches()]
        given = [g for g in given if g.text is not None]
        if len(given) > 1:
            flags = " and ".join(g.attach.flag for g in given)
            raise UsageError(f"{flags}: give one (each names another platform's processes)")
        return given[0] if given else None


class _VerifyHead(_Attached):
    name: str = Field(description="layout name, e.g. local/1p1d or a3/1p1d")
    engine: Startable | None = Field(
        default=None,
        description="vllm: real engines; sim: simulated engines (default: vllm when started "
        "here; attached: what the engines say, and a contradicting value is refused)",
    )
    target: str | None = Field(
        default=None,
        description="attach to a running deployment instead: its entry URL, a layout run by "
        "'up', or a deployment.json",
    )
    nodes: str | None = Field(
        default=None,
        description="the cluster's node addresses in rank order (IP,IP,...): every engine's "
        "endpoint from the Plan (without --target: attach to the Plan's entry)",
    )


if TYPE_CHECKING:
    _VerifyAttach = _VerifyHead
else:
    _VerifyAttach = create_model(
        "_VerifyAttach", __base__=_VerifyHead, **_attach_fields("--target")
    )


class VerifyOptions(_VerifyAttach):
    """Everything ``servekit verify`` was asked, checked before anything starts."""

    logs: Path | None = Field(
        default=None,
        description="the cluster's log folder, one PROCESS.log per process (run.sh's LOG_DIR), "
        "for the error counters",
    )
    reference: str | None = Field(
        default=None,
        description="with --target/--nodes: URL of a single instance of the same model "
        "(the layout's verify.reference) for the PD == single check",
    )
    out: Path | None = Field(
        default=None, description="run folder (default .servekit/reports/<hw>__<name>/<UTC time>)"
    )
    baseline: Path | None = Field(default=None, description="a saved bench.json to compare against")
    no_baseline: bool = Field(
        default=False,
        description="do not compare with the last passing run in the ledger",
    )
    kit: Path | None = Field(
        default=None, description="image kit archive: write its release table into the report"
    )
    kit_repo: Path | None = Field(
        default=None, description="with --kit: the source repository (consistency row)"
    )
    kit_base: str | None = Field(
        default=None, description="with --kit: the base image to rebuild onto (rebuild row)"
    )
    kit_smoke: Path | None = Field(
        default=None,
        description="with --kit: the selftest.sh log from the rebuilt image (smoke row)",
    )
    kit_nonce: Path | None = Field(
        default=None,
        description="with --kit-smoke: the smoke-nonce.txt an earlier kit verify --out issued",
    )
    kit_baseline: str | None = Field(
        default=None, description="with --kit: the release's repo_rev (repo_rev row)"
    )
    quick: bool | None = Field(
        default=None,
        description="short workloads and a 2k acceptance context (default: quick on sim only)",
        json_schema_extra={"flag": "--quick/--full"},
    )
    speed: float | None = Field(
        default=None,
        gt=0,
        description="simulated time for acceptance, X times real time (--engine sim); default 1",
    )
    bench_speed: float | None = Field(
        default=None,
        gt=0,
        description="simulated time for the benchmarks (--engine sim); default 1 (real time)",
    )
    catalog: str | None = Field(
        default=None, description="catalog folder (default: SERVEKIT_CATALOG or the packaged one)"
    )
    record: bool = Field(
        default=True,
        description="append a ledger record on pass",
        json_schema_extra={"cli": False},
    )

    @field_validator("engine", mode="before")
    @classmethod
    def _known_engine(cls, value: Any) -> Any:
        if value is not None and value not in STARTABLE:
            raise ValueError(
                f"{value} is not an engine; use vllm (real engines) or sim (simulated engines)"
            )
        return value

    @property
    def engine_choice(self) -> Startable:
        """The engines to start here: ``--engine``, else real vLLM."""
        return self.engine or "vllm"

    @property
    def is_quick(self) -> bool:
        return self.engine == "sim" if self.quick is None else self.quick

    @property
    def attached(self) -> bool:
        """Nothing is started here: the run attaches to a deployment that is running."""
        return self.target is not None or self.nodes is not None or self.attached_by() is not None

    @property
    def kit_rows_asked(self) -> bool:
        """A ``--kit-*`` flag was given: the release table has rows beyond the kit itself."""
        values = (self.kit_repo, self.kit_base, self.kit_smoke, self.kit_nonce, self.kit_baseline)
        return any(v is not None for v in values)

    def kit_options(self, out: Path) -> KitVerifyOptions:
        """``--kit`` and its ``--kit-*`` flags as ``kit verify ARCHIVE --out OUT``'s options."""
        if self.kit is None:
            raise UsageError("--kit-*: give --kit ARCHIVE too")
        return KitVerifyOptions(
            archive=self.kit,
            out=out,
            repo=self.kit_repo,
            base=self.kit_base,
            smoke=self.kit_smoke,
            nonce=self.kit_nonce,
            baseline=self.kit_baseline,
        )


class _DeploymentHead(_Attached):
    name: str = Field(description="layout name, e.g. a3/1p1d")
    nodes: str | None = Field(
        None, description="the nodes' addresses in rank order (the rank table's): IP,IP,..."
    )


if TYPE_CHECKING:
    _DeploymentAttach = _DeploymentHead
else:
    _DeploymentAttach = create_model(
        "_DeploymentAttach", __base__=_DeploymentHead, **_attach_fields("--entry")
    )


class DeploymentOptions(_DeploymentAttach):
    """``servekit deployment``: the layout, where its nodes are, and what to write.

    Every check of the flags is here (the command and
    :func:`servekit.verify.cluster.write_deployment` only read them); what needs
    the layout (``--nodes`` against its node count) is checked when it loads.
    """

    out: Path = Field(description="the deployment.json to write")
    entry: str | None = Field(
        None, description="the URL clients use, when not the Plan's entry on its node"
    )
    logs: Path | None = Field(
        None, description="the cluster's log folder, one PROCESS.log per process (LOG_DIR)"
    )
    engine: Startable = Field(
        "vllm", description="what the nodes run: vllm, or sim (servekit sim serve)"
    )
    speed: float | None = Field(
        None, gt=0, description="--engine sim: the speed the simulators run at (SERVEKIT_SIM_SPEED)"
    )
    through_proxy: bool = Field(
        False,
        description="the engines' ports are out of reach from here: read their metrics "
        "through the proxy's /metrics/engines",
    )
    catalog: str | None = Field(None, description="catalog folder (default: the packaged one)")

    @model_validator(mode="after")
    def _where(self) -> DeploymentOptions:
        """Nodes (rank order) or a platform's attach (Kubernetes pods), one of the two; an
        attach needs the entry URL."""
        try:
            by = self.attached_by()
        except UsageError as exc:
            raise ValueError(str(exc)) from None
        if (self.nodes is None) == (by is None):
            others = "".join(f" or {a.flag} {a.example} ({p.where})" for p, a in attaches())
            raise ValueError(f"give --nodes IP,... (a ModelArts or plain cluster){others}")
        if by is not None and self.entry is None:
            a = by.attach
            raise ValueError(f"{a.flag}: add --entry URL, {a.entry} (how clients reach it)")
        return self

    @field_validator("out")
    @classmethod
    def _replaceable(cls, out: Path) -> Path:
        """Write a new file or replace a deployment.json; never clobber anything else."""
        if out.is_dir():
            raise ValueError(
                f"--out {out}: is a folder; give a file name such as {out}/deployment.json"
            )
        if out.exists():
            from servekit.deployment import Deployment

            try:
                Deployment.model_validate_json(out.read_bytes())
            except ValueError:
                raise ValueError(
                    f"--out {out}: exists and is not a deployment.json; give a new file name"
                ) from None
        return out

    @field_validator("entry")
    @classmethod
    def _entry_url(cls, value: str | None) -> str | None:
        from servekit.vocabulary import check_url

        try:
            return None if value is None else check_url(value, "--entry")
        except UsageError as exc:
            raise ValueError(str(exc)) from None

    @field_validator("logs")
    @classmethod
    def _log_folder(cls, logs: Path | None) -> Path | None:
        if logs is not None and not logs.is_dir():
            raise ValueError(f"--logs {logs}: no such folder; give the folder LOG_DIR filled")
        return logs.resolve() if logs is not None else None

    @field_validator("engine", mode="before")
    @classmethod
    def _known_engine(cls, value: Any) -> Any:
        if value not in STARTABLE:
            shown = value[:40] if isinstance(value, str) and value.isprintable() else repr(value)
            raise ValueError(f"--engine {shown}: use vllm (real engines) or sim (servekit sim)")
        return value

    @model_validator(mode="after")
    def _speed_needs_sim(self) -> DeploymentOptions:
        if self.speed is not None and self.engine != "sim":
            raise ValueError("--speed: only simulated engines have a speed; add --engine sim")
        return self


def reports_root() -> Path:
    """Where run folders go by default (``SERVEKIT_REPORTS`` overrides)."""
    return Path(os.environ.get("SERVEKIT_REPORTS", ".servekit/reports"))


def default_run_dir(name: str, started: dt.datetime) -> Path:
    return reports_root() / name.replace("/", "__") / started.strftime("%Y%m%dT%H%M%SZ")
