"""``make unit`` needs no engine: every test that needs vLLM, torch, transformers or
tokenizers carries the ``vllm`` marker (tests/helpers/engine_needs.py reads it from
the source). A fresh clone's ``make unit`` (scripts/bootstrap.sh without ``engine``)
failed two tests that lacked it (issue 45)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.helpers.engine_needs import EngineNeeds, source_modules, unmarked

ROOT = Path(__file__).resolve().parents[1]
# Tests that call a function which needs the engine on one path only, and take the
# other: the check reads calls, not which branch runs. Each with why it needs none.
TAKES_THE_OTHER_PATH = {
    "tests/local/test_prepare.py::test_an_existing_model_folder_is_never_touched": (
        "ensure_tiny_model returns before building: the folder is there"
    ),
    "tests/local/test_prepare.py::test_only_cpu_layouts_of_the_tiny_model_get_it_built": (
        "ensure_tiny_model returns before building: a3/1p1d does not serve the tiny model"
    ),
}


@pytest.fixture(scope="module")
def needs() -> EngineNeeds:
    """servekit's own functions that need the engine (reading src takes about 1.5 s)."""
    return EngineNeeds(source_modules(ROOT / "src"))


def _test_files() -> list[tuple[str, Path]]:
    return [
        (".".join(p.relative_to(ROOT).with_suffix("").parts), p)
        for p in sorted((ROOT / "tests").rglob("test_*.py"))
    ]


@pytest.mark.slow  # reads every file of src and tests (about 3-4 s)
def test_every_test_that_needs_the_engine_is_marked(needs: EngineNeeds) -> None:
    found = [t.removeprefix(ROOT.as_posix() + "/") for t in unmarked(_test_files(), needs)]
    assert sorted(found) == sorted(TAKES_THE_OTHER_PATH)


@pytest.mark.slow  # reads every file of src
def test_the_check_finds_an_unmarked_test_of_each_kind(tmp_path: Path, needs: EngineNeeds) -> None:
    """Positive control: a direct import, a probe, and servekit's own tokenizer trainer
    (reached through the tinymodel face) are each found; marked twins are not."""
    cases = {
        "direct": "def test_x():\n    import torch\n",
        "probe": "import importlib\n\ndef test_x():\n    assert importlib.util.find_spec('vllm')\n",
        "servekit": "from servekit.local.tinymodel import build_tiny_model\n\n"
        "def _helper(p):\n    build_tiny_model(p)\n\ndef test_x(tmp_path):\n    _helper(tmp_path)\n",
        "module": "import transformers\n\ndef test_x():\n    pass\n",
    }
    files = []
    for name, text in cases.items():
        plain, marked = tmp_path / f"test_{name}.py", tmp_path / f"test_{name}_marked.py"
        plain.write_text(text)
        marked.write_text(
            "import pytest\n" + text.replace("def test_x", "@pytest.mark.vllm\ndef test_x")
        )
        files += [(f"t.{name}", plain), (f"t.{name}_marked", marked)]
    found = unmarked(files, needs)
    assert found == [f"{(tmp_path / f'test_{n}.py').as_posix()}::test_x" for n in cases]
