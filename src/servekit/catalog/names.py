"""A layout's name: one pattern, and one type that knows its parts.

``<hardware>/<name>`` (hand-made, ``a3/1p1d``) or ``<hardware>/<model>/<topology>``
(imported and derived, ``a3/glm5.1/1x2p1x4d``). Everything that needs a part of a
name (the hardware folder, the model, the topology a name says, the family
profile, how deep the layout file sits in its catalog) asks :class:`LayoutName`;
nothing splits a name by hand.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

LAYOUT_NAME = r"^[a-z0-9-]+/[a-z0-9][a-z0-9.-]*(?:/[a-z0-9][a-z0-9.-]*)?$"
"""What a layout name may be (the schema's ``name`` pattern)."""
SHAPES = "<hardware>/<name> or <hardware>/<model>/<topology>"


@dataclass(frozen=True)
class LayoutName:
    """A layout's name by its parts; ``model`` is None for a two-part name."""

    hardware: str
    model: str | None
    leaf: str

    @classmethod
    def parse(cls, name: str) -> LayoutName:
        """The parts of ``name``; ValueError (one line) when it is not a layout name."""
        if not re.fullmatch(LAYOUT_NAME, name):
            raise ValueError(f"{name[:80]!r} is not a layout name ({SHAPES}, lower case)")
        parts = name.split("/")
        return cls(parts[0], parts[1] if len(parts) == 3 else None, parts[-1])

    @property
    def parts(self) -> tuple[str, ...]:
        return (self.hardware, self.leaf) if self.model is None else self.parts3

    @property
    def parts3(self) -> tuple[str, str, str]:
        """``(hardware, model, topology)`` of a three-part name (ValueError otherwise)."""
        if self.model is None:
            raise ValueError(f"{self}: not <hardware>/<model>/<topology>")
        return (self.hardware, self.model, self.leaf)

    @property
    def has_model(self) -> bool:
        """A ``<hardware>/<model>/<topology>`` name (imported or derived)."""
        return self.model is not None

    @property
    def topology(self) -> str | None:
        """The topology part of a three-part name (None for a two-part one)."""
        return self.leaf if self.model is not None else None

    @property
    def family(self) -> str:
        """The family profile of a three-part name: ``glm5.1-a3`` for ``a3/glm5.1/...``."""
        _, model, _ = self.parts3
        return f"{model}-{self.hardware}"

    def with_leaf(self, leaf: str) -> LayoutName:
        """The same name with another last part (another topology)."""
        return LayoutName(self.hardware, self.model, leaf)

    def __str__(self) -> str:
        return "/".join(self.parts)
