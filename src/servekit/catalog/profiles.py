"""Profiles: what a family of layouts shares, per role, written once.

The A3 layouts of one family (say the external-DP PD layouts 1p1d, 2p2d, 3p1d,
1p3d) run the same verified prefill and decode commands; only topology, engine
ids and ports differ. A profile at ``<catalog>/<hardware>/profiles/<name>.yaml``
holds those commands as data (tunable settings, vLLM flags, JSON configs,
environment, working directory) for ``common`` and for each role; an engine
says ``profile: NAME`` and the loader merges profile, role and engine in that
order (mappings key by key, where ``null`` removes an inherited key; anything
else is replaced whole). The profile's settings are also its rows of the
defaults table (``servekit defaults``).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from servekit.catalog.schema import ArgMap, EnvMap, Settings, refuse_nul
from servekit.defaults import SettingValue
from servekit.vocabulary import EngineKind, Role, StrictModel

PROFILES_DIR = "profiles"
MERGED_MAPPINGS = ("settings", "engine_args", "leader_args", "env")


class RoleProfile(StrictModel):
    """The part of an engine's definition a profile can give (any role, or one role)."""

    settings: Settings = Field(default_factory=dict)
    engine_args: ArgMap = Field(default_factory=dict)
    leader_args: ArgMap = Field(default_factory=dict)
    env: EnvMap = Field(default_factory=dict)
    additional_config: dict[str, Any] | None = None
    bind_host: str | None = "0.0.0.0"
    cwd: str | None = None


class Profile(StrictModel):
    """A family of layouts' shared command, per role."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9.-]*$")
    summary: str
    engine_kind: EngineKind
    source: str = Field(description="where these values were verified")
    common: RoleProfile = RoleProfile()
    roles: dict[Role, RoleProfile] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _no_nul(cls, data: object) -> object:
        refuse_nul(data)
        return data

    def layer(self, role: Role) -> list[dict[str, Any]]:
        """The profile's contributions for ``role``, in merge order."""
        parts = [self.common]
        if role in self.roles:
            parts.append(self.roles[role])
        return [p.model_dump(exclude_unset=True) for p in parts]

    def settings_for(self, role: Role) -> dict[str, SettingValue]:
        """This family's defaults-table row for ``role``."""
        merged: dict[str, SettingValue] = dict(self.common.settings)
        if role in self.roles:
            merged.update(self.roles[role].settings)
        return merged


def merge_layers(layers: list[dict[str, Any]]) -> dict[str, Any]:
    """Merge engine definitions, later ones winning; ``null`` in a mapping removes a key."""
    merged: dict[str, Any] = {}
    for layer in layers:
        for key, value in layer.items():
            if key in MERGED_MAPPINGS and isinstance(value, dict):
                current = dict(merged.get(key) or {})
                for name, item in value.items():
                    if item is None:
                        current.pop(name, None)
                    else:
                        current[name] = item
                merged[key] = current
            else:
                merged[key] = value
    return merged
