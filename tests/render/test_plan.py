"""The Plan: pure, faithful to the catalog, and the one source the surfaces share."""

from __future__ import annotations

import json

import pytest

from servekit.catalog.loader import load, load_all
from servekit.catalog.schema import Layout
from servekit.defaults import defaults_for, format_value
from servekit.render.plan import PlanOptions, build_plan, planned_ports


def layout(name: str) -> Layout:
    return load(name).layout


def test_plan_is_pure() -> None:
    for loaded in load_all():
        assert build_plan(loaded.layout) == build_plan(loaded.layout)


@pytest.mark.parametrize(
    ("name", "prefill", "decode", "mixed"),
    [
        ("a3/1p1d", 4, 16, 0),
        ("a3/2p2d", 8, 32, 0),
        ("a3/3p1d", 12, 16, 0),
        ("a3/1p3d", 4, 48, 0),
        ("a3/2p1x2d", 2, 1, 0),
        ("a3/1node", 0, 0, 1),
        ("a3/2nodes", 0, 0, 1),
        ("local/dp2", 0, 0, 2),
    ],
)
def test_api_endpoint_counts_match_the_catalog_page(
    name: str, prefill: int, decode: int, mixed: int
) -> None:
    plan = build_plan(layout(name))
    assert len(plan.api_processes("prefill")) == prefill
    assert len(plan.api_processes("decode")) == decode
    assert len(plan.api_processes("mixed")) == mixed


def test_1p1d_kv_transfer_config_is_upstreams() -> None:
    plan = build_plan(layout("a3/1p1d"))
    argv = plan.process("prefill0.dp0").argv
    cfg = json.loads(argv[argv.index("--kv-transfer-config") + 1])
    assert cfg == {
        "kv_connector": "MooncakeHybridConnector",
        "kv_role": "kv_producer",
        "kv_port": "36000",
        "engine_id": "0",
        "kv_connector_extra_config": {
            "prefill": {"dp_size": 4, "tp_size": 4},
            "decode": {"dp_size": 16, "tp_size": 1},
        },
    }
    assert list(cfg) == [
        "kv_connector",
        "kv_role",
        "kv_port",
        "engine_id",
        "kv_connector_extra_config",
    ]


def test_external_dp_ranks_get_their_devices_ports_and_rank() -> None:
    plan = build_plan(layout("a3/1p1d"))
    p = plan.process("prefill0.dp2")
    assert p.devices == (8, 9, 10, 11)
    assert p.env["ASCEND_RT_VISIBLE_DEVICES"] == "8,9,10,11"
    assert p.api_port == 7102
    argv = list(p.argv)
    assert argv[argv.index("--data-parallel-rank") + 1] == "2"
    assert "--data-parallel-start-rank" not in argv
    d = plan.process("decode0.dp15")
    assert d.devices == (15,) and d.api_port == 7115 and d.node == 1


def test_builtin_dp_headless_rank_points_at_the_master() -> None:
    plan = build_plan(
        layout("a3/2p1x2d"), PlanOptions(hosts=("10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"))
    )
    head = plan.process("decode0.n3-headless")
    argv = list(head.argv)
    # A headless rank serves no API, yet keeps --host/--port as the verified source passes them.
    assert head.headless and head.api_port is None and head.url is None and head.node == 3
    assert "--headless" in argv and argv[argv.index("--port") + 1] == "7100"
    assert argv[argv.index("--data-parallel-start-rank") + 1] == "16"
    assert argv[argv.index("--data-parallel-address") + 1] == "10.0.0.3"
    assert head.engine_id == plan.process("decode0.n2").engine_id == "2"
    proxy = list(plan.process("proxy").argv)
    assert proxy[proxy.index("--decode") + 1 : proxy.index("--failure-domains")] == [
        "http://10.0.0.3:7100"
    ]
    assert proxy[proxy.index("--prefill") + 1 : proxy.index("--decode")] == [
        "http://10.0.0.1:7100",
        "http://10.0.0.2:7100",
    ]


