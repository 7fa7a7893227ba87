"""The committed facts of the source's 25 folders, and their re-derivation from a checkout.

tests/importer/source-facts/<hw>/<model>/<topology>.json were taken by
``scripts/import_source.py`` from xuopoj/ma-vllm-samples at 64fc020 (see
docs/importer.md). Here: they are all there and well formed; the seven
DeepSeek-V4-Flash A3 ones start exactly the processes of the fidelity fixtures
taken before the importer existed (the same facts by a second road); and, given
a checkout in ``SERVEKIT_SOURCE_CHECKOUT``, running the importer again gives
them back byte for byte.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from tests.helpers.source import SourceMissing, SourceUnusable, source_tree

from servekit.importer import SourceRef, extract_folder
from servekit.importer.platform import fixture

HERE = Path(__file__).parent
FACTS = HERE / "source-facts"
REPO_ROOT = HERE.parents[1]
OLD_FIXTURES = REPO_ROOT / "tests" / "render" / "fidelity" / "a3"
COMMIT = "64fc020e0c15048fda0bf5bfabaeba47639be044"
FOLDERS = {
    "a2/deepseekv4-flash": ("1x2p2d", "2nodes", "2p1x2d", "2p2d"),
    "a3/deepseekv4-flash": ("1node", "1p1d", "1p3d", "2nodes", "2p1x2d", "2p2d", "3p1d"),
    "a3/deepseekv4-pro": ("2nodes",),
    "a3/glm5.1": ("1node", "1x2p1x2d", "1x2p1x4d", "2nodes"),
    "a2/glm5.2": ("1x4p1x4d", "2nodes"),
    "a3/glm5.2": ("1node", "1x2p1x2d", "2nodes", "4nodes"),
    "a2/qwen3.5-397b-a17b": ("2nodes",),
    "a3/qwen3.5-397b-a17b": ("1node", "1p1x2d"),
}
NAMES = [f"{model}/{topo}" for model, topos in FOLDERS.items() for topo in topos]


def _source_folder(name: str) -> str:
    hw, model, topology = name.split("/")
    return f"models/{model}-{hw}/{topology}"


def test_there_are_25_fact_files_one_per_folder() -> None:
    found = sorted(str(p.relative_to(FACTS).with_suffix("")) for p in FACTS.rglob("*.json"))
    assert found == sorted(NAMES)
    assert len(found) == 25


@pytest.mark.parametrize("name", NAMES)
def test_each_names_its_source_and_covers_every_node(name: str) -> None:
    doc = json.loads((FACTS / f"{name}.json").read_text())
    assert doc["source"] == {
        "repo": "xuopoj/ma-vllm-samples",
        "commit": COMMIT,
        "folder": _source_folder(name),
    }
    assert {p["node"] for p in doc["processes"]} == set(range(doc["nodes"]))
    assert doc["devices_per_node"] == (8 if name.startswith("a2/") else 16)
    assert doc["meta"]["file"] == "meta.yaml"
    assert doc["meta"]["source_verified"] is False


@pytest.mark.parametrize("topology", FOLDERS["a3/deepseekv4-flash"])
def test_the_seven_a3_facts_equal_the_fidelity_fixtures(topology: str) -> None:
    old = OLD_FIXTURES / f"{topology}.json"
    if not old.is_file():
        pytest.skip(f"{old} has moved into the catalog's source.json")
    new = json.loads((FACTS / f"a3/deepseekv4-flash/{topology}.json").read_text())
    assert _as_with_proxy_script(new["processes"]) == json.loads(old.read_text())["processes"]


def _as_with_proxy_script(processes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The fidelity fixtures were taken with PROXY_SCRIPT set to the recording proxy; the
    platform sets none, so the proxy now runs from the path its script names."""
    return [
        {**p, "program": [p["program"][0], "{PROXY_SCRIPT}"]} if p["kind"] == "proxy" else p
        for p in processes
    ]


@pytest.fixture(scope="module")
def pinned_models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The source's models/ at the pinned commit (git archive), whatever the checkout's HEAD."""
    try:
        return source_tree(COMMIT, "models", tmp_path_factory.mktemp("source"), os.environ)
    except SourceMissing as exc:
        pytest.skip(str(exc))
    except SourceUnusable as exc:
        pytest.fail(str(exc))


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_running_the_importer_on_the_checkout_gives_the_facts_back(
    name: str, pinned_models: Path
) -> None:
    folder = pinned_models.parent / _source_folder(name)
    assert folder.is_dir(), f"{COMMIT[:12]} has no {_source_folder(name)}"
    ref = SourceRef(repo="xuopoj/ma-vllm-samples", commit=COMMIT, folder=_source_folder(name))
    doc = extract_folder(folder, source=ref).document()
    assert fixture.dumps(doc) == (FACTS / f"{name}.json").read_text(), name
