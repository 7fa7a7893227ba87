"""Every combination of prefill and decode faults keeps the proxy's promises.

For each pair of faults and both streaming modes: a 200 is never empty and a
stream always ends with [DONE]; a backend 4xx comes back with its own status;
decode never sees a request without kv_transfer_params; and all accounting is
back to zero afterwards.
"""

from __future__ import annotations

import itertools
import json

from .harness import run, stack

PREFILL_FAULTS = ["", "status4xx", "status5xx", "reset_before", "hang", "no_kv", "empty"]
DECODE_FAULTS = ["", "status4xx", "status5xx", "reset_before", "hang", "empty", "reset"]


def apply(engine: object, fault: str) -> None:
    if fault.startswith("status"):
        engine.fault = "status"  # type: ignore[attr-defined]
        engine.fault_status = 418 if fault == "status4xx" else 500  # type: ignore[attr-defined]
    else:
        engine.fault = fault  # type: ignore[attr-defined]


def expected_status(pf: str, df: str) -> set[int]:
    if pf == "status4xx":
        return {418}
    if pf in ("status5xx", "reset_before", "no_kv", "empty"):
        return {502}
    if pf == "hang":
        return {504}
    return {"status4xx": {418}, "status5xx": {502}, "reset_before": {502}, "hang": {504},
            "empty": {502}, "reset": {200}, "": {200}}[df]  # fmt: skip


def test_fault_matrix_keeps_every_promise() -> None:
    async def scenario() -> None:
        async with stack(
            max_attempts=1, prefill_timeout_s=0.2, decode_timeout_s=0.2, health_interval_s=0.02,
            readmit_after=1,
        ) as s:  # fmt: skip
            pre, dec = s.prefill[0], s.decode[0]
            for pf, df, stream in itertools.product(PREFILL_FAULTS, DECODE_FAULTS, (True, False)):
                for inst in s.proxy.router.instances():  # fresh start for each case
                    s.proxy.router.health.record(inst, True)
                apply(pre, pf)
                apply(dec, df)
                body = {"prompt": "x" * 50, "stream": stream, "max_tokens": 3}
                status, out = await s.post("/v1/completions", body)
                case = (pf, df, stream)
                assert status in expected_status(pf, df), (case, status, out)
                assert out, case
                if status == 200 and stream:
                    assert out.endswith(b"data: [DONE]\n\n"), case
                if status == 200 and not stream:
                    assert json.loads(out)["choices"], case
                if status == 200 and df == "reset" and stream:  # the fake resets streams only
                    assert b'"code": "stream_interrupted"' in out, case
                assert s.loads_are_zero(), case
            assert all(g.body.get("kv_transfer_params") for g in dec.gen_requests())
            assert len(dec.gen_requests()) > 0

    run(scenario())
