"""A layout's topology: the source's naming grammar and its node count, defined once.

``<A>x<B>p<C>x<D>d``: A prefill instances of B nodes each, C decode instances of
D nodes each, ``x1`` omitted (``1p1d``, ``2p1x2d``, ``1x4p1x4d``); a single mixed
engine over N nodes is ``1node`` or ``<N>nodes`` (N >= 2). A trailing ``_<k>``
(a second variant of one shape) is allowed and ignored. The node count is
A*B + C*D, or N.

``3node`` and ``1nodes`` are not names of the grammar: the source names its mixed
layouts ``1node``, ``2nodes``, ``4nodes`` (its README's table: singular for one
node, plural otherwise), so a folder called ``3node`` says no node count (the
importer then finds it by running the folder) and render does not hold it to one.
Render, the importer (node count from a folder's name), ``layouts new`` (the
topology to derive) and ``layouts list`` read names through :meth:`Topology.parse`
only; ``tests/catalog/test_topology.py`` keeps it so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from servekit.vocabulary import PD_ROLES

_PD = re.compile(r"(\d+)(?:x(\d+))?p(\d+)(?:x(\d+))?d")
_MIXED = re.compile(r"1node|([2-9]|[1-9]\d+)nodes")
_VARIANT = re.compile(r"_\d+")
GRAMMAR = "<A>x<B>p<C>x<D>d, 1node or <N>nodes"


@dataclass(frozen=True)
class Topology:
    """A PD topology (``prefill`` instances of ``prefill_nodes`` nodes, ``decode`` of
    ``decode_nodes``) or a mixed engine over ``mixed_nodes`` nodes."""

    prefill: int = 0
    prefill_nodes: int = 1
    decode: int = 0
    decode_nodes: int = 1
    mixed_nodes: int = 0

    @classmethod
    def parse(cls, text: str, *, variant: bool = True) -> Topology | None:
        """The topology a name of the grammar says; None for any other name.

        ``variant``: accept (and ignore) a ``_<k>`` suffix.
        """
        base, sep, rest = text.partition("_")
        if sep and not (variant and _VARIANT.fullmatch(sep + rest)):
            return None
        if match := _MIXED.fullmatch(base):
            return cls(mixed_nodes=int(match.group(1) or 1))
        if match := _PD.fullmatch(base):
            a, b, c, d = (int(g) if g else 1 for g in match.groups())
            if min(a, b, c, d) < 1:
                return None
            return cls(a, b, c, d)
        return None

    @classmethod
    def of_spans(cls, spans: dict[str, list[int]], nodes: int) -> Topology | None:
        """The topology of engines given as role -> nodes each instance spans; None when
        the grammar has no name for them (instances of one role spanning unequal node
        counts, mixed beside PD, several mixed engines)."""
        if set(spans) == {"mixed"} and len(spans["mixed"]) == 1:
            return cls(mixed_nodes=nodes)
        if "mixed" in spans or not spans.get("prefill") or not spans.get("decode"):
            return None
        counts = []
        for role in PD_ROLES:
            if len(set(spans[role])) != 1:
                return None
            counts += [len(spans[role]), spans[role][0]]
        return cls(*counts)

    @property
    def is_pd(self) -> bool:
        return self.mixed_nodes == 0

    @property
    def nodes(self) -> int:
        """The node count: A*B + C*D, or N."""
        if not self.is_pd:
            return self.mixed_nodes
        return self.prefill * self.prefill_nodes + self.decode * self.decode_nodes

    @property
    def name(self) -> str:
        """The grammar's name (``x1`` omitted)."""
        if not self.is_pd:
            return "1node" if self.mixed_nodes == 1 else f"{self.mixed_nodes}nodes"

        def part(n: int, span: int, letter: str) -> str:
            return f"{n}{'' if span == 1 else f'x{span}'}{letter}"

        return part(self.prefill, self.prefill_nodes, "p") + part(
            self.decode, self.decode_nodes, "d"
        )

    def count(self, role: str) -> int:
        """Instances of ``role`` (prefill or decode)."""
        return self.prefill if role == "prefill" else self.decode

    def span(self, role: str) -> int:
        """Nodes each instance of ``role`` spans."""
        return self.prefill_nodes if role == "prefill" else self.decode_nodes


def name_nodes(name: str) -> int | None:
    """The node count a name of the grammar says (``1x2p1x4d`` = 6); None for another."""
    topology = Topology.parse(name)
    return None if topology is None else topology.nodes
