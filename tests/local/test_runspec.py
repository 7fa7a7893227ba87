"""The Plan becomes launches as planned: mapped ports in argv, endpoints by role."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from servekit.catalog.loader import load
from servekit.local.ports import map_to_free
from servekit.local.rundir import RunDir, versions
from servekit.local.runspec import vllm_run_spec
from servekit.render.plan import Plan, PlanOptions, build_plan, planned_ports


def _plan(name: str, tmp: Path) -> tuple[Plan, dict[tuple[int, int], int]]:
    layout = load(name).layout
    mapping = map_to_free(planned_ports(layout))
    options = PlanOptions(
        hosts=("127.0.0.1",),
        bind_host="127.0.0.1",
        port_map=mapping,
        python=sys.executable,
        scratch_dir=str(tmp / "scratch"),
    )
    return build_plan(layout, options), mapping


def test_1p1d_launches_use_the_mapped_ports(tmp_path: Path) -> None:
    plan, mapping = _plan("local/1p1d", tmp_path)
    spec = vllm_run_spec(plan, run_dir=tmp_path, scratch=tmp_path / "scratch", cwd=tmp_path)
    prefill, decode, proxy = (spec.launch(n) for n in ("prefill", "decode", "proxy"))
    assert prefill.argv == plan.process("prefill").argv  # used exactly as planned
    assert str(mapping[0, 8100]) in prefill.argv
    assert str(mapping[0, 8101]) in decode.argv
    assert f"http://127.0.0.1:{mapping[0, 8101]}" in proxy.argv
    assert spec.entry_url == f"http://127.0.0.1:{mapping[0, 8000]}"
    assert {e.role for e in spec.endpoints} == {"prefill", "decode", "proxy"}
    assert prefill.ready_model == plan.served_model_name
    assert proxy.ready_model is None  # the proxy is ready on /health alone
    kv = json.loads(prefill.argv[prefill.argv.index("--kv-transfer-config") + 1])
    assert kv["kv_connector"] == "NixlConnector" and kv["kv_buffer_device"] == "cpu"
    assert kv["kv_connector_module_path"] == "servekit_kv_cpu"  # the shim in the bundle
    assert prefill.env["VLLM_NIXL_SIDE_CHANNEL_PORT"] == str(mapping[0, 5600])
    assert decode.log == tmp_path / "logs" / "decode.log"


def test_proxy_is_ready_only_with_every_backend(tmp_path: Path) -> None:
    from servekit.client import judge_backends

    pd_plan, _ = _plan("local/1p1d", tmp_path)
    pd = vllm_run_spec(pd_plan, run_dir=tmp_path, scratch=tmp_path / "s", cwd=tmp_path)
    assert pd.launch("proxy").ready_backends == {"prefill_instances": 1, "decode_instances": 1}
    dp_plan, _ = _plan("local/dp2", tmp_path)
    dp = vllm_run_spec(dp_plan, run_dir=tmp_path, scratch=tmp_path / "s", cwd=tmp_path)
    assert dp.launch("proxy").ready_backends == {"replica_instances": 2}
    assert dp.launch("replica0").ready_backends == {}
    wanted = (("replica_instances", 2),)
    half = judge_backends({"status": "ok", "replica_instances": 1}, wanted)
    assert not half.ready
    assert half.detail == "backends healthy: replica_instances 1/2"
    assert judge_backends({"replica_instances": 2}, wanted).ready
    assert not judge_backends("not json", wanted).ready


def test_single_entry_is_the_engine(tmp_path: Path) -> None:
    plan, _ = _plan("local/single", tmp_path)
    spec = vllm_run_spec(plan, run_dir=tmp_path, scratch=tmp_path / "s", cwd=tmp_path)
    assert [x.name for x in spec.launches] == ["engine"]
    assert spec.entry_url == spec.launch("engine").url


def test_run_dir_reset_and_records(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "run")
    run.reset()
    (run.logs / "old.log").write_text("x")
    run.deployment.write_text("{}")
    run.reset()
    assert run.logs.is_dir() and not list(run.logs.iterdir())
    assert run.scratch.is_dir()
    assert not run.deployment.exists()
    plan, _ = _plan("local/dp2", tmp_path)
    run.write_plan(plan)
    assert Plan.model_validate_json(run.plan.read_text()) == plan
    found = versions()
    assert found["servekit"]
    assert "python" in found


def test_sim_spec_from_the_plan(tmp_path: Path) -> None:
    pytest.importorskip("servekit.sim.spec")
    from servekit.local.simrun import sim_spec_doc
    from servekit.sim.spec import spec_from_mapping

    plan, mapping = _plan("local/1p1d", tmp_path)
    spec = spec_from_mapping(sim_spec_doc(plan))
    by_name = {e.name: e for e in spec.endpoints}
    assert set(by_name) == {"prefill", "decode"}
    assert by_name["decode"].port == mapping[0, 8101]
    assert by_name["decode"].role == "decode"
    assert by_name["prefill"].kv_mode == "params"  # NIXL pulls
    assert by_name["decode"].guard_mode == "strict"
    keyed = spec_from_mapping(sim_spec_doc(_plan("local/1p1d-example", tmp_path)[0]))
    decoder = next(e for e in keyed.endpoints if e.role == "decode")
    assert decoder.kv_mode == "prompt" and decoder.guard_mode == "prompt-keyed"
    assert by_name["decode"].served_model_name == plan.served_model_name


def test_sim_profile_follows_the_engine_kind(tmp_path: Path) -> None:
    pytest.importorskip("servekit.sim.spec")
    from servekit.local.simrun import sim_spec_doc

    plan, _ = _plan("local/single", tmp_path)
    doc = sim_spec_doc(plan)
    assert [e["profile"] for e in doc["endpoints"]] == ["cpu-tiny"]  # type: ignore[index]
