"""The guard that keeps ``--dist loadgroup`` honest (tests/helpers/parallel.py)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, cast

import pytest
from tests.helpers.parallel import ungrouped


@dataclass
class FakeItem:
    nodeid: str
    marks: list[Any] = field(default_factory=list)

    def iter_markers(self, name: str) -> Iterator[Any]:
        return (m for m in self.marks if m.name == name)


def _items(*items: FakeItem) -> list[pytest.Item]:
    return cast("list[pytest.Item]", list(items))


SERIAL = pytest.mark.xdist_group("serial").mark
SELFCHECK = pytest.mark.xdist_group(name="accept-selfcheck").mark


def test_tagged_groups_and_ungrouped_tests_pass() -> None:
    items = _items(
        FakeItem("t.py::a@serial", [SERIAL]),
        FakeItem("t.py::b@accept-selfcheck_serial", [SERIAL, SELFCHECK]),
        FakeItem("t.py::c"),
    )
    assert ungrouped(items) == []


def test_a_group_without_its_tag_is_named() -> None:
    """The control: pytest 9.2 with xdist 3.8 leaves node ids untagged."""
    items = _items(FakeItem("t.py::a", [SERIAL]), FakeItem("t.py::b@serial", [SELFCHECK]))
    assert ungrouped(items) == ["t.py::a", "t.py::b@serial"]
