"""The engine ids and bootstrap servers the Plan names in bootstrap mode, by DP rank.

vLLM's engine core names each DP rank's KV engine ``<engine_id>_dp<rank>`` when
``data_parallel_size`` > 1 (``vllm/v1/engine/core.py``, the global rank), and under
external load balancing each rank's MooncakeConnector runs its own bootstrap server on
exactly ``VLLM_MOONCAKE_BOOTSTRAP_PORT``. So the Plan names each external-DP prefill rank
by its suffixed id at its own port (``kv_port + rank x tp``, the port it exports), and
refuses a builtin-DP prefill, whose one API server lets vLLM pick the rank per request.
A single-rank prefill keeps its plain id (``local/1p1d-mooncake``'s golden is unchanged).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from servekit.catalog import load
from servekit.errors import UsageError
from servekit.kvprotocol import kv_engine_id
from servekit.render import build_plan

CATALOG = Path(__file__).parents[1] / "fixtures" / "bootstrap_dp"
DP = "local/mooncake-dp2/1p1d"


def test_each_external_dp_rank_is_named_by_its_suffixed_id_at_its_own_server() -> None:
    layout = load(DP, CATALOG).layout
    plan = build_plan(layout)
    wiring = plan.process("proxy").proxy
    assert wiring is not None
    named = [(b.engine_id, b.server.process, b.server.port) for b in wiring.bootstrap]
    assert named == [("0_dp0", "prefill0.dp0", 8998), ("0_dp1", "prefill0.dp1", 8999)]
    for _, process, port in named:  # the port each rank's engine serves its server at
        assert plan.process(process).env["VLLM_MOONCAKE_BOOTSTRAP_PORT"] == str(port)
    assert plan.process("decode0").env["VLLM_MOONCAKE_BOOTSTRAP_PORT"] == "8999"  # its node's
    argv = plan.process("proxy").argv
    at = argv.index("--prefill-bootstrap")
    assert [w.split("=")[0] for w in argv[at + 1 : at + 3]] == ["0_dp0", "0_dp1"]
    single = build_plan(load("local/1p1d-mooncake").layout).process("proxy").proxy
    assert single is not None and [b.engine_id for b in single.bootstrap] == ["0"]


def test_a_builtin_dp_prefill_is_refused_in_one_line() -> None:
    layout = load(DP, CATALOG).layout
    doc = layout.model_dump(mode="json", exclude_none=True)
    doc["engines"][0]["launch"] = "builtin-dp"
    doc["proxy"]["prefill"] = [{"node": 0, "ports": 8100}]
    builtin = type(layout).model_validate(doc)
    with pytest.raises(UsageError, match="launch it external-dp") as caught:
        build_plan(builtin)
    assert "\n" not in caught.value.message and "0_dp<rank>" in caught.value.message


@pytest.mark.parametrize(
    ("engine", "rank", "size", "want"),
    [
        ("0", None, 1, "0"),
        ("0", 0, 1, "0"),
        ("0", 0, 2, "0_dp0"),
        ("7", 3, 4, "7_dp3"),
        ("a-b", 1, 1, "a-b_dp1"),
    ],
)
def test_kv_engine_id_is_vllms_rule(engine: str, rank: int | None, size: int, want: str) -> None:
    assert kv_engine_id(engine, rank, size) == want
