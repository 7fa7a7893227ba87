"""The one defaults table: every engine setting servekit renders, per engine kind and role.

The first seed had to change a default in two places at once (the launch script
and an engine-side gate) or the default start was rejected. servekit keeps each
default here, once; the Plan, the rendered scripts (``VAR=${VAR:-value}``), the
engine arguments, kit verification and the release report all read it, and a
test proves none of them disagrees.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Literal

from servekit.guard import RENDERED_MODULE, middleware_target
from servekit.vocabulary import PD_ROLES, EngineKind, Role, StrictModel

SettingValue = int | float | bool | str

# The decode guard ships as one standard-library file beside the rendered scripts
# (and in a local run's bundle folder), loaded with --middleware via PYTHONPATH.
GUARD_MODULE = RENDERED_MODULE
GUARD_MIDDLEWARE = middleware_target(GUARD_MODULE)


class Setting(StrictModel):
    """One tunable: its key in layouts and --set, its script variable, how it reaches vLLM.

    ``type`` and the bounds say which values it takes; :func:`check_setting`
    refuses anything else (a value is never a command, and never text where
    vLLM expects a number).
    """

    key: str
    var: str
    how: Literal["flag", "bool-flag", "env", "middleware", "kv-events"]
    target: str  # the CLI flag, the env var name, or the middleware import path
    help: str
    type: Literal["int", "float", "bool", "str"]
    gt: float | None = None
    ge: float | None = None
    le: float | None = None
    pattern: str | None = None  # str settings: the whole value must match
    example: str

    def range_text(self) -> str:
        """The values it takes, in words: ``a whole number from 1 to 1048576``."""
        if self.type == "bool":
            return "true or false"
        if self.type == "str":
            return "a word of letters, digits and _"
        kind = "a whole number" if self.type == "int" else "a number"
        low = self.gt if self.gt is not None else self.ge
        if low is None:
            return kind
        if self.gt is not None:
            top = f", at most {_num(self.le)}" if self.le is not None else ""
            return f"{kind} above {_num(low)}{top}"
        top = f" to {_num(self.le)}" if self.le is not None else ""
        return f"{kind} from {_num(low)}{top}"


def _num(x: float) -> str:
    return str(int(x)) if x == int(x) else f"{x:g}"


SETTINGS: tuple[Setting, ...] = (
    Setting(
        key="gpu_memory_utilization",
        var="GPU_UTIL",
        how="flag",
        target="--gpu-memory-utilization",
        help="fraction of device memory vLLM may use (weights + KV cache)",
        type="float",
        gt=0,
        le=1,
        example="0.9",
    ),
    Setting(
        key="max_num_seqs",
        var="MAX_SEQS",
        how="flag",
        target="--max-num-seqs",
        help="most sequences running at once per engine (DP rank)",
        type="int",
        ge=1,
        le=1 << 20,
        example="32",
    ),
    Setting(
        key="max_num_batched_tokens",
        var="BAT_TOKENS",
        how="flag",
        target="--max-num-batched-tokens",
        help="token budget of one scheduler step",
        type="int",
        ge=1,
        le=1 << 30,
        example="8192",
    ),
    Setting(
        key="block_size",
        var="BLOCK",
        how="flag",
        target="--block-size",
        help="KV cache block size in tokens",
        type="int",
        ge=1,
        le=1 << 16,
        example="128",
    ),
    Setting(
        key="enable_prefix_caching",
        var="PREFIX",
        how="bool-flag",
        target="--enable-prefix-caching",
        help="automatic prefix caching (1 on, 0 off)",
        type="bool",
        example="true",
    ),
    Setting(
        key="enforce_eager",
        var="EAGER",
        how="bool-flag",
        target="--enforce-eager",
        help="run the model eagerly, without torch.compile (1 on, 0 off)",
        type="bool",
        example="true",
    ),
    Setting(
        key="kv_cache_dtype",
        var="KV_DTYPE",
        how="flag",
        target="--kv-cache-dtype",
        help="KV cache element type",
        type="str",
        pattern=r"[a-z0-9_]{1,32}",
        example="bfloat16",
    ),
    Setting(
        key="cpu_kvcache_gib",
        var="CPU_KV_GIB",
        how="env",
        target="VLLM_CPU_KVCACHE_SPACE",
        help="KV cache size in GiB for the vLLM CPU backend",
        type="int",
        ge=1,
        le=1 << 20,
        example="4",
    ),
    Setting(
        key="guard",
        var="GUARD",
        how="middleware",
        target=GUARD_MIDDLEWARE,
        help="decode guard middleware: refuse plain requests on decode-role engines (1 on)",
        type="bool",
        example="true",
    ),
    Setting(
        key="kv_events",
        var="KV_EVENTS",
        how="kv-events",
        target="--kv-events-config",
        help="publish KV cache events over ZMQ to the proxy's kv-events policy (1 on); only "
        "engines a proxy routes to, one API server per DP rank",
        type="bool",
        example="true",
    ),
)

# Switches: on/off settings that add words to a command (and, for kv_events, to the
# proxy's) only when on; scripts keep them switchable at launch (VAR=0/1).
SWITCHES = ("middleware", "kv-events")

# Where vLLM's KV-event publishers listen: the first engine's ranks from vLLM's own
# default endpoint port (KVEventsConfig.endpoint, tcp://*:5557) on; the Plan places
# each engine's ports (render/kvevents.py).
KV_EVENTS_BASE_PORT = 5557

SETTINGS_BY_KEY: Mapping[str, Setting] = {s.key: s for s in SETTINGS}
_DIGITS = re.compile(r"[+-]?[0-9]{1,19}")
_DECIMAL = re.compile(r"[+-]?(?:[0-9]{1,19}(?:\.[0-9]{0,19})?|\.[0-9]{1,19})")


def _number(setting: Setting, value: object) -> int | float | None:
    """The value as the setting's number type, or None when it is not one."""
    if isinstance(value, str):
        text = value.strip()
        if _DIGITS.fullmatch(text):
            value = int(text)
        elif setting.type == "float" and _DECIMAL.fullmatch(text):
            value = float(text)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if setting.type == "int":
        return value if isinstance(value, int) else None
    return value if math.isfinite(value) else None


