"""``--set KEY=VALUE`` overrides, validated exactly like the YAML.

Keys are dotted paths into the layout (``model.path``, ``proxy.port``,
``engines.decode0.settings.max_num_seqs``); engines are addressed by name, and
``engines.*.X`` sets X on every engine. Values are parsed as YAML scalars. The
result is re-validated by the same schema, so an override can never produce a
layout the catalog would reject.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from servekit import safeyaml
from servekit.catalog import Layout
from servekit.errors import UsageError, first_error_detail


def parse_set(item: str) -> tuple[list[str], Any]:
    """``KEY=VALUE`` -> (path, value); the value is read as YAML, within safeyaml's bounds."""
    key, sep, raw = item.partition("=")
    if not sep or not key.strip():
        raise UsageError(f"--set {item[:80]!r}: expected KEY=VALUE, e.g. --set proxy.port=9000")
    bad = next((c for c in item if not c.isprintable()), None)
    if bad is not None:
        # YAML would fold a newline into a space (and a value reaches shell scripts):
        # a control character is refused, never silently changed.
        raise UsageError(
            f"--set {key.strip()[:80]!r}: holds a control character ({bad!r}); "
            "give the value on one line of printable text"
        )
    value = safeyaml.compose(raw, f"--set {key.strip()[:80]}")[1] if raw.strip() else ""
    return key.strip().split("."), value


def _where(loc: tuple[Any, ...], data: dict[str, Any]) -> str:
    """``engines.3.settings`` -> ``engines.decode0.settings``: engines by name, as --set takes."""
    parts = [str(p) for p in loc]
    if len(parts) > 1 and parts[0] == "engines" and isinstance(loc[1], int):
        engines = data.get("engines") or []
        if loc[1] < len(engines) and isinstance(engines[loc[1]], dict):
            parts[1] = str(engines[loc[1]].get("name", loc[1]))
    return ".".join(parts)


def assign_path(node: Any, path: list[str], value: Any, full: str) -> None:
    head, rest = path[0], path[1:]
    if isinstance(node, list):
        targets = (
            node
            if head == "*"
            else [e for e in node if isinstance(e, dict) and e.get("name") == head]
        )
        if not targets:
            names = ", ".join(str(e.get("name")) for e in node if isinstance(e, dict))
            raise UsageError(
                f"--set {full}: no entry named {head!r}; choose one of: {names} (or *)"
            )
        for target in targets:
            if not rest:
                raise UsageError(
                    f"--set {full}: name a field of {head!r}, e.g. {full}.settings.max_num_seqs"
                )
            assign_path(target, rest, value, full)
        return
    if not isinstance(node, dict):
        raise UsageError(f"--set {full}: {head!r} is inside a value that has no fields")
    if not rest:
        node[head] = value
        return
    if head not in node or node[head] is None:
        node[head] = {}
    assign_path(node[head], rest, value, full)


def apply_overrides(layout: Layout, items: list[str]) -> Layout:
    """Return ``layout`` with every ``--set`` applied, re-validated by the schema."""
    if not items:
        return layout
    data = layout.model_dump(mode="json", exclude_defaults=False)
    for item in items:
        path, value = parse_set(item)
        assign_path(data, path, value, item.partition("=")[0])
    try:
        return Layout.model_validate(data)
    except ValidationError as exc:
        err = first_error_detail(exc)
        field = _where(err.loc, data)
        if err.kind == "extra_forbidden":
            raise UsageError(
                f"--set: unknown key {field!r}; see 'servekit layouts show {layout.name}' for the fields"
            ) from exc
        raise UsageError(f"--set: {field}: {err.reason}") from exc
