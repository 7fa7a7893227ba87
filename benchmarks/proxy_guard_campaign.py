"""The decode guard under generated bodies: bypasses and false rejects, counted.

    .venv/bin/python benchmarks/proxy_guard_campaign.py --hostile 20000 --proxy 5000

Runs the properties of tests/proxy/test_guard_rule.py at scale with the same
strategies (tests/proxy/guard_spec.py) and prints the counts docs/proxy.md quotes:

- hostile bodies: careless and hostile request bodies (real prefill answers
  with fields dropped or retyped, ``do_remote_prefill`` false or a string, the
  prompt-keyed marker and look-alikes, random objects, non-JSON, UTF-16,
  duplicate keys). A *bypass* is a body the guard passes that vLLM 0.32's NIXL
  or a Mooncake connector would not pull KV for (the decoder would prefill by
  itself); a *spec disagreement* is a body judged unlike the written spec.
- proxy bodies: client requests through the proxy's own payload functions with
  every connector's prefill answer (NIXL, vllm-ascend Mooncake, flat block ids,
  vLLM Mooncake bootstrap, the simulator's), in PD and prompt-keyed mode. A
  *false reject* is one the guard refuses.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings, strategies as st

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.proxy.guard_spec import (  # noqa: E402
    CLIENT_FIELDS,
    EDGE_IDS,
    FAIL_CLOSED,
    KV_VALUES,
    METHODS,
    NEVER_RUN_THE_MODEL,
    PATHS,
    PREFILL_ANSWERS,
    RUN_THE_MODEL,
    VLLM_ROUTES,
    bodies,
    connector_pulls,
    is_mark,
    kv_of,
    oracle_body,
    oracle_path_guarded,
)
from tests.proxy.test_guard_rule import sim_offer  # noqa: E402

from servekit.guard import body_passes, is_guarded_path  # noqa: E402
from servekit.proxy.payloads import decode_payload, prompt_keyed_decode_payload  # noqa: E402


def run_settings(n: int) -> settings:
    return settings(max_examples=n, database=None, deadline=None, phases=[Phase.generate], derandomize=True,
                    suppress_health_check=list(HealthCheck))  # fmt: skip


def hostile(n: int) -> Counter[str]:
    counts: Counter[str] = Counter()

    @run_settings(n)
    @given(bodies())
    def one(body: bytes) -> None:
        counts["bodies"] += 1
        passed, strict = body_passes(body), body_passes(body, accept_prompt_keyed=False)
        kv = kv_of(body)
        counts["passed"] += passed
        counts["passed_as_marker"] += passed and is_mark(kv)
        counts["bypasses"] += passed and not is_mark(kv) and not connector_pulls(kv)
        counts["bypasses_strict"] += strict and not connector_pulls(kv)
        counts["spec_disagreements"] += passed is not oracle_body(body)
        counts["spec_disagreements"] += strict is not oracle_body(body, strict=True)

    one()
    return counts


def paths(n: int) -> Counter[str]:
    """The path rule against the spec: every vLLM route (both methods, with and without a
    trailing slash), then generated paths and methods."""
    counts: Counter[str] = Counter()
    every = sorted({*VLLM_ROUTES, *NEVER_RUN_THE_MODEL, *RUN_THE_MODEL, *FAIL_CLOSED})
    counts["vllm_routes"] = len(VLLM_ROUTES)
    for path in every:
        for method in ("POST", "GET"):
            for tail in ("", "/"):
                counts["route_checks"] += 1
                counts["route_disagreements"] += is_guarded_path(method, path + tail) is not (
                    oracle_path_guarded(method, path + tail)
                )

    @run_settings(n)
    @given(METHODS, PATHS)
    def one(method: str, path: str) -> None:
        counts["generated_paths"] += 1
        guarded = is_guarded_path(method, path)
        counts["generated_path_disagreements"] += guarded is not oracle_path_guarded(method, path)

    one()
    return counts


def edges() -> Counter[str]:
    """Block ids at and beyond both bounds, flat and grouped, in every connector's answer."""
    counts: Counter[str] = Counter()
    for answer in PREFILL_ANSWERS:
        if "remote_block_ids" not in answer:
            continue
        for block in EDGE_IDS:
            for ids in ([3, block], [[3, block]]):
                body = json.dumps({"kv_transfer_params": {**answer, "remote_block_ids": ids}})
                counts["edge_bodies"] += 1
                passed = body_passes(body.encode())
                counts["edge_passed"] += passed
                counts["edge_disagreements"] += passed is not oracle_body(body.encode())
    return counts


def proxy_sent(n: int) -> Counter[str]:
    counts: Counter[str] = Counter()
    answers = [*PREFILL_ANSWERS, sim_offer()]

    @run_settings(n)
    @given(CLIENT_FIELDS, st.one_of(st.just(None), KV_VALUES))
    def one(client: dict[str, Any], own_kv: Any) -> None:
        body = dict(client) if own_kv is None else {**client, "kv_transfer_params": own_kv}
        for answer in answers:
            pd = json.dumps(decode_payload(body, answer)).encode()
            counts["pd_bodies"] += 1
            counts["pd_false_rejects"] += not body_passes(pd, accept_prompt_keyed=False)
        keyed = json.dumps(prompt_keyed_decode_payload(body)).encode()
        counts["prompt_keyed_bodies"] += 1
        counts["prompt_keyed_false_rejects"] += not body_passes(keyed)

    one()
    return counts


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--hostile", type=int, default=20000, help="hostile bodies to generate")
    p.add_argument("--proxy", type=int, default=5000, help="client bodies sent through the proxy")
    p.add_argument("--paths", type=int, default=5000, help="generated method/path pairs")
    p.add_argument("--json", type=Path, help="write the counts here too")
    args = p.parse_args()
    t0 = time.perf_counter()
    figures = {"hostile": dict(hostile(args.hostile)), "proxy": dict(proxy_sent(args.proxy))}
    figures["paths"] = dict(paths(args.paths))
    figures["edges"] = dict(edges())
    figures["seconds"] = round(time.perf_counter() - t0, 1)  # type: ignore[assignment]
    print(json.dumps(figures, indent=2))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