def _in_range(setting: Setting, number: float) -> bool:
    return not (
        (setting.gt is not None and number <= setting.gt)
        or (setting.ge is not None and number < setting.ge)
        or (setting.le is not None and number > setting.le)
    )


def check_setting(key: str, value: object) -> SettingValue:
    """The value, typed, if the setting takes it; else ValueError naming the key and the fix."""
    setting = SETTINGS_BY_KEY[key]
    shown = repr(value)[:60]
    fix = f"{key} takes {setting.range_text()}, e.g. {key}: {setting.example}"
    if setting.type == "bool":
        if isinstance(value, bool):
            return value
        raise ValueError(f"{key}: {shown} is not true or false; {fix}")
    if setting.type == "str":
        if isinstance(value, str) and re.fullmatch(setting.pattern or ".*", value):
            return value
        raise ValueError(f"{key}: {shown} is not a plain word; {fix}")
    number = _number(setting, value)
    if number is None or not _in_range(setting, number):
        raise ValueError(f"{key}: {shown} is refused; {fix}")
    return number


def check_settings(value: object) -> object:
    """A ``settings`` mapping with every key known and every value of its setting's type."""
    if not isinstance(value, dict):
        return value
    unknown = sorted(str(k) for k in value if k not in SETTINGS_BY_KEY)
    if unknown:
        known = ", ".join(sorted(SETTINGS_BY_KEY))
        raise ValueError(f"unknown setting {unknown[0][:40]!r}; known settings: {known}")
    return {key: check_setting(key, item) for key, item in value.items()}


# The generic rows: engines whose layout names no profile. A profile (a family of
# layouts in the catalog, e.g. layouts/a3/profiles/dsv4-flash-a3-pd.yaml) carries
# its own rows, so one family's verified values never leak into another's.
_ACCEL: dict[str, SettingValue] = {
    "gpu_memory_utilization": 0.9,
    "enable_prefix_caching": True,
    "guard": False,
    "kv_events": True,
}

# vLLM CPU engines run eagerly: servekit's CPU layouts serve a tiny model, where
# torch.compile buys nothing and costs a large part of every start, which every
# real-engine test pays once per engine (figures: docs/local.md, "Eager engines";
# benchmarks/local_startup.py --compiled measures both).
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
        "enforce_eager": True,
        "guard": False,
        "kv_events": True,
    },
    ("vllm-cpu", "prefill"): {
        "max_num_seqs": 16,
        "enable_prefix_caching": True,
        "cpu_kvcache_gib": 1,
        "enforce_eager": True,
        "guard": False,
        "kv_events": True,
    },
    ("vllm-cpu", "decode"): {
        "max_num_seqs": 16,
        "enable_prefix_caching": True,
        "cpu_kvcache_gib": 1,
        "enforce_eager": True,
        "guard": True,
        "kv_events": True,
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


def prefix_caching(settings: Mapping[str, object], engine_args: Mapping[str, object]) -> bool:
    """Whether vLLM caches prefixes with these settings and flags (its default: it does).

    An engine's own ``no_enable_prefix_caching`` / ``enable_prefix_caching`` flag
    comes after the setting's in argv, so it wins, as in vLLM's parser.
    """
    if engine_args.get("no_enable_prefix_caching") is True:
        return False
    if engine_args.get("enable_prefix_caching") is True:
        return True
    return settings.get("enable_prefix_caching") is not False


NOT_ROUTED = "no proxy routes to it"  # nothing to explain: no one would read the events


def kv_events_unfit(
    *, proxy_mode: str | None, role: str, launch: str, dp_size: int, caches_prefixes: bool
) -> str | None:
    """Why an engine cannot feed the proxy's kv-events policy, or None when it can.

    ``proxy_mode``: the layout's proxy's (None: no proxy), which routes requests to
    the PD roles, or to the mixed engines in replica mode. The policy keys what an
    engine holds by its API URL, so one API server must be one DP rank: a builtin-DP
    engine's API server spreads requests over its ranks itself (vLLM's own DP
    balancer, by load), so a prompt sent to it does not reach the rank holding the
    prefix. Without prefix caching vLLM stores no blocks and publishes nothing.
    """
    routed = proxy_mode is not None and (
        role == "mixed" if proxy_mode == "replica" else role in PD_ROLES
    )
    if not routed:
        return NOT_ROUTED
    if launch == "builtin-dp" and dp_size > 1:
        return (
            f"its one API server spreads requests over {dp_size} DP ranks itself (vLLM's DP "
            "balancer, by load), so the proxy cannot send a prompt to the rank that holds it"
        )
    if not caches_prefixes:
        return "prefix caching is off, so vLLM stores no blocks and publishes no events"
    return None
