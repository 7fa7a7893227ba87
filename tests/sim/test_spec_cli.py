"""SimSpec validation, the ``servekit sim`` command and the public API."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.helpers.api import isort_order
from tests.helpers.cli import servekit_argv, servekit_cli

import servekit.sim
from servekit.errors import UsageError
from servekit.sim.options import quick_spec
from servekit.sim.spec import load_spec, spec_from_mapping
from servekit.sim.testing import running_sim

from .webclient import get, post


def _ep(**kw: Any) -> dict[str, Any]:
    return {"name": "e", "port": 0, **kw}


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ({"endpoints": []}, "field endpoints"),
        ({"endpoints": [_ep(), _ep()]}, "repeated: e"),
        ({"endpoints": [_ep(port=9000), _ep(name="f", port=9000)]}, "127.0.0.1:9000"),
        ({"endpoints": [_ep(dp_rank=2, dp_size=2)]}, "dp_rank 2 must be below dp_size 2"),
        ({"endpoints": [_ep(unguarded_incident=True)]}, "role decode only"),
        (
            {
                "endpoints": [
                    _ep(role="prefill", engine_id="x"),
                    _ep(name="f", role="decode", engine_id="x"),
                ]
            },
            "different roles",
        ),
        ({"endpoints": [_ep(profile="nope")]}, "unknown profile 'nope'"),
        ({"endpoints": [_ep(faults={"error_rate": 3})]}, "endpoints.0.faults.error_rate"),
        ({"endpoints": [_ep(colour="red")]}, "endpoints.0.colour"),
        ({"endpoints": [_ep()], "time_scale": 0}, "time_scale"),
    ],
)
def test_bad_specs_are_one_line_usage_errors(spec: dict[str, Any], needle: str) -> None:
    with pytest.raises(UsageError) as info:
        spec_from_mapping(spec)
    assert needle in str(info.value)
    assert "\n" not in str(info.value)


def test_spec_files_json_and_yaml(tmp_path: Path) -> None:
    doc = {"endpoints": [_ep(role="decode", guard=True)], "admin": {"port": 0}}
    (tmp_path / "s.json").write_text(json.dumps(doc))
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(doc))
    assert load_spec(tmp_path / "s.json") == load_spec(tmp_path / "s.yaml")
    (tmp_path / "bad.yaml").write_text("endpoints: [")
    with pytest.raises(UsageError, match=r"bad\.yaml:1: malformed YAML"):
        load_spec(tmp_path / "bad.yaml")
    (tmp_path / "bad.json").write_text('{"endpoints": [')
    with pytest.raises(UsageError, match="not valid JSON"):
        load_spec(tmp_path / "bad.json")
    with pytest.raises(UsageError, match="no such file"):
        load_spec(tmp_path / "missing.json")


HOSTILE_SPECS = {
    "latin1.yaml": b"endpoints:\n  - name: caf\xe9\n",
    "utf16.yaml": "endpoints: []\n".encode("utf-16"),
    "utf16.json": '{"endpoints": []}'.encode("utf-16"),
    "deep.json": b"[" * 100_000 + b"]" * 100_000,
    "deep.yaml": b"endpoints: " + b"[" * 5000 + b"]" * 5000,
    "dup.yaml": b"endpoints: []\nendpoints: []\n",
}


@pytest.mark.parametrize("name", sorted(HOSTILE_SPECS))
@pytest.mark.parametrize("entry", [servekit_argv("sim"), [sys.executable, "-m", "servekit.sim"]])
def test_a_hostile_spec_file_is_one_line_and_exit_2(
    name: str, entry: list[str], tmp_path: Path
) -> None:
    spec = tmp_path / name
    spec.write_bytes(HOSTILE_SPECS[name])
    proc = subprocess.run(
        [*entry, "--spec", str(spec), "--check"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(f"error: --spec {spec}")
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


def test_quick_spec_numbers_ports_and_ranks() -> None:
    spec = quick_spec(3, role="decode", base_port=9100, model="m", profile="cpu-tiny")
    assert [e.port for e in spec.endpoints] == [9100, 9101, 9102]
    assert [e.dp_rank for e in spec.endpoints] == [0, 1, 2]
    assert all(e.guard and e.served_model_name == "m" for e in spec.endpoints)
    with pytest.raises(UsageError, match="--endpoints"):
        quick_spec(0)


def test_running_sim_reports_bad_specs_and_busy_ports() -> None:
    with pytest.raises(UsageError), running_sim({"endpoints": [_ep(port=-1)]}):
        pass
    with running_sim({"endpoints": [_ep()]}) as sim:
        port = int(sim.url.rsplit(":", 1)[1])
        busy = {"endpoints": [_ep(port=port)]}
        with pytest.raises(UsageError, match=f"port 127.0.0.1:{port}"), running_sim(busy):
            pass


def test_public_api_is_pinned() -> None:
    assert servekit.sim.__all__ == isort_order(servekit.sim.__all__)
    assert set(servekit.sim.__all__) == {
        "Engine",
        "EndpointSpec",
        "FaultSpec",
        "Profile",
        "RunningSim",
        "SIM_INFO",
        "SIM_VERSION",
        "SimOptions",
        "SimServer",
        "SimSpec",
        "Seq",
        "VirtualClock",
        "VirtualStall",
        "load_profile",
        "load_spec",
        "quick_spec",
        "run",
        "run_options",
        "run_virtual",
        "running_sim",
        "serve",
        "serve_main",
        "spec_from_mapping",
        "virtual_engine",
    }


def test_sim_imports_only_bottom_level_servekit_modules() -> None:
    code = "import sys, servekit.sim.testing; print(sorted(m for m in sys.modules if m.startswith('servekit')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(json.loads(out.stdout.replace("'", '"')))
    others = {m for m in loaded if not m.startswith("servekit.sim")}
    assert others == {
        "servekit",
        "servekit.errors",
        "servekit.guard",
        "servekit.kvprotocol",
        "servekit.kvschema",  # vLLM's KV-event schema, shared with the proxy (issue 46)
        "servekit.lazyface",
        "servekit.safeyaml",
        "servekit.textcontract",
        "servekit.visioncontract",
        # the bottom-layer vocabulary (issue 25): the strict model and atomic write
        "servekit.vocabulary",
        "servekit.vocabulary.atomic",
        "servekit.vocabulary.model",
        "servekit.vocabulary.metrics",
        "servekit.vocabulary.modes",
        "servekit.vocabulary.roles",
        "servekit.vocabulary.urls",  # url_for: every URL the simulator writes (issue 46)
    }


def _wait_ready(path: Path, proc: subprocess.Popen[str]) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while not path.exists():
        assert proc.poll() is None, proc.communicate()[1]
        assert time.monotonic() < deadline, "sim did not start"
        time.sleep(0.05)
    info: dict[str, Any] = json.loads(path.read_text())
    return info


@pytest.mark.parametrize("entry", [servekit_argv("sim"), [sys.executable, "-m", "servekit.sim"]])
def test_cli_quick_form_serves_and_stops_cleanly_on_sigterm(
    tmp_path: Path, entry: list[str]
) -> None:
    ready = tmp_path / "ready.json"
    cmd = [
        *entry,
        "--endpoints",
        "3",
        "--base-port",
        "0",
        "--model",
        "m",
        "--admin-port",
        "0",
        "--ready-file",
        str(ready),
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        info = _wait_ready(ready, proc)
        urls = [e["url"] for e in info["endpoints"]]
        assert len(set(urls)) == 3
        for url in urls:
            assert get(f"{url}/health")[0] == 200
        body = {"model": "m", "prompt": "Tell me about pages.", "max_tokens": 30}
        status, doc = post(f"{urls[2]}/v1/completions", body)
        assert status == 200 and doc["usage"]["completion_tokens"] > 0
        with running_sim({"endpoints": [_ep(served_model_name="m")]}) as here:
            _, same = post(f"{here.url}/v1/completions", body)
        assert same["choices"][0]["text"] == doc["choices"][0]["text"]  # across processes
        assert get(f"{info['admin_url']}/sim/endpoints")[0] == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0
    assert err.count("GPU KV cache size: 16,777,216 tokens") == 3


def test_cli_spec_file_and_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from servekit.sim.__main__ import entry

    spec = tmp_path / "sim.yaml"
    spec.write_text(yaml.safe_dump({"endpoints": [_ep(), _ep(name="f")]}))
    out = servekit_cli("sim", "--spec", str(spec), "--check")
    assert out.returncode == 0 and json.loads(out.stdout)["endpoints"][1]["name"] == "f"
    bad = servekit_cli(
        "sim", "--endpoints", "2", "--role", "boss", env={**os.environ, "PYTHONWARNINGS": "ignore"}
    )
    assert bad.returncode == 2
    assert bad.stderr == "error: --role 'boss': Input should be 'mixed', 'prefill' or 'decode'\n"
    spec.write_text(yaml.safe_dump({"endpoints": [_ep(), _ep()]}))
    for args in (["--spec", str(spec)], []):
        assert entry(args) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and err.count("\n") == 1


def test_module_entry_reports_usage_errors_as_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    from servekit.sim.__main__ import entry

    assert entry(["--endpoints", "0"]) == 2
    assert capsys.readouterr().err == "error: --endpoints: must be at least 1\n"
    assert entry(["--endpoints", "2", "--check"]) == 0
    assert '"mixed-1"' in capsys.readouterr().out


def test_two_simulators_in_one_process_keep_their_own_logs(tmp_path: Path) -> None:
    def spec(folder: str) -> dict[str, Any]:
        return {"endpoints": [_ep(log=str(tmp_path / folder / "e.log"))]}

    with running_sim(spec("one")), running_sim(spec("two")):
        pass
    for folder in ("one", "two"):
        text = (tmp_path / folder / "e.log").read_text()
        assert text.count("GPU KV cache size: 16,777,216 tokens") == 1


def test_speed_flag_overrides_the_spec_files_time_scale(tmp_path: Path) -> None:
    from servekit.sim.options import SimOptions, build_spec, parse_options

    path = tmp_path / "s.json"
    path.write_text(json.dumps({"endpoints": [_ep()], "time_scale": 0.5}))
    assert build_spec(SimOptions(spec=path)).speed == 2.0
    assert build_spec(parse_options(["--spec", str(path), "--speed", "50"])).time_scale == 0.02
    assert build_spec(SimOptions(endpoints=1)).time_scale == 1.0
    with pytest.raises(UsageError, match="--speed"):
        parse_options(["--spec", str(path), "--speed", "0"])
