"""The defaults table per engine kind, role and layout family, in one place.

A layout family is a profile (``<catalog>/<hardware>/profiles/<name>.yaml``):
its settings per role are that family's rows, and an engine naming the profile
takes its tunables from exactly that row plus its own overrides. Engines that
name no profile take the generic rows of :mod:`servekit.defaults` (family
``generic``). ``servekit defaults`` prints both, so one family's verified
values (say the V4.1 kit's) can be seen not to leak into another's.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from servekit.catalog.loader import load_all, load_profile, profile_names, resolve_catalog
from servekit.catalog.profiles import PROFILES_DIR, Profile
from servekit.catalog.schema import Engine
from servekit.defaults import SETTINGS_BY_KEY, Setting, SettingValue, defaults_for, format_value
from servekit.errors import UsageError
from servekit.vocabulary import ENGINE_KINDS, ROLES, EngineKind, Role

GENERIC = "generic"
ANY_ROLE = "any"


@dataclass(frozen=True)
class DefaultsRow:
    """One cell of the table: a family's value of one setting for a kind and role."""

    family: str
    kind: EngineKind
    role: str  # a Role, or "any" for a profile that gives no role its own part
    setting: Setting
    value: str


def _rows(
    family: str, kind: EngineKind, role: str, values: dict[str, SettingValue]
) -> list[DefaultsRow]:
    return [
        DefaultsRow(family, kind, role, SETTINGS_BY_KEY[key], format_value(value))
        for key, value in values.items()
    ]


def generic_rows() -> list[DefaultsRow]:
    """The rows of engines that name no profile."""
    return [
        row
        for kind in ENGINE_KINDS
        for role in ROLES
        for row in _rows(GENERIC, kind, role, defaults_for(kind, role))
    ]


def profile_rows(profile: Profile) -> list[DefaultsRow]:
    """A family's rows: one per role it gives a part (or ``any`` when it gives none)."""
    if not profile.roles:
        return _rows(profile.name, profile.engine_kind, ANY_ROLE, dict(profile.common.settings))
    return [
        row
        for role in ROLES
        if role in profile.roles
        for row in _rows(profile.name, profile.engine_kind, role, profile.settings_for(role))
    ]


def catalog_profiles(catalog: Path | str | None = None) -> list[Profile]:
    """Every profile of a catalog, schema-checked."""
    root = resolve_catalog(catalog)
    found = []
    for name in profile_names(root):
        hardware, _, stem = name.partition("/")
        found.append(load_profile(root / hardware / PROFILES_DIR, stem))
    return found


def family_of(engine: Engine) -> str:
    """The family an engine takes its tunables from."""
    return engine.profile or GENERIC


def family_settings(
    family: str, kind: EngineKind, role: Role, profiles: dict[str, Profile]
) -> dict[str, SettingValue]:
    """The row an engine of ``family``, ``kind`` and ``role`` starts from."""
    if family == GENERIC:
        return defaults_for(kind, role)
    return profiles[family].settings_for(role)


def family_users(catalog: Path | str | None = None) -> dict[tuple[str, EngineKind], list[str]]:
    """(family, engine kind) -> the layouts with an engine of that family, sorted."""
    users: dict[tuple[str, EngineKind], set[str]] = {}
    for loaded in load_all(catalog):
        lay = loaded.layout
        for engine in lay.engines:
            users.setdefault((family_of(engine), lay.engine_kind), set()).add(lay.name)
    return {key: sorted(names) for key, names in users.items()}


def defaults_rows(
    catalog: Path | str | None = None,
    *,
    kind: EngineKind | None = None,
    role: Role | None = None,
    family: str | None = None,
) -> list[DefaultsRow]:
    """The whole table (generic rows, then each family's), narrowed by the filters given."""
    profiles = catalog_profiles(catalog)
    known = [GENERIC, *(p.name for p in profiles)]
    wanted = family.rsplit("/", 1)[-1] if family else None
    if wanted is not None and wanted not in known:
        raise UsageError(f"--family {family!r}: unknown family; choose one of {', '.join(known)}")
    rows = generic_rows() + [row for p in profiles for row in profile_rows(p)]
    return [
        r
        for r in rows
        if (wanted is None or r.family == wanted)
        and (kind is None or r.kind == kind)
        and (role is None or r.role in (role, ANY_ROLE))
    ]


def family_script_defaults(
    family: str, role: str, catalog: Path | str | None = None, kind: EngineKind | None = None
) -> dict[str, str]:
    """Script variable -> value for one family and role, as ``kit verify --family`` compares.

    A family's engines take exactly its row (no generic fallback), so a kit
    that ships the V4.1 family's scripts is checked against that row only.
    """
    rows = defaults_rows(catalog, kind=kind, family=family)
    if not rows and kind is not None:
        raise UsageError(f"--family {family!r} has no rows for --kind {kind}; drop --kind")
    if role in ROLES:
        rows = [r for r in rows if r.role in (role, ANY_ROLE)]
    return {r.setting.var: r.value for r in rows}
