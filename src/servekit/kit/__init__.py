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
    from servekit.kit.build import BuildResult, build_kit
    from servekit.kit.checks import CheckReport, CheckResult
    from servekit.kit.errors import KitRefused
    from servekit.kit.image import read_image
    from servekit.kit.imagetypes import Image
    from servekit.kit.inspector import (
        ImageSummary,
        inspect_image,
        inspect_kit,
        is_kit,
        is_rootfs,
        rootfs_manifest,
    )
    from servekit.kit.models import Gate, KitExpect, KitManifest, Marker, RoleValues
    from servekit.kit.options import (
        KitBuildOptions,
        KitInspectOptions,
        KitRebuildOptions,
        KitVerifyOptions,
    )
    from servekit.kit.rebuild import rebuild_kit
    from servekit.kit.releasetable import (
        KitReleaseTable,
        KitTableRow,
        kit_release_table,
        render_release_table,
        verify_release,
    )
    from servekit.kit.scratch import terminate_cleanly
    from servekit.kit.smokeproof import NONCE_FILE
    from servekit.kit.streams import Limits
    from servekit.kit.tables import checks_table, print_image, print_kit
    from servekit.kit.verify import verify_kit

__getattr__, __dir__ = lazy_face(__name__)
__all__ = [
    "NONCE_FILE",
    "BuildResult",
    "CheckReport",
    "CheckResult",
    "Gate",
    "Image",
    "ImageSummary",
    "KitBuildOptions",
    "KitExpect",
    "KitInspectOptions",
    "KitManifest",
    "KitRebuildOptions",
    "KitRefused",
    "KitReleaseTable",
    "KitTableRow",
    "KitVerifyOptions",
    "Limits",
    "Marker",
    "RoleValues",
    "build_kit",
    "checks_table",
    "inspect_image",
    "inspect_kit",
    "is_kit",
    "is_rootfs",
    "kit_release_table",
    "print_image",
    "print_kit",
    "read_image",
    "rebuild_kit",
    "render_release_table",
    "rootfs_manifest",
    "terminate_cleanly",
    "verify_kit",
    "verify_release",
]
