"""Each validation rule rejects a deliberately broken layout with the right message."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from servekit.catalog.loader import load_all
from servekit.catalog.schema import Layout
from servekit.render.rules import Finding, check_layout


def findings_for(data: dict[str, Any]) -> list[Finding]:
    return check_layout(Layout.model_validate(data))


def engine(data: dict[str, Any], name: str) -> dict[str, Any]:
    return next(e for e in data["engines"] if e["name"] == name)


def set_decode_dp8(d: dict[str, Any]) -> None:
    engine(d, "decode0")["dp_size_per_node"] = 8
    engine(d, "decode0")["dp_size"] = 8


def dup_engine_id(d: dict[str, Any]) -> None:
    engine(d, "decode0")["engine_id"] = "0"


def kv_in_reserved(d: dict[str, Any]) -> None:
    engine(d, "prefill0")["kv_port"] = 30000


def kv_window_hits_api(d: dict[str, Any]) -> None:
    engine(d, "decode0")["kv_port"] = 7105


def extra_config_differs(d: dict[str, Any]) -> None:
    engine(d, "decode0")["kv_connector"]["extra_config"] = {
        "prefill": {"dp_size": 4, "tp_size": 4},
        "decode": {"dp_size": 8, "tp_size": 1},
    }


def extra_config_untrue(d: dict[str, Any]) -> None:
    for name in ("prefill0", "decode0"):
        engine(d, name)["kv_connector"]["extra_config"]["prefill"] = {"dp_size": 2, "tp_size": 4}


def proxy_misses_endpoint(d: dict[str, Any]) -> None:
    d["proxy"]["decode"] = [{"node": 1, "ports": "7100-7114"}]


def proxy_lists_unknown(d: dict[str, Any]) -> None:
    d["proxy"]["prefill"].append({"node": 1, "ports": 7100})


def no_proxy(d: dict[str, Any]) -> None:
    del d["proxy"]


def spec_method_differs(d: dict[str, Any]) -> None:
    engine(d, "decode0")["speculative"]["method"] = "eagle"


def spec_prefill_two(d: dict[str, Any]) -> None:
    engine(d, "prefill0")["speculative"]["num_speculative_tokens"] = 2


def node_out_of_range(d: dict[str, Any]) -> None:
    engine(d, "decode0")["nodes"] = [5]


def idle_node(d: dict[str, Any]) -> None:
    d["nodes"] = 3


def wrong_connector_role(d: dict[str, Any]) -> None:
    engine(d, "prefill0")["kv_connector"]["role"] = "kv_consumer"


def stale_record(d: dict[str, Any]) -> None:
    d["provenance"]["verification"] = {
        "verified": True,
        "image": "quay.io/ascend/vllm-ascend:v0.20.0-a3",
    }


def guard_off(d: dict[str, Any]) -> None:
    engine(d, "decode0").setdefault("settings", {})["guard"] = False


def derived(d: dict[str, Any]) -> None:
    d["provenance"]["derived_from"] = "a3/1node"


CASES: list[tuple[str, Callable[[dict[str, Any]], None], str, str, str]] = [
    (
        "devices",
        set_decode_dp8,
        "error",
        "dp_size_per_node",
        "x tp 1 = 8, but ascend-a3 nodes have 16 devices",
    ),
    (
        "engine-id",
        dup_engine_id,
        "error",
        "engine_id",
        "engine_id '0' is already used by engine 'prefill0'",
    ),
    ("kv-reserved", kv_in_reserved, "warning", "kv_port", "kv_port 30000 lies in [20000, 36000)"),
    ("port-collision", kv_window_hits_api, "error", "node 1 port 7105", "collides with"),
    (
        "extra-config-same",
        extra_config_differs,
        "error",
        "kv_connector.extra_config",
        "differs from prefill0's",
    ),
    (
        "extra-config-true",
        extra_config_untrue,
        "error",
        "kv_connector.extra_config",
        "says prefill",
    ),
    (
        "proxy-misses",
        proxy_misses_endpoint,
        "error",
        "proxy.decode",
        "misses decode endpoint node 1:7115",
    ),
    (
        "proxy-unknown",
        proxy_lists_unknown,
        "error",
        "proxy.prefill",
        "lists node 1:7100, which is no prefill API endpoint",
    ),
    ("one-proxy", no_proxy, "error", "proxy", "needs exactly one proxy"),
    (
        "spec-method",
        spec_method_differs,
        "error",
        "speculative.method",
        "differs from prefill's mtp",
    ),
    (
        "spec-prefill",
        spec_prefill_two,
        "error",
        "speculative.num_speculative_tokens",
        "prefill engines use num_speculative_tokens 1",
    ),
    ("node-range", node_out_of_range, "error", "nodes", "node 5 is outside 0..1"),
    ("node-idle", idle_node, "error", "nodes", "node 2 runs nothing"),
    ("connector-role", wrong_connector_role, "error", "kv_connector.role", "must be kv_producer"),
    (
        "stale",
        stale_record,
        "warning",
        "provenance.verification",
        "verified on quay.io/ascend/vllm-ascend:v0.20.0-a3, now quay.io/ascend/vllm-ascend:v0.21.0rc1-a3",
    ),
    ("guard", guard_off, "warning", "settings.guard", "decode guard is off"),
]


@pytest.mark.parametrize(
    ("case", "breaker", "level", "field", "message"), CASES, ids=[c[0] for c in CASES]
)
def test_rule_rejects_broken_layout(
    case: str,
    breaker: Callable[[dict[str, Any]], None],
    level: str,
    field: str,
    message: str,
    layout_data: Callable[[str], dict[str, Any]],
) -> None:
    data = _hand_made(layout_data("a3/1p1d"))
    assert not [f for f in findings_for(data) if f.level == "error"]
    breaker(data)
    found = findings_for(data)
    hits = [f for f in found if f.level == level and field in f.field and message in f.message]
    assert hits, (
        f"{case}: expected {level} on {field!r} with {message!r}, got {[f.line() for f in found]}"
    )
    assert hits[0].layout == "a3/1p1d"


def _hand_made(data: dict[str, Any]) -> dict[str, Any]:
    """The layout under a hand-made name (as a3/1p1d was before it became an alias).

    a3/1p1d loads its import, a3/deepseekv4-flash/1p1d, whose values are its
    source's own: a rule the source breaks only warns there (see the next test).
    Under a hand-made name every rule is enforced, so each case proves its rule.
    """
    assert data["name"] == "a3/deepseekv4-flash/1p1d"
    return {**data, "name": "a3/1p1d"}


def test_the_imported_layout_keeps_a_source_value_a_rule_refuses(
    layout_data: Callable[[str], dict[str, Any]],
) -> None:
    """The same broken value in the imported layout (by its alias) warns, naming the source."""
    data = layout_data("a3/1p1d")
    spec_prefill_two(data)
    found = findings_for(data)
    spec = [f for f in found if "speculative.num_speculative_tokens (prefill0)" in f.field]
    assert [(f.level, f.layout, f.message) for f in spec] == [
        (
            "warning",
            "a3/deepseekv4-flash/1p1d",
            "prefill engines use num_speculative_tokens 1 (the source's own value)",
        )
    ]
    # positive control: the same data under a hand-made name is refused
    found = findings_for(_hand_made(data))
    spec = [f for f in found if "speculative.num_speculative_tokens (prefill0)" in f.field]
    assert [(f.level, f.layout) for f in spec] == [("error", "a3/1p1d")]


def test_headless_rank_listed_by_proxy_is_rejected(
    layout_data: Callable[[str], dict[str, Any]],
) -> None:
    data = layout_data("a3/2p1x2d")
    data["proxy"]["decode"].append({"node": 3, "ports": 7100})
    found = findings_for(data)
    assert any("node 3:7100, which is no decode API endpoint" in f.message for f in found)


def test_catalog_passes_with_only_warnings() -> None:
    for loaded in load_all():
        errors = [f.line() for f in check_layout(loaded.layout) if f.level == "error"]
        assert errors == [], errors


def test_real_finding_2p1x2d_reserved_kv_ports_is_reported() -> None:
    loaded = next(x for x in load_all() if x.layout.name == "a3/deepseekv4-flash/2p1x2d")
    ports = sorted(
        int(f.message.split()[1])
        for f in check_layout(loaded.layout)
        if "AscendDirectTransport" in f.message
    )
    assert ports == [30000, 30100, 30200]


def test_partial_node_engines_pass_and_overfull_fails(
    layout_data: Callable[[str], dict[str, Any]],
) -> None:
    data = layout_data("a3/dsv41-ced-pd")
    assert not [f for f in findings_for(data) if f.level == "error"]
    engine(data, "decode")["tp"] = 32
    engine(data, "decode")["devices"] = list(range(32))
    assert any("uses 32 devices but a node has 16" in f.message for f in findings_for(data))


def test_a_derived_layout_is_no_warning_its_status_says_derived(
    layout_data: Callable[[str], dict[str, Any]],
) -> None:
    """`layouts check --strict` passes a derived layout; `layouts list` says it is derived."""
    data = layout_data("a3/1node")
    assert findings_for(data) == []  # positive control: the base is clean
    derived(data)
    assert findings_for(data) == []
