"""Write an imported layout into a catalog: layout.yaml, its family profile, source.json.

The synthesized per-role settings, flags, environment, JSON configs and working
directory go to the family profile ``<catalog>/<hw>/profiles/<model>-<hw>.yaml``
when it does not hold that role yet; the layout then states only what its own
engines do differently (a ``null`` removes what the profile has and the engine
lacks). An existing role of a profile is never rewritten, so importing a second
layout of a family leaves the first one's Plan as it was, and importing the same
folder again writes the very same bytes. Every file is written through a temp
file and a rename (:mod:`servekit.vocabulary.atomic`); nothing is half-written.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from servekit import safeyaml
from servekit.catalog import (
    LAYOUT_FILE,
    MERGED_MAPPINGS,
    PROFILES_DIR,
    LayoutName,
    RoleProfile,
)
from servekit.defaults import kv_events_unfit, prefix_caching
from servekit.errors import UsageError
from servekit.importer.synthesize import UNSET, Synthesis, unset_names
from servekit.vocabulary import ROLES, atomic_write_text

SOURCE_FILE = "source.json"
# What a profile role holds, and the defaults of its fields that are not mappings.
ROLE_KEYS = tuple(RoleProfile.model_fields)
_ROLE_DEFAULTS = {
    k: f.default for k, f in RoleProfile.model_fields.items() if k not in MERGED_MAPPINGS
}
MODEL_TITLES = {
    "deepseekv4-flash": "DeepSeek-V4-Flash",
    "deepseekv4-pro": "DeepSeek-V4-Pro",
    "glm5.1": "GLM-5.1",
    "glm5.2": "GLM-5.2",
    "qwen3.5-397b-a17b": "Qwen3.5-397B-A17B",
}
GUARD_DEVIATIONS = (
    {
        "what": "the decode guard middleware on the decode engines' API servers",
        "flag": "--middleware",
        "reason": "a plain request sent straight to a decode instance makes it prefill by itself "
        "and can kill the whole engine (vllm-ascend issue 11882); the guard answers 400 instead. "
        "It is one standard-library file beside the scripts (GUARD=0 at launch turns it off).",
    },
    {
        "what": "PYTHONPATH starts with the scripts folder on the decode API servers",
        "env": "PYTHONPATH",
        "reason": "the guard module ships beside the scripts, so nothing is installed in the image",
    },
)
METASERVER_DEVIATION = {
    "what": "SERVEKIT_GUARD_METASERVER names the proxy's metaserver URL on the layerwise "
    "decode engines",
    "env": "SERVEKIT_GUARD_METASERVER",
    "reason": "a layerwise decoder's guard lets through exactly the proxy's metaserver "
    "callbacks (the source has no guard, so no such variable)",
}
KV_EVENTS_DEVIATION = {
    "what": "the engines the proxy routes to publish their KV cache events (ZMQ, one port per "
    "API server) and the proxy routes those stages by them (policy kv-events)",
    "flag": "--kv-events-config",
    "reason": "the proxy sends a prompt to the engine that already holds its prefix, known "
    "from the engine's own events rather than guessed; vLLM has published them since 0.9 "
    "(KV_EVENTS=0 at launch, or the kv_events setting off, turns it off on engines and "
    "proxy alike)",
}
PROXY_DEVIATION = {
    "what": "servekit's PD proxy replaces the vendored proxy script",
    "process": "proxy",
    "reason": "the same fan-out (every prefill and decode endpoint of the source, on the same "
    "address and port) with health ejection, retries that never resend consumed KV, request "
    "validation and /metrics; it ships as a zipapp needing only aiohttp",
}


def profile_name(name: str) -> str:
    """``a3/glm5.1/1x2p1x4d`` -> ``glm5.1-a3``: one profile per model and hardware."""
    return LayoutName.parse(name).family


def profile_file(catalog: Path, name: str) -> Path:
    """The family profile of layout ``name`` in ``catalog``."""
    named = LayoutName.parse(name)
    return catalog / named.hardware / PROFILES_DIR / f"{named.family}.yaml"


def _title(name: str, nodes: int) -> str:
    hw, model, topology = LayoutName.parse(name).parts3
    return f"{MODEL_TITLES.get(model, model)} {topology} on {nodes}x {hw.upper()}"


def summary(engines: list[dict[str, Any]]) -> str:
    """One line per engine: name, launch mode, DP x TP and its nodes."""
    parts = []
    for e in engines:
        nodes = e["nodes"]
        where = f"node {nodes[0]}" if len(nodes) == 1 else f"nodes {nodes[0]}-{nodes[-1]}"
        shape = f"DP={e.get('dp_size', 1)} x TP={e.get('tp', 1)}"
        parts.append(f"{e['name']} ({e.get('launch', 'single')}, {shape}, {where})")
    return "; ".join(parts) + "."


def _diff(profile: Mapping[str, Any], mine: Mapping[str, Any]) -> dict[str, Any]:
    """What an engine states beside its profile role so that the merge gives ``mine``."""
    out: dict[str, Any] = {}
    for key in ROLE_KEYS:
        base = profile.get(key, {} if key in MERGED_MAPPINGS else _ROLE_DEFAULTS.get(key))
        value = mine.get(key, {} if key in MERGED_MAPPINGS else _ROLE_DEFAULTS.get(key))
        if key in MERGED_MAPPINGS:
            base, value = dict(base or {}), dict(value or {})
            delta = {k: v for k, v in value.items() if k not in base or base[k] != v}
            delta.update({k: None for k in base if k not in value})
            if delta:
                out[key] = delta
        elif base != value:
            out[key] = {} if key == "additional_config" and value is None else value
    return out


def _role_profile(data: Mapping[str, Any]) -> dict[str, Any]:
    """A role's data as a profile role (defaults left out so the file stays short)."""
    out: dict[str, Any] = {}
    for key in ROLE_KEYS:
        value = data.get(key)
        if key in MERGED_MAPPINGS and value:
            out[key] = dict(value)
        elif key not in MERGED_MAPPINGS and value != _ROLE_DEFAULTS.get(key):
            out[key] = value
    return out