def test_defaults_table_reaches_argv_unless_the_layout_overrides() -> None:
    plan = build_plan(layout("a3/1p1d"))
    decode = plan.process("decode0.dp0")
    table = defaults_for("vllm-ascend", "decode")
    argv = list(decode.argv)
    assert argv[argv.index("--gpu-memory-utilization") + 1] == format_value(
        table["gpu_memory_utilization"]
    )
    assert argv[argv.index("--max-num-batched-tokens") + 1] == "120"  # the layout's own value
    assert "--middleware" in argv  # the decode guard, from the table's decode row
    prefill = list(plan.process("prefill0.dp0").argv)
    assert "--middleware" not in prefill


def test_port_map_and_hosts_rewrite_every_surface() -> None:
    lay = layout("local/1p1d")
    ports = planned_ports(lay)
    assert ports == [(0, 5557), (0, 5558), (0, 5600), (0, 5601), (0, 8000), (0, 8100), (0, 8101)]
    mapping = {(n, p): 40000 + i for i, (n, p) in enumerate(ports)}
    plan = build_plan(
        lay, PlanOptions(hosts=("127.0.0.1",), bind_host="127.0.0.1", port_map=mapping)
    )
    proxy = list(plan.process("proxy").argv)
    assert "http://127.0.0.1:40005" in proxy and "http://127.0.0.1:40006" in proxy
    assert proxy[proxy.index("--port") + 1] == "40004"
    assert plan.process("decode").api_port == 40006
    # NIXL's side channel is the mapped kv_port, through the variable vLLM reads
    assert plan.process("prefill").env["VLLM_NIXL_SIDE_CHANNEL_PORT"] == "40002"
    assert plan.process("decode").env["VLLM_NIXL_SIDE_CHANNEL_PORT"] == "40003"
    # the KV-event publishers: mapped, in the engines' config and the proxy's --kv-events
    assert plan.process("decode").kv_events_port == 40001
    assert '"endpoint":"tcp://*:40001"' in " ".join(plan.process("decode").argv)
    assert "http://127.0.0.1:40006=tcp://127.0.0.1:40001" in proxy


def test_scratch_dir_reaches_example_connector() -> None:
    plan = build_plan(layout("local/1p1d-example"), PlanOptions(scratch_dir="/tmp/run-xyz"))
    argv = list(plan.process("prefill").argv)
    cfg = json.loads(argv[argv.index("--kv-transfer-config") + 1])
    assert cfg["kv_connector_extra_config"]["shared_storage_path"] == "/tmp/run-xyz/kv"


def test_cpu_engines_use_python_module_entry_point() -> None:
    plan = build_plan(layout("local/single"), PlanOptions(python="/venv/bin/python"))
    argv = plan.process("engine").argv
    assert argv[:3] == ("/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server")
    assert plan.process("engine").env["VLLM_CPU_KVCACHE_SPACE"] == "1"


def test_a_local_run_binds_every_proxy_on_loopback_and_scripts_keep_the_source() -> None:
    """Issue 36 item 8: four layouts' proxies say ``host: 0.0.0.0`` (their source does);
    ``servekit up`` bound them on every interface although local runs use loopback."""
    wildcards = []
    for loaded in load_all():
        lay = loaded.layout
        if lay.proxy is None:
            continue
        hosts = ("127.0.0.1",) * lay.nodes
        local = list(build_plan(lay, PlanOptions(hosts=hosts, bind_host="127.0.0.1"))
                     .process("proxy").argv)  # fmt: skip
        assert local[local.index("--host") + 1] == "127.0.0.1", lay.name
        if lay.proxy.host == "0.0.0.0":
            wildcards.append(lay.name)
            rendered = list(build_plan(lay).process("proxy").argv)
            assert rendered[rendered.index("--host") + 1] == "0.0.0.0"
    # the layouts the issue found are still tested; the fourth, a3/2p1x2d, is an alias
    # of a3/deepseekv4-flash/2p1x2d now (aliases.yaml), so the catalog lists it once
    assert sorted(wildcards) == [
        "a2/deepseekv4-flash/2p1x2d",
        "a3/deepseekv4-flash/2p1x2d",
        "a3/qwen3.5-397b-a17b/1p1x2d",
    ]
    assert load("a3/2p1x2d").layout.name == "a3/deepseekv4-flash/2p1x2d"
