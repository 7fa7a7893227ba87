"""An import refusal quotes the failing process's own last error and names who printed it.

Before (issue 45): a folder whose DP launcher crashes on the platform (each child
dies with a TypeError inside subprocess while the launcher exits 0) was refused as
"run.sh ended without starting vllm or a proxy", or, where only the proxy had
started, as "the facts are not in the recorded format (IndexError: list index out
of range)": an internal error, neither naming the cause the folder's own output
shows. Now each names the node, the process (the folder's script, its
multiprocessing child) and quotes its error and the line of the folder it came from.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st
from tests.importer import folders

from servekit.catalog.options import LayoutsImportOptions
from servekit.errors import UsageError
from servekit.importer import ImportRefused, extract_folder
from servekit.importer.api import import_layout
from servekit.importer.failures import last_error
from servekit.importer.platform.harness import INHERITED

NOISE = tuple(INHERITED.values())
CHILD = [
    "Process Process-1:",
    "Traceback (most recent call last):",
    '  File "/usr/lib/python3.11/multiprocessing/process.py", line 314, in _bootstrap',
    "    self.run()",
    '  File "/root/script/launch_online_dp.py", line 19, in rank',
    '    subprocess.run(["sh", args.template], env=env)',
    '  File "/usr/lib/python3.11/subprocess.py", line 548, in run',
    "    with Popen(*popenargs, **kwargs) as process:",
    '  File "<frozen os>", line 812, in fsencode',
    "TypeError: expected str, bytes or os.PathLike object, not int",
]
LOADER = "ERROR: ld.so: object '/inherited/preload' from LD_PRELOAD cannot be preloaded: ignored."


CRASH_LINE = next(
    i
    for i, line in enumerate(folders.LAUNCH_DP_CRASHING.splitlines(), 1)
    if "subprocess.run(" in line
)


def _crash_named(message: str, node: int = 0) -> None:
    assert "\n" not in message
    assert f"node {node}: " in message and "launch_online_dp.py (its child process" in message
    assert "TypeError: expected str, bytes or os.PathLike object, not int" in message
    assert "inside subprocess.run" in message and f"launch_online_dp.py:{CRASH_LINE}" in message
    assert "IndexError" not in message and "recorded format" not in message


def test_a_child_traceback_names_the_script_the_child_and_the_line() -> None:
    found = last_error("\n".join([LOADER, *CHILD, LOADER]) + "\n", NOISE)
    assert found is not None
    text = found.text()
    assert text.startswith("launch_online_dp.py (its child process Process-1) failed")
    assert "inside subprocess.run: TypeError: expected str" in text
    assert text.endswith(
        'at launch_online_dp.py:19 (subprocess.run(["sh", args.template], env=env))'
    )


def test_two_children_printing_in_step_are_read_as_one_error_twice() -> None:
    """Two launchers' children write the same traceback line by line into one stderr."""
    twice = [line for line in CHILD for _ in range(2)]
    found = last_error("\n".join(twice), NOISE)
    assert (
        found is not None and found.times == 2 and found.where.startswith("launch_online_dp.py:19")
    )


@pytest.mark.parametrize(
    ("stderr", "text"),
    [
        (
            "/root/script/run_prefill.sh: 4: foo: not found\n",
            "run_prefill.sh failed: foo: not found at run_prefill.sh:4",
        ),
        ("[run] unexpected MASTER=maybe\n" + LOADER, "[run] unexpected MASTER=maybe"),
        (LOADER + "\n", None),
        ("", None),
    ],
)
def test_shell_errors_plain_lines_and_platform_noise(stderr: str, text: str | None) -> None:
    found = last_error(stderr, NOISE)
    assert (found.text() if found else None) == text


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            [*CHILD, LOADER, "x\x1b[2Jy", "Traceback (most recent call last):", "Error", ""]
        )
        | st.text(),
        max_size=40,
    )
)
def test_any_output_gives_one_printable_bounded_line(lines: list[str] | str) -> None:
    text = "\n".join(lines) if isinstance(lines, list) else lines
    found = last_error(text, NOISE)
    if found is not None:
        shown = found.text()
        assert "\n" not in shown and "\x1b" not in shown and len(shown) <= 600


def test_a_launcher_whose_children_die_is_refused_naming_them(tmp_path: Path) -> None:
    """No proxy: the node ends having started nothing (was: no cause at all)."""
    folder = folders.crashing_launcher(tmp_path, proxy=False)
    with pytest.raises(ImportRefused) as refused:
        extract_folder(folder)
    message = str(refused.value)
    assert "node 0: run.sh ended without starting vllm or a proxy: " in message
    _crash_named(message)


@pytest.mark.slow  # a contained run of a node with two launchers and a proxy (about 2.3 s here)
def test_a_folder_that_started_only_its_proxy_is_refused_naming_the_crash(tmp_path: Path) -> None:
    """The proxy started, no engine did (was: IndexError, 'not in the recorded format')."""
    folder = folders.crashing_launcher(tmp_path, proxy=True)
    catalog = tmp_path / "catalog"
    catalog.mkdir()
    with pytest.raises(UsageError) as refused:
        import_layout(LayoutsImportOptions(folder=folder, catalog=catalog))
    message = str(refused.value)
    assert "no node started vllm (node 0: proxy); node 0: " in message
    _crash_named(message)
    assert not any(catalog.iterdir())


def test_facts_without_an_engine_are_refused_as_such(tmp_path: Path) -> None:
    """--facts holding only a proxy (was: IndexError, 'not in the recorded format')."""
    import json

    from servekit.catalog.loader import packaged_catalog

    doc = json.loads((packaged_catalog() / "a3/glm5.1/1x2p1x4d/source.json").read_text())
    doc["processes"] = [p for p in doc["processes"] if p["kind"] == "proxy"]
    facts = tmp_path / "source.json"
    facts.write_text(json.dumps(doc))
    catalog = tmp_path / "catalog"
    catalog.mkdir()
    opts = LayoutsImportOptions(
        folder=tmp_path, facts=facts, name="a3/glm5.1/1x2p1x4d", catalog=catalog
    )
    with pytest.raises(UsageError, match=r"no vllm process \(only: proxy\)") as refused:
        import_layout(opts)
    assert "IndexError" not in str(refused.value) and not any(catalog.iterdir())
