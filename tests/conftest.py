"""Shared fixtures: the packaged catalog and helpers to write throwaway catalogs."""

from __future__ import annotations

import copy
import shutil
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.helpers.engines import SharedRuns
from tests.helpers.parallel import groups_of, serial, ungrouped

from servekit.catalog.loader import load, packaged_catalog
from servekit.catalog.profiles import PROFILES_DIR

# A run started in the background of a shell without job control inherits SIGINT
# ignored, and every process a test starts would inherit it too: the Ctrl-C
# tests would interrupt nothing (seen in a `nohup ... &` run). A Python handler
# here resets to the default disposition in every child at exec.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

REPO = Path(__file__).resolve().parents[1]
ENGINE_TIMEOUT_S = 2400


_LOST_GROUPS = pytest.StashKey[set[str]]()


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(
    config: pytest.Config, items: list[pytest.Item]
) -> Iterator[None]:
    """Every real-engine test in the serial group (tests/helpers/parallel.py), before
    pytest-xdist reads the groups, and with pytest's time limit raised to
    :data:`ENGINE_TIMEOUT_S`: starting engines on a busy 2-core machine (their module's
    fixtures count against the first test) can take longer than the 900 s every other
    test gets, and each start has its own deadline in the test already.

    Once every plugin ran, under ``--dist loadgroup``, the tests whose group was lost
    are noted. A lost group fails nothing by itself: its tests spread over the workers
    and the real-vLLM modules start their engines twice, side by side on two cores
    (seen in CI: two 1P1D runs at once, and a decode answer no idle run gives). Each
    such test fails at setup instead, naming the cause (a worker cannot stop the
    session cleanly).
    """
    for item in items:
        if not item.get_closest_marker("vllm"):
            continue
        if not item.get_closest_marker("xdist_group"):
            item.add_marker(serial)
        if not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(ENGINE_TIMEOUT_S))
    yield
    if getattr(config.option, "loadgroup", False):
        config.stash[_LOST_GROUPS] = set(ungrouped(items))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.nodeid in item.config.stash.get(_LOST_GROUPS, set()):
        pytest.fail(
            f"--dist loadgroup did not keep this test's xdist_group {sorted(groups_of(item))}: "
            "this pytest and pytest-xdist lose groups (pytest-dev/pytest-xdist#1386); "
            "install the dev extra's pins (pyproject.toml)",
            pytrace=False,
        )


_shared: list[SharedRuns] = []


@pytest.fixture(scope="session")
def shared_vllm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedRuns]:
    """Real vLLM runs shared by tests that only send requests (tests/helpers/engines.py)."""
    runs = SharedRuns(tmp_path_factory.mktemp("shared-vllm"))
    _shared.append(runs)
    yield runs
    runs.close()


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """The shared runs go down as soon as the next test needs none of them."""
    if _shared and (nextitem is None or "shared_vllm" not in getattr(nextitem, "fixturenames", ())):
        _shared[0].close()


@pytest.fixture(autouse=True)
def private_user_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Per-user state and data folders inside the test's tmp_path (never the real ~/.local)."""
    home = tmp_path / "xdg"
    monkeypatch.setenv("XDG_STATE_HOME", str(home / "state"))
    monkeypatch.setenv("XDG_DATA_HOME", str(home / "data"))
    return home


@pytest.fixture(scope="session")
def catalog_dir() -> Path:
    return packaged_catalog()


def _layout_data(name: str) -> dict[str, Any]:
    """The layout as the loader resolved it (profiles merged in), as plain JSON data."""
    return copy.deepcopy(load(name).layout.model_dump(mode="json", exclude_defaults=True))


@pytest.fixture
def layout_data() -> Callable[[str], dict[str, Any]]:
    """A catalog layout as plain data, for tests that break it on purpose."""
    return _layout_data


@pytest.fixture
def write_catalog(tmp_path: Path) -> Callable[[dict[str, Any]], Path]:
    """Write one layout dict into a fresh catalog folder and return the folder."""

    def write(data: dict[str, Any]) -> Path:
        root = tmp_path / "catalog"
        folder = root / data["name"]
        folder.mkdir(parents=True, exist_ok=True)
        profiles = packaged_catalog() / data["name"].split("/")[0] / PROFILES_DIR
        dest = root / data["name"].split("/")[0] / PROFILES_DIR  # <hw>/profiles, any depth
        if profiles.is_dir() and not dest.exists():
            shutil.copytree(profiles, dest)
        (folder / "layout.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
        return root

    return write
