"""The image-config delta: Env, Labels, Cmd, Entrypoint, WorkingDir.

Computed between a base config and a source config (build from an image), or
applied to a base config (build from a payload spec). The delta is what a human
reads in MANIFEST.json and what the generated Dockerfile replays.
"""

from __future__ import annotations

import copy
from typing import Any

from servekit.kit.models import ConfigDelta


def _env(config: dict[str, Any]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in config.get("Env") or []:
        key, _, value = str(item).partition("=")
        out[key] = value
    return out


def _section(image_config: dict[str, Any]) -> dict[str, Any]:
    section = image_config.get("config") or {}
    return section if isinstance(section, dict) else {}


def compute_delta(base: dict[str, Any], source: dict[str, Any]) -> ConfigDelta:
    """What ``source``'s runtime config changes relative to ``base``'s."""
    b, s = _section(base), _section(source)
    b_env, s_env = _env(b), _env(s)
    b_lab, s_lab = dict(b.get("Labels") or {}), dict(s.get("Labels") or {})
    return ConfigDelta(
        env={k: v for k, v in s_env.items() if b_env.get(k) != v},
        env_removed=sorted(k for k in b_env if k not in s_env),
        labels={k: str(v) for k, v in s_lab.items() if b_lab.get(k) != v},
        labels_removed=sorted(k for k in b_lab if k not in s_lab),
        cmd=s.get("Cmd") if s.get("Cmd") != b.get("Cmd") else None,
        entrypoint=s.get("Entrypoint") if s.get("Entrypoint") != b.get("Entrypoint") else None,
        working_dir=s.get("WorkingDir") if s.get("WorkingDir") != b.get("WorkingDir") else None,
    )


def apply_delta(base: dict[str, Any], delta: ConfigDelta) -> dict[str, Any]:
    """A copy of ``base`` with the delta applied to its runtime config."""
    out = copy.deepcopy(base)
    section = out.setdefault("config", {})
    env = _env(section)
    for key in delta.env_removed:
        env.pop(key, None)
    env.update(delta.env)
    section["Env"] = [f"{k}={v}" for k, v in env.items()]
    labels = dict(section.get("Labels") or {})
    for key in delta.labels_removed:
        labels.pop(key, None)
    labels.update(delta.labels)
    section["Labels"] = labels or None
    if delta.cmd is not None:
        section["Cmd"] = delta.cmd
    if delta.entrypoint is not None:
        section["Entrypoint"] = delta.entrypoint
    if delta.working_dir is not None:
        section["WorkingDir"] = delta.working_dir
    return out
