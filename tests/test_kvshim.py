"""The CPU shim of vLLM's NIXL and Mooncake connectors (servekit_kv_cpu.py in the bundle).

The two changes are tested on stand-ins here (the real engines run them in
tests/local/test_vllm_kv_faults.py and the vllm-marked runs): the worker's
affinity is put back whatever the body did to it, NIXL agents built inside get
the progress delay and others do not, and device 0 is answered only where no
accelerator exists. The file ships byte for byte and imports with the standard
library alone (vLLM is imported when a connector class is first asked for).
"""

from __future__ import annotations

import os
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from servekit import kvshim
from servekit.render.bundle import KV_SHIM_FILE, bundle_files


def test_the_bundle_ships_the_shim_byte_for_byte() -> None:
    assert bundle_files()[KV_SHIM_FILE] == Path(kvshim.__file__).read_bytes()
    assert f"{kvshim.SHIM_MODULE}.py" == KV_SHIM_FILE


def test_the_shim_file_imports_without_vllm(tmp_path: Path) -> None:
    (tmp_path / KV_SHIM_FILE).write_bytes(kvshim.source_bytes())
    code = (
        "import sys, servekit_kv_cpu as m\n"
        "assert 'vllm' not in sys.modules and 'torch' not in sys.modules\n"
        "try:\n    m.Nothing\nexcept AttributeError:\n    print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                         text=True, env={"PYTHONPATH": str(tmp_path)}, check=False)  # fmt: skip
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no affinity API here")
def test_affinity_is_put_back_after_the_body_pins_the_thread() -> None:
    before = os.sched_getaffinity(0)
    with kvshim.kept_affinity():
        os.sched_setaffinity(0, {max(before)})  # what the NIXL worker does on the CPU
        assert os.sched_getaffinity(0) == {max(before)}
    assert os.sched_getaffinity(0) == before


def test_nixl_agents_built_inside_get_the_progress_delay(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[int] = []

    class Bindings:
        DEFAULT_COMM_PORT = 1

        @staticmethod
        def nixlAgent(name: str, config: Any) -> str:  # NIXL's name
            made.append(config.pthrDelay)
            return name

    api = types.ModuleType("nixl._api")
    api.nixlBind = Bindings  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "nixl", types.ModuleType("nixl"))
    monkeypatch.setitem(sys.modules, "nixl._api", api)
    config = types.SimpleNamespace(pthrDelay=0)
    with kvshim.paced_nixl_agents(1000):
        assert api.nixlBind.DEFAULT_COMM_PORT == 1  # everything else passes through
        api.nixlBind.nixlAgent("a", config)
    assert api.nixlBind is Bindings  # undone after
    config.pthrDelay = 0
    api.nixlBind.nixlAgent("b", config)
    assert made == [1000, 0]


def test_progress_delay_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(kvshim.DELAY_ENV, raising=False)
    assert kvshim.progress_delay_us() == 1000
    monkeypatch.setenv(kvshim.DELAY_ENV, "250")
    assert kvshim.progress_delay_us() == 250
    monkeypatch.setenv(kvshim.DELAY_ENV, "-5; rm")
    assert kvshim.progress_delay_us() == 1000  # not a number: the default


def test_device_zero_only_without_an_accelerator(monkeypatch: pytest.MonkeyPatch) -> None:
    acc = types.SimpleNamespace(current_accelerator=lambda: None)

    def raises() -> int:
        raise RuntimeError("Cannot access accelerator device when none is available")

    acc.current_device_index = raises
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(accelerator=acc))
    with kvshim.device_zero_without_accelerator():
        assert acc.current_device_index() == 0
    with pytest.raises(RuntimeError):
        acc.current_device_index()  # undone after
    acc.current_accelerator = lambda: "cuda"
    with kvshim.device_zero_without_accelerator(), pytest.raises(RuntimeError):
        acc.current_device_index()  # a machine with an accelerator keeps the real answer
