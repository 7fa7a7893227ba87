"""Every combination of prefill and decode faults keeps the proxy's promises.

For each pair of the simulator's faults and both streaming modes: a 200 is
never empty and a stream always ends with [DONE]; a backend 4xx comes back with
its own status; decode never sees a request whose kv_transfer_params the decode
guard would refuse; and all accounting is back to zero afterwards.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest

from servekit.guard import body_passes

from .harness import Node, run, stack

CLEAR = {"error_rate": 0.0, "reset_rate": 0.0, "hang": False, "empty_rate": 0.0}
FAULTS: dict[str, dict[str, Any]] = {
    "": {},
    "status4xx": {"error_rate": 1.0, "error_status": 418},
    "status5xx": {"error_rate": 1.0, "error_status": 500},
    "reset_before": {"reset_rate": 1.0, "reset_after_tokens": 0},
    "hang": {"hang": True},
    "empty": {"empty_rate": 1.0},
    "reset": {"reset_rate": 1.0, "reset_after_tokens": 1},
}
PREFILL_FAULTS = ["", "status4xx", "status5xx", "reset_before", "hang", "empty"]
DECODE_FAULTS = list(FAULTS)


def apply(node: Node, fault: str) -> None:
    node.fault(**{**CLEAR, **FAULTS[fault]})


def expected_status(pf: str, df: str, stream: bool) -> int:
    by_fault = {"status4xx": 418, "status5xx": 502, "reset_before": 502, "hang": 504,
                "empty": 502, "reset": 200 if stream else 502, "": 200}  # fmt: skip
    return by_fault[pf] if pf else by_fault[df]


def timeouts_for(pf: str, df: str) -> tuple[float, float]:
    """Only the stage that hangs gets a short timeout.

    A stage that answers keeps a patient one, so a zero-latency engine on a
    loaded machine (CI runs this beside real vLLM engines) is never taken for
    a hung one.
    """
    if pf == "hang":
        return 0.2, 30.0
    if df == "hang":
        return 30.0, 0.2
    return 30.0, 30.0


@pytest.mark.slow
def test_fault_matrix_keeps_every_promise() -> None:
    cases = list(itertools.product(PREFILL_FAULTS, DECODE_FAULTS, (True, False)))
    groups: dict[tuple[float, float], list[tuple[str, str, bool]]] = {}
    for case in cases:
        groups.setdefault(timeouts_for(case[0], case[1]), []).append(case)

    async def scenario(
        prefill_timeout_s: float, decode_timeout_s: float, group: list[tuple[str, str, bool]]
    ) -> None:
        async with stack(
            max_attempts=1, prefill_timeout_s=prefill_timeout_s, decode_timeout_s=decode_timeout_s,
            health_interval_s=0.02, readmit_after=1,
        ) as s:  # fmt: skip
            pre, dec = s.prefill[0], s.decode[0]
            for pf, df, stream in group:
                apply(pre, pf)
                apply(dec, df)
                body = {"prompt": "x" * 50, "stream": stream, "max_tokens": 3}
                status, out = await s.post("/v1/completions", body)
                case = (pf, df, stream)
                assert status == expected_status(pf, df, stream), (case, status, out)
                assert out, case
                if status == 200 and stream:
                    assert out.endswith(b"data: [DONE]\n\n"), case
                if status == 200 and not stream:
                    assert json.loads(out)["choices"], case
                if status == 200 and df == "reset" and stream:
                    assert b'"code": "stream_interrupted"' in out, case
                assert s.loads_are_zero(), case
            sent = [json.dumps(g.body).encode() for g in dec.gen()]
            assert all(body_passes(b, accept_prompt_keyed=False) for b in sent)
            if any(
                pf not in ("status4xx", "status5xx", "reset_before", "hang", "empty")
                for pf, _, _ in group
            ):
                assert sent, "no request reached decode, so the guard check saw nothing"

    assert sum(len(g) for g in groups.values()) == len(cases)
    for (prefill_timeout_s, decode_timeout_s), group in groups.items():
        run(scenario(prefill_timeout_s, decode_timeout_s, group))
