"""Rewrite every generated options table in docs/ from the commands' models.

Run after changing a command's options model; tests/test_docs_options.py fails
until the tables equal ``CommandModel.table()``.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

from servekit.cli import leaf_commands
from servekit.cliopts import CommandModel

DOCS = Path(__file__).resolve().parents[1] / "docs"
BLOCK = re.compile(
    r"(<!-- options: servekit ([\w -]+?) \(.*?\) -->\n)(.*?)(<!-- /options -->)", re.S
)


def _table(commands: dict[str, Any], name: str) -> str:
    callback = commands[name].callback
    model = getattr(getattr(callback, "__wrapped__", callback), "options_model", None)
    if not isinstance(model, CommandModel):
        raise SystemExit(f"servekit {name} has no options model")
    return model.table()


def main() -> int:
    commands = leaf_commands()
    changed = 0
    for page in sorted(DOCS.glob("*.md")):
        text = page.read_text()
        new = BLOCK.sub(lambda m: m.group(1) + _table(commands, m.group(2)) + m.group(4), text)
        if new != text:
            page.write_text(new)
            changed += 1
            print(f"rewrote {page.relative_to(DOCS.parent)}")
    print(f"{changed} page(s) changed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
