"""The options of ``servekit render``: one model for the CLI, the code and the docs.

The platform table fills in what is the platforms': ``--target``'s choices and
help are its rows, and each platform's own flags (``--k8s-kind``) are fields of
its ``flags`` model, added here after ``--target``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import Field, create_model

from servekit.platforms.table import DEFAULT_TARGET, PLATFORMS, TargetName
from servekit.vocabulary import StrictModel


class _Head(StrictModel):
    name: str = Field(description="layout name, e.g. a3/1p1d")
    out: Path = Field(
        description="folder to write (a new or empty folder, or an earlier rendering)"
    )
    target: TargetName = Field(
        DEFAULT_TARGET,
        description="; ".join(f"{p.name}: {p.describe}" for p in PLATFORMS.values()),
    )


def _platform_flags() -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for p in PLATFORMS.values():
        if p.flags is not None:
            fields.update({n: (f.annotation, f) for n, f in p.flags.model_fields.items()})
    return fields


if TYPE_CHECKING:
    _WithFlags = _Head
else:
    _WithFlags = create_model("_WithFlags", __base__=_Head, **_platform_flags())


class RenderOptions(_WithFlags):
    """What ``servekit render`` is asked."""

    set: tuple[str, ...] = Field(
        (),
        description="; ".join(
            ["override a field, e.g. engines.decode0.settings.max_num_seqs=64"]
            + [p.set_help() for p in PLATFORMS.values() if p.settings]
        )
        + " (repeatable)",
    )
    preflight: bool = Field(
        True,
        description="run the preflight on every node (pod) before the engines start: devices, "
        "NPU links, ports and model checked, the nodes compared (PREFLIGHT=0 skips it at launch)",
    )
    force: bool = Field(False, description="replace an --out folder that holds other files")
    catalog: Path | None = Field(
        None, description="catalog folder (default: SERVEKIT_CATALOG or the packaged catalog)"
    )

    def platform_flags(self) -> dict[str, Any]:
        """Every platform's own flags as given (field -> value), for :func:`render_layout`."""
        return {n: getattr(self, n) for p in PLATFORMS.values() for n in p.flag_settings()}
