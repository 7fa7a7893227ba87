"""The one defaults table: every engine setting servekit renders, per engine kind and role.

The first seed had to change a default in two places at once (the launch script
and an engine-side gate) or the default start was rejected. servekit keeps each
default here, once; the Plan, the rendered scripts (``VAR=${VAR:-value}``), the
engine arguments, kit verification and the release report all read it, and a
test proves none of them disagrees.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict

EngineKind = Literal["vllm-ascend", "vllm", "vllm-cpu"]
Role = Literal["mixed", "prefill", "decode"]
SettingValue = int | float | bool | str

ENGINE_KINDS: tuple[EngineKind, ...] = ("vllm-ascend", "vllm", "vllm-cpu")
ROLES: tuple[Role, ...] = ("mixed", "prefill", "decode")

# The decode guard ships as one standard-library file beside the rendered scripts
# (and in a local run's bundle folder), loaded with --middleware via PYTHONPATH.
GUARD_MODULE = "servekit_decode_guard"
GUARD_MIDDLEWARE = f"{GUARD_MODULE}.DecodeGuardMiddleware"


class Setting(BaseModel):
    """One tunable: its key in layouts and --set, its script variable, how it reaches vLLM."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    key: str
    var: str
    how: Literal["flag", "bool-flag", "env", "middleware"]
    target: str  # the CLI flag, the env var name, or the middleware import path
    help: str


SETTINGS: tuple[Setting, ...] = (
    Setting(
        key="gpu_memory_utilization",
        var="GPU_UTIL",
        how="flag",
        target="--gpu-memory-utilization",
        help="fraction of device memory vLLM may use (weights + KV cache)",
    ),
    Setting(
        key="max_num_seqs",
        var="MAX_SEQS",
        how="flag",
        target="--max-num-seqs",
        help="most sequences running at once per engine (DP rank)",
    ),
    Setting(
        key="max_num_batched_tokens",
        var="BAT_TOKENS",
        how="flag",
        target="--max-num-batched-tokens",
        help="token budget of one scheduler step",
    ),
    Setting(
        key="block_size",
        var="BLOCK",
        how="flag",
        target="--block-size",
        help="KV cache block size in tokens",
    ),
    Setting(
        key="enable_prefix_caching",
        var="PREFIX",
        how="bool-flag",
        target="--enable-prefix-caching",
        help="automatic prefix caching (1 on, 0 off)",
    ),
    Setting(
        key="kv_cache_dtype",
        var="KV_DTYPE",
        how="flag",
        target="--kv-cache-dtype",
        help="KV cache element type",
    ),
    Setting(
        key="cpu_kvcache_gib",
        var="CPU_KV_GIB",
        how="env",
        target="VLLM_CPU_KVCACHE_SPACE",
        help="KV cache size in GiB for the vLLM CPU backend",
    ),
    Setting(
        key="guard",
        var="GUARD",
        how="middleware",
        target=GUARD_MIDDLEWARE,
        help="decode guard middleware: refuse plain requests on decode-role engines (1 on)",
    ),
)

SETTINGS_BY_KEY: Mapping[str, Setting] = {s.key: s for s in SETTINGS}

# The generic rows: engines whose layout names no profile. A profile (a family of
# layouts in the catalog, e.g. layouts/a3/profiles/dsv4-flash-a3-pd.yaml) carries
# its own rows, so one family's verified values never leak into another's.
_ACCEL: dict[str, SettingValue] = {
    "gpu_memory_utilization": 0.9,
    "enable_prefix_caching": True,
    "guard": False,
}

_TABLE: dict[tuple[EngineKind, Role], dict[str, SettingValue]] = {
    ("vllm-ascend", "mixed"): {**_ACCEL, "block_size": 128},
    ("vllm-ascend", "prefill"): {**_ACCEL, "block_size": 128},
    ("vllm-ascend", "decode"): {**_ACCEL, "block_size": 128, "guard": True},
    ("vllm", "mixed"): dict(_ACCEL),
    ("vllm", "prefill"): dict(_ACCEL),
    ("vllm", "decode"): {**_ACCEL, "guard": True},
    ("vllm-cpu", "mixed"): {
        "max_num_seqs": 16,
        "enable_prefix_caching": True,
        "cpu_kvcache_gib": 1,
        "guard": False,
    },
    ("vllm-cpu", "prefill"): {
        "max_num_seqs": 16,
        "enable_prefix_caching": True,
        "cpu_kvcache_gib": 1,
        "guard": False,
    },
    ("vllm-cpu", "decode"): {
        "max_num_seqs": 16,
        "enable_prefix_caching": True,
        "cpu_kvcache_gib": 1,
        "guard": True,
    },
}


def defaults_for(kind: EngineKind, role: Role) -> dict[str, SettingValue]:
    """The default settings of one engine kind and role (a fresh copy)."""
    return dict(_TABLE[(kind, role)])


def format_value(value: SettingValue) -> str:
    """How a setting's value is written in scripts and argv (booleans as 1/0)."""
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def script_defaults(kind: EngineKind = "vllm-ascend", role: Role = "mixed") -> dict[str, str]:
    """Script variable -> default, as rendered scripts write ``VAR=${VAR:-value}``."""
    return {SETTINGS_BY_KEY[k].var: format_value(v) for k, v in defaults_for(kind, role).items()}


def table_rows() -> list[tuple[EngineKind, Role, Setting, str]]:
    """Every (kind, role, setting, value) cell, for ``servekit defaults`` and the report."""
    rows: list[tuple[EngineKind, Role, Setting, str]] = []
    for kind in ENGINE_KINDS:
        for role in ROLES:
            for key, value in defaults_for(kind, role).items():
                rows.append((kind, role, SETTINGS_BY_KEY[key], format_value(value)))
    return rows
