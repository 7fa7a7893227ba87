"""A user's edits to a folder come back as exactly those edits in the facts.

A copy of a project-authored folder gets a value changed (the leader's port), a
flag added (the worker's ``--enable-chunked-prefill``), an export added
(``NEW_TUNING=1`` on the leader) and the model renamed (``--served-model-name``
on both): the facts of the copy differ from the original's in those five
places and nowhere else.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from tests.importer import folders

from servekit.importer import extract_folder
from servekit.importer.platform.normalize import ProcessFacts, keyed


def changes(before: list[ProcessFacts], after: list[ProcessFacts]) -> set[tuple[Any, ...]]:
    """(process, flag|env, name, old, new) for every difference of two fact sets."""
    old, new = keyed(before), keyed(after)
    assert old.keys() == new.keys()
    found: set[tuple[Any, ...]] = set()
    for key in old:
        a, b = old[key].flag_values(), new[key].flag_values()
        for name in set(a) | set(b):
            if a.get(name) != b.get(name):
                found.add((key, "flag", name, str(a.get(name)), str(b.get(name))))
        ea, eb = old[key].env, new[key].env
        for name in set(ea) | set(eb):
            if ea.get(name) != eb.get(name):
                found.add((key, "env", name, ea.get(name), eb.get(name)))
        assert (old[key].program, old[key].cwd) == (new[key].program, new[key].cwd)
    return found


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) == 1, (path, old)
    path.write_text(text.replace(old, new))


def test_the_facts_carry_exactly_the_edits(tmp_path: Path) -> None:
    original = folders.a2_two_nodes(tmp_path / "original")
    edited = tmp_path / "edited" / original.parent.name / original.name
    shutil.copytree(original, edited)
    _edit(edited / "run_node0.sh", "--port 8080", "--port 8090")
    _edit(edited / "run_node1.sh", "--headless", "--headless \\\n    --enable-chunked-prefill")
    _edit(
        edited / "run_node0.sh",
        "export HCCL_BUFFSIZE=512\n",
        "export HCCL_BUFFSIZE=512\nexport NEW_TUNING=1\n",
    )
    for name in ("run_node0.sh", "run_node1.sh"):
        _edit(edited / name, "--served-model-name test-model", "--served-model-name renamed")

    before = extract_folder(original).process_facts()
    after = extract_folder(edited).process_facts()
    assert changes(before, after) == {
        ("n0/engine/dp0", "flag", "--port", "[('8080',)]", "[('8090',)]"),
        ("n0/engine/dp0", "env", "NEW_TUNING", None, "1"),
        ("n0/engine/dp0", "flag", "--served-model-name", "[('test-model',)]", "[('renamed',)]"),
        ("n1/engine/dp1", "flag", "--served-model-name", "[('test-model',)]", "[('renamed',)]"),
        ("n1/engine/dp1", "flag", "--enable-chunked-prefill", "None", "[()]"),
    }


def test_an_unedited_copy_gives_the_same_facts(tmp_path: Path) -> None:
    """The control: copying alone changes nothing, so the differences above are the edits."""
    original = folders.master_dispatch(tmp_path / "original")
    copy = tmp_path / "copy" / original.parent.name / original.name
    shutil.copytree(original, copy)
    assert (
        changes(extract_folder(original).process_facts(), extract_folder(copy).process_facts())
        == set()
    )
