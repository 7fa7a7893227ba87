"""Which tests may not run beside each other under pytest-xdist.

``make test`` runs pytest with ``-n 2 --dist loadgroup``: the tests of one
``xdist_group`` run one after another on one worker, everything else wherever a
worker is free. Real vLLM engines take most of a core each, so every ``vllm`` test
is put in :data:`SERIAL_GROUP` (tests/conftest.py) unless it names its own group
(tests/local/test_pip_install.py: mostly pip, on free ports); so is a test that binds a port
the catalog fixes (``servekit up`` without ``--free-ports``), with :data:`serial`.
"""

from __future__ import annotations

import pytest

SERIAL_GROUP = "serial"
serial = pytest.mark.xdist_group(SERIAL_GROUP)


def groups_of(item: pytest.Item) -> set[str]:
    """The ``xdist_group`` names of ``item``, as pytest-xdist's loadgroup reads them."""
    return {
        str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
        for mark in item.iter_markers("xdist_group")
    }


def ungrouped(items: list[pytest.Item]) -> list[str]:
    """The node ids of grouped items that loadgroup did not tag with their group.

    pytest-xdist's worker appends ``@GROUP`` to each grouped item's node id and the
    scheduler keeps items with the same tag on one worker; an untagged item is
    scheduled alone, so its group's shared engines start on every worker at once
    (pytest 9.2 with xdist 3.8: pytest-dev/pytest-xdist#1386).
    """
    lost = []
    for item in items:
        names = groups_of(item)
        if names and not item.nodeid.endswith("@" + "_".join(sorted(names))):
            lost.append(item.nodeid)
    return lost
