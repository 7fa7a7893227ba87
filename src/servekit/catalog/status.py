"""A layout's verification status, as list, check, the site and the report show it.

The ledger beside a layout (written by ``servekit verify``) is the authority
once it exists; otherwise the seed's own record in ``provenance.verification``
applies. Either way a record made on another image is stale, a derived layout
is never verified by its parent's record, and a simulated run never counts as
hardware verification.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from servekit.catalog.loader import LoadedLayout

State = Literal["verified", "stale", "unverified", "derived", "simulated-only"]


class LayoutStatus(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    state: State
    reason: str


def layout_status(loaded: LoadedLayout) -> LayoutStatus:
    """Status from the seed's record (the ledger refines it when present)."""
    lay = loaded.layout
    v = lay.provenance.verification
    if v.verified and v.image == lay.image:
        when = f" on {v.date}" if v.date else ""
        return LayoutStatus(state="verified", reason=f"verified{when} on {v.image}")
    if v.verified:
        return LayoutStatus(state="stale", reason=f"verified on {v.image}, now {lay.image}")
    if lay.provenance.derived_from:
        return LayoutStatus(
            state="derived",
            reason=f"derived from {lay.provenance.derived_from}, not separately validated",
        )
    if v.previously_verified:
        return LayoutStatus(
            state="stale", reason=v.note or "verified on an earlier image; re-run pending"
        )
    return LayoutStatus(state="unverified", reason=v.note or "never verified")
