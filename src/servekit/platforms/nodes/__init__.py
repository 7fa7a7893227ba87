"""Plain nodes: a bash folder per node, started once ``NODE<i>_IP`` are exported.

:data:`PLATFORM` is this folder's row of the platform table: its renderer, how
its files start (:mod:`.start`), its ``--set nodes.*`` settings (:mod:`.settings`;
``nodes.elastic=on`` adds the ``scale/<group>/`` folders of :mod:`.scale`) and its
fake for dry runs (:mod:`.fake`: every node's ``run.sh`` on a loopback address).
Plain nodes are attached to by the Plan's node order (``--nodes``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from servekit.platforms.nodes.entry import render
from servekit.platforms.nodes.settings import NAMES as SETTINGS
from servekit.platforms.nodes.start import start
from servekit.platforms.platform import Platform

if TYPE_CHECKING:
    from servekit.platforms.fake import DryCluster


@contextmanager
def fake(name: str, **kwargs: Any) -> Iterator[DryCluster]:
    from servekit.platforms.nodes.fake import nodes_dry_cluster

    with nodes_dry_cluster(name, **kwargs) as cluster:
        yield cluster


PLATFORM = Platform(
    name="nodes",
    describe="a bash folder per node (export NODE<i>_IP)",
    where="plain nodes",
    render=render,
    start=start,
    settings=SETTINGS,
    set_examples=("nodes.elastic=on",),
    settings_page="docs/modelarts.md",
    fake=fake,
)
