"""servekit.kit: image-layer kits (base image + working layers), built and proven.

Reads and writes OCI image layouts and docker-archive tarballs without a daemon,
builds deterministic ``.tar.zst`` kits from a source image or a payload spec,
verifies them without running anything from them (integrity, the kit's own
promises, source = payload, rebuild, smoke log, baseline), writes the release
table, and rebuilds the image onto its base with a filesystem-manifest proof.
See ``docs/kit.md``.

    from servekit.kit import KitVerifyOptions, render_release_table, verify_release

    options = KitVerifyOptions(archive=Path("kit.tar.zst"), out=Path("out/kit"))
    table, report = verify_release(options)
    print(render_release_table(table))
"""

from typing import TYPE_CHECKING

from servekit.lazyface import lazy_face

if TYPE_CHECKING:
    from servekit.kit.build import BuildResult as BuildResult, build_kit as build_kit
    from servekit.kit.checks import CheckReport as CheckReport, CheckResult as CheckResult
    from servekit.kit.errors import KitRefused as KitRefused
    from servekit.kit.image import read_image as read_image
    from servekit.kit.imagetypes import Image as Image
    from servekit.kit.inspector import (
        ImageSummary as ImageSummary,
        inspect_image as inspect_image,
        inspect_kit as inspect_kit,
        is_kit as is_kit,
        is_rootfs as is_rootfs,
        rootfs_manifest as rootfs_manifest,
    )
    from servekit.kit.models import (
        Gate as Gate,
        KitExpect as KitExpect,
        KitManifest as KitManifest,
        Marker as Marker,
        RoleValues as RoleValues,
    )
    from servekit.kit.options import (
        KitBuildOptions as KitBuildOptions,
        KitInspectOptions as KitInspectOptions,
        KitRebuildOptions as KitRebuildOptions,
        KitVerifyOptions as KitVerifyOptions,
    )
    from servekit.kit.rebuild import rebuild_kit as rebuild_kit
    from servekit.kit.releasetable import (
        KitReleaseTable as KitReleaseTable,
        KitTableRow as KitTableRow,
        kit_release_table as kit_release_table,
        render_release_table as render_release_table,
        verify_release as verify_release,
    )
    from servekit.kit.scratch import terminate_cleanly as terminate_cleanly
    from servekit.kit.smokeproof import NONCE_FILE as NONCE_FILE
    from servekit.kit.streams import Limits as Limits
    from servekit.kit.tables import (
        checks_table as checks_table,
        print_image as print_image,
        print_kit as print_kit,
    )
    from servekit.kit.verify import verify_kit as verify_kit

__getattr__, __dir__ = lazy_face(__name__)
