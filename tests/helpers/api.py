"""The order ruff keeps ``__all__`` in (RUF022, isort style), for tests that pin a face."""

from __future__ import annotations

from collections.abc import Iterable


def isort_order(names: Iterable[str]) -> list[str]:
    """CONSTANTS first, then CamelCase names, then the rest; each group alphabetical."""
    return sorted(names, key=lambda n: (not n.isupper(), not n[:1].isupper(), n))
