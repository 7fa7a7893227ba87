"""The strict frozen model: the base of every pydantic model servekit reads or writes.

Parse once, fail fast: a field nobody declared (a typo in a layout, a key an older
servekit never wrote) is refused with its name instead of silently dropped, and a
parsed value cannot be changed behind the code that checked it. Every such model
inherits :class:`StrictModel` rather than repeating its config; one that needs more
config extends it (``model_config = StrictModel.model_config | ConfigDict(...)``).
This module imports pydantic: the proxy never imports it (its zipapp runs without
pydantic), and the vocabulary's face loads it only when asked.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    """A pydantic model that refuses unknown fields and cannot be changed once built."""

    model_config = ConfigDict(frozen=True, extra="forbid")
