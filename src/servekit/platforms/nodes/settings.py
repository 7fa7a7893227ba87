"""``--set nodes.KEY=VALUE``: the options of a plain-nodes rendering, declared once.

:data:`SETTINGS` is the one table (name, default, what it does); the platform
row takes its keys from it, ``docs/modelarts.md`` holds the table
:func:`settings_table` writes (a test compares them), and :func:`parse_settings`
turns the strings an operator gave into :class:`NodesSettings`, refusing a bad
value with one line that names the option and the fix (exit 2).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from servekit.errors import UsageError
from servekit.platforms.platform import SettingSpec

ADMIN_KEY_ENV = "SERVEKIT_ADMIN_KEY"
"""Where the proxy and the scaled instances read the admin key unless a file is named."""
MAX_VALUE = 4096
_PATH = re.compile(r"^(/[A-Za-z0-9._+@-]{1,255}){1,32}$")


SETTINGS: tuple[SettingSpec, ...] = (
    SettingSpec(
        "elastic",
        "off",
        "on: per role group a folder `scale/<group>/` that runs instance INDEX of the group "
        "beyond the rendered ones on new machines, joining the proxy once healthy and "
        "leaving it (drained) on SIGTERM; the proxy serves its admin API",
    ),
    SettingSpec(
        "admin_key_file",
        f"none (the variable {ADMIN_KEY_ENV})",
        "elastic: an absolute path, on the proxy's node and on every new machine, of a file "
        "whose first line is the proxy's admin key",
    ),
    SettingSpec(
        "drain_grace",
        "30",
        "elastic: seconds a leaving engine's streams run on it before they migrate "
        "(the proxy's --drain-grace)",
    ),
    SettingSpec(
        "drain_wait",
        "120",
        "elastic: seconds a leaving instance waits for the proxy beyond the grace "
        "(unstreamed answers, KV not yet pulled) before its processes stop",
    ),
    SettingSpec(
        "pool_wait",
        "60",
        "elastic: seconds a request waits for a role with no ready engine before 503 "
        "(the proxy's --pool-wait)",
    ),
)
NAMES: tuple[str, ...] = tuple(s.name for s in SETTINGS)


@dataclass(frozen=True)
class NodesSettings:
    """What a plain-nodes rendering was asked (defaults where nothing was set)."""

    elastic: bool = False
    admin_key_file: str | None = None
    drain_grace: int = 30
    drain_wait: int = 120
    pool_wait: int = 60

    @property
    def leave_wait(self) -> int:
        """Seconds a leaving instance waits for the proxy to let it go."""
        return self.drain_grace + self.drain_wait


def _refuse(name: str, value: str, why: str) -> UsageError:
    shown = value if len(value) <= 80 else value[:77] + "..."
    return UsageError(f"--set nodes.{name}={shown!r}: {why}")


def _seconds(name: str, value: str) -> int:
    if not re.match(r"^[0-9]{1,4}$", value) or int(value) > 3600:
        raise _refuse(name, value, "give whole seconds from 0 to 3600")
    return int(value)


def parse_settings(raw: Mapping[str, str]) -> NodesSettings:
    """The operator's ``nodes.*`` strings as :class:`NodesSettings`."""
    for key, value in raw.items():
        if key not in NAMES:
            raise UsageError(
                f"--set nodes.{key}: not a nodes setting (its settings: {', '.join(NAMES)})"
            )
        if len(value) > MAX_VALUE or any(ord(c) < 32 or ord(c) == 127 for c in value):
            raise _refuse(key, value, f"give a value of at most {MAX_VALUE} printable characters")
    text = raw.get("elastic", "off").strip()
    if text not in ("on", "off"):
        raise _refuse("elastic", text, "choose one of on, off")
    elastic = text == "on"
    given = next((k for k in NAMES if k != "elastic" and k in raw), None)
    if given is not None and not elastic:
        raise _refuse(given, raw[given], "is for nodes.elastic=on; add it or drop this option")
    key_file = raw.get("admin_key_file")
    if key_file is not None:
        key_file = key_file.strip()
        parts = key_file.split("/")
        if not _PATH.match(key_file) or "." in parts or ".." in parts:
            raise _refuse("admin_key_file", key_file, "give an absolute path to a file, e.g. "
                          "/etc/servekit/admin.key")  # fmt: skip
    return NodesSettings(
        elastic=elastic,
        admin_key_file=key_file,
        drain_grace=_seconds("drain_grace", raw.get("drain_grace", "30").strip()),
        drain_wait=_seconds("drain_wait", raw.get("drain_wait", "120").strip()),
        pool_wait=_seconds("pool_wait", raw.get("pool_wait", "60").strip()),
    )


def settings_table() -> str:
    """The Markdown table of every option (docs/modelarts.md holds it; a test compares)."""
    lines = ["| option | default | what |", "|---|---|---|"]
    lines += [f"| `nodes.{s.name}` | {s.default} | {s.help} |" for s in SETTINGS]
    return "\n".join(lines) + "\n"
