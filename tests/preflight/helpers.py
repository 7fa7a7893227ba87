"""What the preflight tests share: layouts by name, and a node laid out on a fake fabric."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from servekit.catalog import Layout, load
from servekit.platforms.fakenpu import Fabric, Faults
from servekit.preflight import PLATFORM_OF, node_units, spec_doc
from servekit.preflight.node import servekit_preflight as entry
from servekit.render import build_plan


def plan_of(name: str) -> Layout:
    return load(name).layout


def spec_of(name: str) -> dict[str, Any]:
    """The layout's spec as a node's preflight reads it."""
    plan = build_plan(plan_of(name))
    return entry.parse_spec(json.dumps(spec_doc(plan, node_units(plan))).encode())


def fabric_for(name: str, root: Path, faults: Faults | None = None) -> Fabric:
    hardware = plan_of(name).hardware
    platform = PLATFORM_OF[hardware.accelerator]
    return Fabric(root, platform, hardware.devices_per_node, faults or Faults())
