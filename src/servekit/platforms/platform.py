"""What one platform is: the row its folder gives the table (:mod:`.table`).

A leaf of ``platforms/``: each folder (``modelarts/``, ``nodes/``, ``k8s/``)
builds its :class:`Platform` from these types without importing the table, and
every surface that used to branch on a platform's name (render's flags and
summary, the plan page, the report's "how to use it", verify's and deployment's
attach flag, the dry-run fakes) asks the row instead.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from servekit.platforms.request import Files, RenderRequest
from servekit.render import Plan

if TYPE_CHECKING:
    from servekit.platforms.fake import DryCluster, NodeOutcome


@dataclass(frozen=True)
class SettingSpec:
    """One ``--set <platform>.KEY``: its default as written and what it does (the
    platform's settings table, its docs table and its refusals read it)."""

    name: str
    default: str
    help: str


@dataclass(frozen=True)
class Start:
    """How a rendering is started: said once, printed by its plan.md, the release
    report and the catalog page ("how to use it")."""

    title: str
    lines: tuple[str, ...]
    files: tuple[str, ...]
    """The rendered files (relative to the output folder) the lines run."""
    note: str = ""
    """What the rendering's plan.md says under the lines (the platform's own words)."""


@dataclass(frozen=True)
class Attach:
    """The flag of ``verify`` and ``deployment`` that says where a running rendering's
    processes are, when the Plan's node order does not (Kubernetes: a pod per engine).

    ``hosts`` turns the flag's text into process name -> the address it is reached
    at, refusing (UsageError, one line) what does not fit the Plan.
    """

    field: str
    """The options field, so the flag is ``--<field>``."""
    example: str
    what: str
    """What the flag names, e.g. "each engine pod's address"."""
    entry: str
    """The URL clients use, e.g. "the proxy Service's URL"."""
    hosts: Callable[[str, Plan], dict[str, str]]

    @property
    def flag(self) -> str:
        return "--" + self.field.replace("_", "-")


@dataclass(frozen=True)
class Platform:
    """One render target: everything servekit knows of it, from its own folder."""

    name: str
    describe: str
    """What ``--target <name>`` writes (render's help)."""
    where: str
    """The platform in a sentence: "Or on {where}", "({where})"."""
    render: Callable[[RenderRequest], Files]
    start: Callable[[Plan, str], Start]
    """How a rendering of the Plan written to ``out`` (as printed) is started."""
    settings: tuple[str, ...] = ()
    """The ``--set <name>.KEY=VALUE`` keys it reads."""
    set_examples: tuple[str, ...] = ()
    """A few of them as given (``k8s.network=host``), for ``--set``'s help."""
    settings_page: str = ""
    """The page that lists them (``docs/kubernetes.md``), for ``--set``'s help."""
    flags: type[BaseModel] | None = None
    """Its own ``servekit render`` flags: each field ``<name>_<setting>`` (``k8s_kind``)
    becomes that setting; given with another target it is refused."""
    summary: str | None = None
    """The rendered file ``servekit render`` prints after writing (``k8s.md``)."""
    attach: Attach | None = None
    requirements: Callable[[str, Path | None], list[str]] | None = None
    """What a layout (name, catalog) needs from this platform, one line each with its
    reason (``servekit layouts show`` prints them)."""
    fake: Callable[..., AbstractContextManager[DryCluster]] | None = None
    """Its fake for dry runs: runs the rendered entry per node or pod here."""
    refused: Callable[..., list[NodeOutcome]] | None = None
    """Its fake run to the preflight's refusal (a fault injected), one outcome per node."""

    def set_help(self) -> str:
        """What ``--set``'s help says of its settings ("" when it reads none)."""
        if not self.settings:
            return ""
        examples = " or ".join(self.set_examples)
        listed = f" ({self.settings_page} lists them)" if self.settings_page else ""
        example = f", e.g. {examples}" if examples else ""
        return f"{self.name}.KEY=VALUE for --target {self.name}{example}{listed}"

    def flag_settings(self) -> dict[str, str]:
        """Its render flags' field -> the setting each one sets."""
        fields = self.flags.model_fields if self.flags is not None else {}
        return {f: f.removeprefix(self.name + "_") for f in fields}

    def flag_defaults(self) -> dict[str, Any]:
        fields = self.flags.model_fields if self.flags is not None else {}
        return {name: f.default for name, f in fields.items()}
