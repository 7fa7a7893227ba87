"""The report's view model: rows of text parts, each part optionally linked to evidence.

Templates (Markdown and HTML) render these and nothing else, so both formats
say the same thing and no figure can reach the page without its evidence link.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Mark = Literal["ok", "fail", "info", "none"]


@dataclass(frozen=True)
class Part:
    """A piece of text; ``href`` is the evidence file it comes from (relative)."""

    text: str
    href: str | None = None


@dataclass(frozen=True)
class Row:
    """One table row: a label, a mark, and the parts that make its value."""

    item: str
    parts: tuple[Part, ...]
    mark: Mark = "none"


@dataclass(frozen=True)
class Change:
    """One line of 'what changed': before -> after, with the delta."""

    item: str
    before: str
    after: str
    delta: str
    href: str | None = None
    baseline_href: str | None = None


@dataclass(frozen=True)
class Command:
    """A step of 'how to use it': what it does and the command lines."""

    title: str
    lines: tuple[str, ...]


@dataclass(frozen=True)
class Plot:
    """A benchmark plot: its title, its file in the run (``href``) and the PNG inline."""

    title: str
    href: str
    data_uri: str


@dataclass(frozen=True)
class KitRow:
    """One row of the kit's release table: the item, its status, N/N, the result, the evidence."""

    item: str
    status: str
    ratio: str
    result: str
    href: str | None
    mark: Mark


@dataclass(frozen=True)
class ReportView:
    """Everything a template needs to write the report."""

    title: str
    layout: str
    verdict: str
    headline: tuple[Part, ...]
    facts: tuple[Row, ...]
    changes: tuple[Change, ...]
    changes_note: str
    table: tuple[Row, ...]
    accept_rows: tuple[Row, ...]
    usage: tuple[Command, ...]
    checksums: tuple[tuple[str, str, int], ...]
    boundaries: tuple[str, ...]
    steps: tuple[Row, ...]
    simulated: bool
    plots: tuple[Plot, ...] = field(default_factory=tuple)
    kit_title: str | None = None
    kit_rows: tuple[KitRow, ...] = field(default_factory=tuple)
