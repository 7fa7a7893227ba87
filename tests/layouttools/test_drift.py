"""``layouts drift``: a3/deepseekv4-flash/1p1d against the vllm-ascend tutorial's A3 PD commands.

The facts below were read from vllm-project/vllm-ascend
docs/source/tutorials/models/DeepSeek-V4-Flash.md (section 5.2.1, A3 PD
separation, prefill and decode ``run_dp_template.sh``); the test writes them
back as a saved tutorial file (shell code blocks), never the page's text.
"""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import HealthCheck, given, settings, strategies as st
from tests.helpers.cli import servekit_inproc
from tests.helpers.refusal import one_line_error

from servekit.layouttools.drift import MAX_BYTES, drift_report, parse_upstream

LAYOUT = "a3/deepseekv4-flash/1p1d"
_COMMON_ENV = {
    "VLLM_RPC_TIMEOUT": "3600000",
    "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS": "30000",
    "HCCL_EXEC_TIMEOUT": "204",
    "OMP_PROC_BIND": "false",
    "OMP_NUM_THREADS": "10",
    "PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True",
    "TASK_QUEUE_ENABLE": "1",
    "HCCL_OP_EXPANSION_MODE": "AIV",
    "LD_LIBRARY_PATH": "$LD_LIBRARY_PATH:/usr/local/lib/",
    "LD_PRELOAD": "/usr/lib/aarch64-linux-gnu/libjemalloc.so.2:$LD_PRELOAD",
    "HCCL_IF_IP": "$local_ip",
    "ASCEND_RT_VISIBLE_DEVICES": "$1",
}
PREFILL_ENV = {
    **_COMMON_ENV,
    "HCCL_CONNECT_TIMEOUT": "120",
    "HCCL_BUFFSIZE": "2560",
    "VLLM_ASCEND_ENABLE_FLASHCOMM1": "1",
}
DECODE_ENV = {**_COMMON_ENV, "HCCL_CONNECT_TIMEOUT": "1200", "HCCL_BUFFSIZE": "1024"}
_RANK = [
    ("--host", "0.0.0.0"),
    ("--port", "$2"),
    ("--data-parallel-size", "$3"),
    ("--data-parallel-rank", "$4"),
    ("--data-parallel-address", "$5"),
    ("--data-parallel-rpc-port", "$6"),
    ("--tensor-parallel-size", "$7"),
]
_LOADER = '\'{"enable_multithread_load": "true", "num_threads": 128}\''
_SPEC = '\'{"num_speculative_tokens": 1,"method": "mtp","enforce_eager": true}\''
_EXTRA = '"kv_connector_extra_config": {"prefill": {"dp_size": 4, "tp_size": 4}, "decode": {"dp_size": 16, "tp_size": 1}}'
PREFILL_FLAGS = [
    *_RANK,
    ("--enable-expert-parallel", ""),
    ("--seed", "1024"),
    ("--served-model-name", "dsv4"),
    ("--max-model-len", "1048576"),
    ("--max-num-batched-tokens", "8192"),
    ("--max-num-seqs", "16"),
    ("--no-disable-hybrid-kv-cache-manager", ""),
    ("--model-loader-extra-config", _LOADER),
    ("--no-enable-prefix-caching", ""),
    ("--safetensors-load-strategy", "'prefetch'"),
    ("--speculative-config", _SPEC),
    ("--trust-remote-code", ""),
    ("--block-size", "128"),
    ("--tokenizer-mode", "deepseek_v4"),
    ("--tool-call-parser", "deepseek_v4"),
    ("--enable-auto-tool-choice", ""),
    ("--reasoning-parser", "deepseek_v4"),
    ("--gpu-memory-utilization", "0.9"),
    ("--quantization", "ascend"),
    ("--enforce-eager", ""),
    (
        "--additional-config",
        '\'{"enable_cpu_binding": true, "enable_shared_expert_dp": true, "enable_dsa_cp": true}\'',
    ),
    (
        "--kv-transfer-config",
        '\'{"kv_connector": "MooncakeHybridConnector", "kv_role": "kv_producer", '
        f'"kv_port": "30000", "engine_id": "0", {_EXTRA}}}\'',
    ),
]
DECODE_FLAGS = [
    *_RANK,
    ("--enable-expert-parallel", ""),
    ("--seed", "1024"),
    ("--served-model-name", "dsv4"),
    ("--max-model-len", "1048576"),
    ("--max-num-batched-tokens", "120"),
    ("--max-num-seqs", "60"),
    ("--async-scheduling", ""),
    ("--block-size", "128"),
    ("--no-disable-hybrid-kv-cache-manager", ""),
    ("--no-enable-prefix-caching", ""),
    ("--safetensors-load-strategy", "'prefetch'"),
    ("--trust-remote-code", ""),
    ("--tokenizer-mode", "deepseek_v4"),
    ("--model-loader-extra-config", _LOADER),
    ("--tool-call-parser", "deepseek_v4"),
    ("--enable-auto-tool-choice", ""),
    ("--reasoning-parser", "deepseek_v4"),
    ("--gpu-memory-utilization", "0.9"),
    ("--quantization", "ascend"),
    ("--speculative-config", _SPEC),
    ("--compilation-config", '\'{"cudagraph_mode": "FULL_DECODE_ONLY"}\''),
    (
        "--kv-transfer-config",
        '\'{"kv_connector": "MooncakeHybridConnector", "kv_role": "kv_consumer", '
        f'"kv_port": "30100", "engine_id": "1", {_EXTRA}}}\'',
    ),
    (
        "--additional-config",
        '\'{"ascend_compilation_config": {"enable_npugraph_ex": true, "enable_static_kernel": '
        'false}, "enable_cpu_binding": true, "multistream_overlap_shared_expert": true, '
        '"recompute_scheduler_enable": true}\'',
    ),
]


