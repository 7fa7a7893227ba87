"""servekit.kit: image-layer kits (base image + working layers), built and proven.

Reads and writes OCI image layouts and docker-archive tarballs without a daemon,
builds deterministic ``.tar.zst`` kits from a source image or a payload spec,
verifies them without running anything from them, and rebuilds the image onto
its base with a filesystem-manifest proof. See ``docs/kit.md``.
"""

from servekit.kit.build import BuildRequest, BuildResult, build_kit
from servekit.kit.checks import CheckReport, CheckResult
from servekit.kit.errors import KitRefused
from servekit.kit.image import read_image
from servekit.kit.imagetypes import Image
from servekit.kit.models import KitManifest
from servekit.kit.rebuild import RebuildRequest, rebuild_kit
from servekit.kit.streams import Limits
from servekit.kit.verify import verify_kit

__all__ = [
    "BuildRequest",
    "BuildResult",
    "CheckReport",
    "CheckResult",
    "Image",
    "KitManifest",
    "KitRefused",
    "Limits",
    "RebuildRequest",
    "build_kit",
    "read_image",
    "rebuild_kit",
    "verify_kit",
]
