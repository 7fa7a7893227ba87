"""The usage text follows the target it names: every path it prints is one that target writes.

Before (issue 45): a multi-node layout's report and catalog page said
``servekit render NAME --out OUT`` (the default target, ModelArts: one flat
folder) then ``bash OUT/node<i>/run.sh``, a path only ``--target nodes`` writes.
Now each platform states its own start commands once (its folder's ``start.py``,
the ``start`` of its row in the platform table);
the report's and the catalog page's "how to use it" and each rendering's plan.md
print them. Here every ``servekit render ... --target T --out OUT`` the usage
prints is rendered for T, and every path under OUT the following lines name (the
ModelArts script folder ``/root/script`` standing for OUT) must be a file or
folder of that rendering.
"""

from __future__ import annotations

import re
import shlex

import pytest
from tests.platforms.rendered import CATALOG, plan

from servekit.platforms import PLATFORMS, TARGETS, render_files
from servekit.report.usage import usage

LAYOUTS = ("a3/glm5.1/1x2p1x4d", "a3/deepseekv4-flash/1p1d", "a3/deepseekv4-flash/1node")
SCRIPT_FOLDER = "/root/script"


def _paths(text: str, out: str, nodes: int) -> set[str]:
    """Every path under ``out`` a line names, relative to it (``<i>``: each node)."""
    text = text.replace(SCRIPT_FOLDER + "/", out + "/").replace(SCRIPT_FOLDER, out)
    found = set()
    for match in re.finditer(re.escape(out) + r"(/[\w.<>/-]*)?", text):
        rel = (match.group(1) or "/").strip("/")
        for i in range(nodes):
            found.add(rel.replace("<i>", str(i)))
    return found


def _exists(rel: str, files: dict[str, str | bytes]) -> bool:
    return rel == "" or rel in files or any(f.startswith(rel + "/") for f in files)


@pytest.mark.parametrize("name", LAYOUTS)
def test_every_path_the_usage_prints_is_one_its_target_writes(name: str) -> None:
    p, layout = plan(name), CATALOG[name]
    rendered = 0
    for step in usage(p):
        renders = [line for line in step.lines if line.startswith("servekit render ")]
        if not renders:
            continue
        (command,) = renders
        words = shlex.split(command)
        target, out = words[words.index("--target") + 1], words[words.index("--out") + 1]
        files = render_files(p, target, layout)
        named = set()
        for line in (step.title, *step.lines[1:]):
            named |= _paths(line, out, len(p.nodes))
        missing = sorted(rel for rel in named if not _exists(rel, files))
        assert named and not missing, (target, missing)
        rendered += 1
    assert rendered == len(TARGETS)


def test_the_check_catches_the_old_usage() -> None:
    """Positive control: the report's old lines (ModelArts render, node folders) fail it."""
    p, layout = plan("a3/deepseekv4-flash/1p1d"), CATALOG["a3/deepseekv4-flash/1p1d"]
    files = render_files(p, "modelarts", layout)
    named = _paths("bash out/x/node1/run.sh   # on node 1", "out/x", len(p.nodes))
    assert [rel for rel in named if not _exists(rel, files)] == ["node1/run.sh"]


@pytest.mark.parametrize("target", ["modelarts", "nodes"])
def test_each_renderings_plan_md_prints_the_same_start(target: str) -> None:
    p, layout = plan("a3/glm5.1/1x2p1x4d"), CATALOG["a3/glm5.1/1x2p1x4d"]
    files = render_files(p, target, layout)
    page = str(files["plan.md"])
    steps = PLATFORMS[target].start(p, ".")
    assert all(line in page for line in steps.lines)
    assert steps.note and steps.note in page
    assert all(f in files for f in steps.files)
