"""torch companions that cannot load are found by importing them, then hidden from engines."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from servekit.local import companions

BROKEN_INIT = 'raise RuntimeError("operator torchvision::nms does not exist")\n'


def fake_dist(root: Path, name: str, version: str, init: str) -> Path:
    """An installed-looking package: its module and its dist-info metadata."""
    (root / name).mkdir(parents=True)
    (root / name / "__init__.py").write_text(init)
    info = root / f"{name}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    return root


@pytest.fixture
def broken_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A broken torchvision and a working torchaudio on this interpreter's path."""
    site = tmp_path / "site"
    fake_dist(site, "torchvision", "0.28.0", BROKEN_INIT)
    fake_dist(site, "torchaudio", "2.11.1", "")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("PYTHONPATH", str(site))
    # Only the two fakes: the real environment may hold other companions, broken or not.
    monkeypatch.setattr(companions, "COMPANIONS", ("torchvision", "torchaudio"))
    return site


def child(env: dict[str, str], code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_companion_that_fails_to_import_is_found(broken_env: Path) -> None:
    (found,) = companions.find_broken()
    assert found.name == "torchvision" and found.version == "0.28.0"
    assert "torchvision::nms does not exist" in found.error


def test_none_installed_means_none_broken(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(companions, "installed_version", lambda dist: None)
    assert companions.find_broken() == ()
    assert companions.engine_env(()) == {}


def test_the_engine_env_hides_them_and_keeps_the_users_sitecustomize(
    broken_env: Path, tmp_path: Path
) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "sitecustomize.py").write_text("import os\nos.environ['THEIRS_RAN'] = '1'\n")
    broken = companions.find_broken()
    env = companions.engine_env(broken, pythonpath=f"{broken_env}{os.pathsep}{theirs}")
    assert env["SERVEKIT_HIDE_MODULES"] == "torchvision"
    code = (
        "import importlib.util, json, os\n"
        "try:\n    import torchvision\n    imported = True\nexcept ModuleNotFoundError:\n"
        "    imported = False\n"
        "import torchaudio\n"
        "print(json.dumps([imported, importlib.util.find_spec('torchvision') is None,"
        " os.environ.get('THEIRS_RAN')]))\n"
    )
    done = child(env, code)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [False, True, "1"]
    unhidden = child({"PYTHONPATH": str(broken_env)}, "import torchvision")
    assert "torchvision::nms does not exist" in unhidden.stderr


def test_the_note_is_one_line_with_the_fix(broken_env: Path) -> None:
    line = companions.note(companions.find_broken())
    assert "\n" not in line
    assert line.startswith("note: torchvision 0.28.0 in ")
    assert "hidden" in line and "pip uninstall torchvision" in line


def test_up_hides_them_from_every_engine_and_says_so(
    broken_env: Path, tmp_path: Path, runs_root: Path
) -> None:
    pytest.importorskip("vllm", reason="the companions are checked after the engine")
    from servekit.local.options import UpOptions
    from servekit.local.prepare import prepare_run

    spec = prepare_run(UpOptions(name="local/1p1d", free_ports=True), cwd=tmp_path)
    engines = [x for x in spec.launches if x.kind == "engine"]
    assert len(engines) == 2
    for launch in engines:
        assert launch.env["SERVEKIT_HIDE_MODULES"] == "torchvision"
        first = launch.env["PYTHONPATH"].split(os.pathsep)[0]
        assert Path(first) == companions.HOOK_DIR
        assert (Path(first) / "sitecustomize.py").is_file()
    (proxy,) = [x for x in spec.launches if x.kind == "proxy"]
    assert "SERVEKIT_HIDE_MODULES" not in proxy.env
    assert [n for n in spec.notes if "torchvision 0.28.0" in n]
