"""ModelArts: one flat folder every node runs (``run.sh`` reads the platform's rank table).

:data:`PLATFORM` is this folder's row of the platform table: its renderer, how
its files start (:mod:`.start`), its fake for dry runs (:mod:`.fake`). A
running ModelArts job is attached to by the Plan's node order (``--nodes``), so
it has no attach of its own.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from servekit.platforms.modelarts.entry import render
from servekit.platforms.modelarts.start import start
from servekit.platforms.platform import Platform

if TYPE_CHECKING:
    from servekit.platforms.fake import DryCluster, NodeOutcome


@contextmanager
def fake(name: str, **kwargs: Any) -> Iterator[DryCluster]:
    from servekit.platforms.modelarts.fake import dry_cluster

    with dry_cluster(name, **kwargs) as cluster:
        yield cluster


def refused(name: str, *args: Any, **kwargs: Any) -> list[NodeOutcome]:
    from servekit.platforms.modelarts.fake import refused_cluster

    return refused_cluster(name, *args, **kwargs)


PLATFORM = Platform(
    name="modelarts",
    describe="one entry every node runs from the rank table",
    where="ModelArts",
    render=render,
    start=start,
    fake=fake,
    refused=refused,
)
