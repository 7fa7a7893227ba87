"""servekit.platforms: where a Plan runs. One folder per platform, chosen from one table.

``modelarts/`` (one entry every node runs from the rank table), ``nodes/`` (a
folder per node) and ``k8s/`` (LeaderWorkerSets, the proxy's Deployment and
Service, kustomize; a fake cluster for dry runs). :data:`PLATFORMS` is the
table every surface asks (render, usage, verify's attach, the fakes): a row is
a folder's :class:`Platform`. The fakes named below are the rows' own, kept
by name for the tests that run them.
"""

from typing import TYPE_CHECKING

from servekit.lazyface import lazy_face

if TYPE_CHECKING:
    from servekit.platforms.api import (
        render_layout as render_layout,
        render_target as render_target,
    )
    from servekit.platforms.fake import (
        DryCluster as DryCluster,
        NodeOutcome as NodeOutcome,
        leftovers as leftovers,
    )
    from servekit.platforms.fakenpu import Faults as Faults
    from servekit.platforms.k8s.fake import (
        k8s_dry_cluster as k8s_dry_cluster,
        k8s_refused as k8s_refused,
    )
    from servekit.platforms.modelarts.fake import (
        dry_cluster as dry_cluster,
        refused_cluster as refused_cluster,
    )
    from servekit.platforms.options import RenderOptions as RenderOptions
    from servekit.platforms.platform import (
        Attach as Attach,
        Platform as Platform,
        Start as Start,
    )
    from servekit.platforms.request import RenderRequest as RenderRequest
    from servekit.platforms.table import (
        DEFAULT_TARGET as DEFAULT_TARGET,
        PLATFORMS as PLATFORMS,
        TARGETS as TARGETS,
        TargetName as TargetName,
        attaches as attaches,
        platform as platform,
        render_files as render_files,
        start_steps as start_steps,
        write_rendering as write_rendering,
    )

__getattr__, __dir__ = lazy_face(__name__)