def read_profile(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    _node, data = safeyaml.load_file(path)
    if not isinstance(data, dict):
        raise UsageError(f"{path}:1: a profile must be a YAML mapping; remove or fix it")
    return data


UNKNOWN = "unknown"


def _known(value: object) -> str:
    """A source value as written, or ``unknown`` (never ``None``)."""
    return str(value) if isinstance(value, str) and value else UNKNOWN


def _profile_folder(folder: str) -> str:
    """The model folder of ``models/<model>-<hw>/<topology>``; a folder of its own
    (no parent in the facts) stands for itself."""
    return folder.rsplit("/", 1)[0] if "/" in folder else folder


def _new_profile(name: str, source: Mapping[str, Any]) -> dict[str, Any]:
    hw, model, _topology = LayoutName.parse(name).parts3
    return {
        "name": profile_name(name),
        "summary": f"{MODEL_TITLES.get(model, model)} on {hw.upper()}: the per-role commands "
        "its imported layouts share",
        "engine_kind": "vllm-ascend",
        "source": f"{_known(source.get('repo'))}@{_known(source.get('commit'))[:7]} "
        f"{_profile_folder(str(source['folder']))}",
        "roles": {},
    }


def _publishes(
    layout: Mapping[str, Any], engine: Mapping[str, Any], data: Mapping[str, Any]
) -> bool:
    """Whether servekit turns KV events on for an imported engine (the Plan's rule:
    :func:`servekit.defaults.kv_events_unfit`)."""
    proxy = layout.get("proxy")
    settings, args = data.get("settings") or {}, data.get("engine_args") or {}
    reason = kv_events_unfit(
        proxy_mode=proxy.get("mode", "pd") if isinstance(proxy, dict) else None,
        role=str(engine["role"]),
        launch=str(engine.get("launch", "single")),
        dp_size=int(engine.get("dp_size", 1)),
        caches_prefixes=prefix_caching(settings, args),
    )
    return reason is None


def _engines(
    synth: Synthesis, roles: dict[str, Any]
) -> tuple[list[dict[str, Any]], bool, dict[str, list[str]], list[str]]:
    """Engines as written (profile role + their own delta), whether decode is guarded, unsets,
    the engines publishing KV events."""
    layout = synth.layout
    pname = profile_name(str(layout["name"]))
    engines: list[dict[str, Any]] = []
    guarded = False
    unset: dict[str, list[str]] = {}
    publishing: list[str] = []
    for engine in layout["engines"]:
        e = {k: v for k, v in engine.items() if k != "_role_data"}
        data = dict(engine["_role_data"])
        env = dict(data.get("env") or {})
        for var in unset_names(env):
            unset.setdefault(var, []).append(str(e["name"]))
        data["env"] = {k: v for k, v in env.items() if v != UNSET}
        if e["role"] == "decode":
            data["settings"] = {**data.get("settings", {}), "guard": True}
            guarded = True
        if _publishes(layout, e, data):
            data["settings"] = {**data.get("settings", {}), "kv_events": True}
            publishing.append(str(e["name"]))
        if e["role"] not in roles:
            roles[e["role"]] = _role_profile(data)
        delta = _diff(roles[e["role"]], data)
        ordered: dict[str, Any] = {"name": e.pop("name"), "role": e.pop("role"), "profile": pname}
        ordered.update(e)
        ordered.update(delta)
        engines.append(ordered)
    return engines, guarded, unset, publishing


def build_documents(
    synth: Synthesis, doc: Mapping[str, Any], profile: dict[str, Any] | None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The layout document and the (possibly extended) profile document."""
    layout = synth.layout
    name = str(layout["name"])
    meta = dict(doc.get("meta") or {})
    prof = dict(profile) if profile else _new_profile(name, doc["source"])
    roles = dict(prof.get("roles") or {})
    engines, decode_guard, unset, publishing = _engines(synth, roles)
    prof["roles"] = {r: roles[r] for r in ROLES if r in roles}
    deviations: list[dict[str, Any]] = []
    if decode_guard:
        deviations.extend(GUARD_DEVIATIONS)
    if decode_guard and (layout.get("proxy") or {}).get("mode") == "layerwise":
        deviations.append(dict(METASERVER_DEVIATION))
    if publishing:
        deviations.append({**KV_EVENTS_DEVIATION, "engines": publishing})
    if "proxy" in layout:
        deviations.append(dict(PROXY_DEVIATION))
    for var, names in sorted(unset.items()):
        deviations.append(
            {
                "what": f"{var} is left as inherited where the source unsets it",
                "env": var,
                "engines": names,
                "reason": "a layout's environment sets values and cannot unset one: where the "
                "platform exports it, these engines inherit it (the source's vendored proxy, "
                "which servekit replaces, is what the unset protected)",
            }
        )
    for tuning in doc.get("host_tuning") or ():
        deviations.append(
            {
                "what": f"host tuning {tuning.get('path')} = {tuning.get('value')} "
                f"({tuning.get('file')}:{tuning.get('line')}) is recorded in host_tuning, not "
                "applied by the rendered entry",
                "reason": "a launcher must not retune the host it is started on; apply it once "
                "per host (see host_tuning) before the layout runs",
            }
        )
    vascend = str(meta.get("vllm_ascend") or "not given")
    image = vascend if ("/" in vascend or ":" in vascend) else f"not given (meta.yaml: {vascend})"
    out: dict[str, Any] = {
        "name": name,
        "title": _title(name, int(layout["nodes"])),
        "summary": summary(layout["engines"]),
        "model": layout["model"],
        "hardware": layout["hardware"],
        "nodes": layout["nodes"],
        "image": image,
        "versions": {"vllm": str(meta.get("vllm") or "not given"), "vllm_ascend": vascend},
        "engines": engines,
    }
    if "proxy" in layout:
        out["proxy"] = layout["proxy"]
    if doc.get("host_tuning"):
        out["host_tuning"] = [
            {k: t[k] for k in ("node", "path", "value", "file", "line") if k in t}
            for t in doc["host_tuning"]
        ]
    out["provenance"] = _provenance(doc, deviations)
    if synth.caveats:
        out["provenance"]["caveats"] = list(synth.caveats)
    return out, prof


def _provenance(doc: Mapping[str, Any], deviations: list[dict[str, Any]]) -> dict[str, Any]:
    """Source reference and meta.yaml's facts; its verified flag is the source's claim."""
    source = doc["source"]
    meta = dict(doc.get("meta") or {})
    provenance: dict[str, Any] = {
        "source": str(meta.get("url") or f"{_known(source.get('repo'))} {source['folder']}"),
    }
    # A folder with no commit (a local copy, edited or not) names no verified scripts:
    # it gets no source_ref, so nothing claims it equals a commit of the source.
    if isinstance(source.get("commit"), str) and re.fullmatch(r"[0-9a-f]{7,40}", source["commit"]):
        provenance["source_ref"] = {
            "repo": _known(source.get("repo")),
            "folder": source["folder"],
            "commit": source["commit"],
        }
    if meta.get("derived"):
        provenance["derived"] = str(meta["derived"])
    provenance["deviations"] = deviations
    said = meta.get("source_verified")
    claim = str(said).lower() if isinstance(said, bool) else "not given"
    provenance["verification"] = {
        "verified": said is True,
        "note": f"the source's claim (meta.yaml verified: {claim}); servekit's own status is "
        "its ledger's",
    }
    if meta.get("notes"):
        provenance["notes"] = " ".join(str(meta["notes"]).split())
    return provenance


class _Dumper(yaml.SafeDumper):
    """Block style, no aliases, key order kept: a stable file for diffs and byte equality."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def dump_yaml(data: Any) -> str:
    return yaml.dump(
        data,
        Dumper=_Dumper,
        sort_keys=False,
        allow_unicode=True,
        width=100,
        default_flow_style=False,
    )


def source_text(doc: Mapping[str, Any]) -> str:
    """The facts as written beside the layout (their recorded order kept: JSON configs too)."""
    return json.dumps(doc, indent=1, ensure_ascii=False) + "\n"


def write_layout(catalog: Path, synth: Synthesis, doc: Mapping[str, Any]) -> list[Path]:
    """Write layout.yaml, source.json and the profile; the paths that changed."""
    name = str(synth.layout["name"])
    profile_path = profile_file(catalog, name)
    layout, profile = build_documents(synth, doc, read_profile(profile_path))
    folder = catalog / name
    files = {
        folder / LAYOUT_FILE: dump_yaml(layout),
        folder / SOURCE_FILE: source_text(doc),
        profile_path: dump_yaml(profile),
    }
    changed = []
    for path, text in files.items():
        if path.is_file() and path.read_text(encoding="utf-8") == text:
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, text)
        changed.append(path)
    return changed