def block(env: dict[str, str], flags: list[tuple[str, str]]) -> str:
    lines = ["```shell", *(f"export {k}={v}" for k, v in env.items())]
    words = [f"{k} {v}".strip() for k, v in flags]
    lines.append(
        "vllm serve /root/.cache/modelscope/hub/models/vllm-ascend/DeepSeek-V4-Flash-w8a8-mtp \\"
    )
    lines += [f"    {w} \\" for w in words[:-1]] + [f"    {words[-1]}", "```"]
    return "\n".join(lines)


def saved_tutorial(prefill: list[tuple[str, str]] = PREFILL_FLAGS) -> str:
    return "\n\n".join(
        [
            "# DeepSeek-V4-Flash",
            "prefill:",
            block(PREFILL_ENV, prefill),
            "decode:",
            block(DECODE_ENV, DECODE_FLAGS),
        ]
    )


def _moved(report_json: dict[str, object], role: str) -> set[tuple[str, str | None, str | None]]:
    roles = report_json["roles"]
    assert isinstance(roles, dict)
    return {
        (c["key"], c["a"], c["b"])
        for c in [*roles[role]["flags"], *roles[role]["env"]]
        if not c["recorded"]
    }


def test_parser_reads_both_roles_with_their_exports() -> None:
    cmds = parse_upstream(saved_tutorial())
    assert [c.role for c in cmds] == ["prefill", "decode"]
    assert cmds[0].flags["--max-num-batched-tokens"] == "8192"
    assert cmds[0].env["HCCL_BUFFSIZE"] == "2560"
    assert cmds[1].env["HCCL_CONNECT_TIMEOUT"] == "1200"


def test_drift_of_1p1d_against_the_tutorial(tmp_path: Path) -> None:
    up = tmp_path / "tutorial.md"
    up.write_text(saved_tutorial())
    got = drift_report(LAYOUT, up, None).as_json()
    # The layout's own adaptations of the tutorial, each a difference the tutorial
    # does not have: served name, model length/batching chosen by the source,
    # and the decode capture sizes the source added.
    prefill = _moved(got, "prefill")
    decode = _moved(got, "decode")
    assert ("--served-model-name", "deepseek_v4", "dsv4") in prefill
    assert ("--served-model-name", "deepseek_v4", "dsv4") in decode
    assert ("--compilation-config.cudagraph_capture_sizes", "[8, 32, 120]", None) in decode
    # Nothing the layout shares with the tutorial shows up.
    shared = {
        "--seed",
        "--block-size",
        "--tokenizer-mode",
        "HCCL_BUFFSIZE",
        "LD_LIBRARY_PATH",
        "--kv-transfer-config.kv_connector_extra_config.decode.dp_size",
    }
    assert not {k for k, _a, _b in prefill | decode} & shared


def test_a_flag_moved_upstream_is_reported_as_moved(tmp_path: Path) -> None:
    base, newer = tmp_path / "a.md", tmp_path / "b.md"
    base.write_text(saved_tutorial())
    edited = [(k, "16384" if k == "--max-num-batched-tokens" else v) for k, v in PREFILL_FLAGS]
    edited.append(("--new-upstream-flag", "7"))
    newer.write_text(saved_tutorial(edited))
    before = _moved(drift_report(LAYOUT, base, None).as_json(), "prefill")
    after = _moved(drift_report(LAYOUT, newer, None).as_json(), "prefill")
    assert ("--new-upstream-flag", None, "7") in after - before
    moved = {k for k, _a, _b in after ^ before}
    assert moved == {"--new-upstream-flag", "--max-num-batched-tokens"}


def test_cli_json_and_refusals(tmp_path: Path) -> None:
    up = tmp_path / "t.md"
    up.write_text(saved_tutorial())
    ok = servekit_inproc("layouts", "drift", LAYOUT, "--upstream", str(up), "--json")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["layout"] == LAYOUT
    empty = tmp_path / "empty.md"
    empty.write_text("no commands here\n")
    one_line_error(
        servekit_inproc("layouts", "drift", LAYOUT, "--upstream", str(empty)), "no 'vllm serve'"
    )
    big = tmp_path / "big.md"
    big.write_bytes(b"x" * (MAX_BYTES + 1))
    one_line_error(
        servekit_inproc("layouts", "drift", LAYOUT, "--upstream", str(big)), "larger than"
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.one_of(
            st.text(max_size=80),
            st.sampled_from(
                [
                    "```",
                    "```shell",
                    "vllm serve m \\",
                    '  --x \'{"a": ',
                    'export A="b',
                    "\\",
                    "vllm serve --kv-transfer-config '{\"kv_role\": 3}'",
                ]
            ),
        ),
        max_size=40,
    )
)
def test_parser_never_crashes_on_hostile_text(lines: list[str]) -> None:
    for cmd in parse_upstream("\n".join(lines)):
        assert cmd.role in ("mixed", "prefill", "decode")


def test_a_docs_checkout_finds_the_tutorial_of_the_layouts_source(tmp_path: Path) -> None:
    page = tmp_path / "docs" / "source" / "tutorials" / "models" / "DeepSeek-V4-Flash.md"
    page.parent.mkdir(parents=True)
    page.write_text(saved_tutorial())
    got = drift_report(LAYOUT, tmp_path, None)
    assert got.upstream == str(page)
    assert [r.role for r in got.roles] == ["prefill", "decode"]
    (tmp_path / "empty").mkdir()
    one_line_error(
        servekit_inproc("layouts", "drift", LAYOUT, "--upstream", str(tmp_path / "empty")),
        "no DeepSeek-V4-Flash.md",
    )
