"""Per-user folders servekit keeps things in, as the XDG base-directory spec names them.

- state (``$XDG_STATE_HOME/servekit``, default ``~/.local/state/servekit``): what
  lives as long as a run does, such as ``servekit up``'s run directories, so
  ``status`` and ``down`` find them from any folder.
- data (``$XDG_DATA_HOME/servekit``, default ``~/.local/share/servekit``): what the
  user keeps, such as the verification ledger of the packaged layouts (the
  installed catalog is never written to).

The spec says a relative value in these variables is invalid and must be
ignored, so only absolute ones are honoured.
"""

from __future__ import annotations

import os
from pathlib import Path

APP = "servekit"


def _base(variable: str, default: str) -> Path:
    value = os.environ.get(variable, "")
    if value and Path(value).is_absolute():
        return Path(value)
    return Path.home() / default


def state_dir() -> Path:
    """``$XDG_STATE_HOME/servekit`` or ``~/.local/state/servekit`` (not created here)."""
    return _base("XDG_STATE_HOME", ".local/state") / APP


def data_dir() -> Path:
    """``$XDG_DATA_HOME/servekit`` or ``~/.local/share/servekit`` (not created here)."""
    return _base("XDG_DATA_HOME", ".local/share") / APP
