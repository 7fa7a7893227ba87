"""Every command built from an options model has its docs table generated from that model.

The block between ``<!-- options: servekit CMD ... -->`` and ``<!-- /options -->``
in the command's docs page must equal :func:`servekit.cliopts.options_table` of
the model, so the docs, the CLI help and the code's defaults cannot drift.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from servekit.cliopts import options_table

DOCS = Path(__file__).resolve().parents[1] / "docs"
BLOCK = re.compile(r"<!-- options: servekit ([\w -]+?) \(.*?\) -->\n(.*?)<!-- /options -->", re.S)


def _models() -> dict[str, tuple[str, object, tuple[str, ...]]]:
    from servekit.bench.options import BenchOptions
    from servekit.commands.deployment import DeploymentOptions
    from servekit.commands.sim import SimCommandOptions
    from servekit.verify.options import VerifyOptions

    return {
        "bench": ("bench.md", BenchOptions, ()),
        "sim": ("sim.md", SimCommandOptions, ()),
        "verify": ("verify.md", VerifyOptions, ("name",)),
        "deployment": ("verify.md", DeploymentOptions, ("name",)),
    }


def _blocks() -> dict[str, str]:
    found: dict[str, str] = {}
    for page in DOCS.glob("*.md"):
        for m in BLOCK.finditer(page.read_text()):
            found[m.group(1)] = m.group(2)
    return found


@pytest.mark.parametrize("command", sorted(_models()))
def test_docs_table_equals_the_model(command: str) -> None:
    page, model, arguments = _models()[command]
    blocks = _blocks()
    assert command in blocks, f"docs/{page} has no generated options block for {command}"
    assert blocks[command] == options_table(model, arguments), (
        f"docs/{page}: regenerate the table with servekit.cliopts.options_table"
    )


def test_every_generated_block_belongs_to_a_model() -> None:
    assert set(_blocks()) <= set(_models())
