"""The sampler judges load per role: a PD pair is one engine per role."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from servekit.bench.sampler import MetricsSource, Sampler, role_loads
from servekit.client import MetricsSnapshot, parse_metrics


def snap(running: int, waiting: int = 0) -> MetricsSnapshot:
    return parse_metrics(
        "# TYPE vllm:num_requests_running gauge\n"
        f"vllm:num_requests_running {running}\n"
        "# TYPE vllm:num_requests_waiting gauge\n"
        f"vllm:num_requests_waiting {waiting}\n"
    )


class Scripted(MetricsSource):
    """Answers each sample with the next scripted list of (role, snapshot)."""

    def __init__(self, script: Sequence[list[tuple[str, MetricsSnapshot]]]) -> None:
        super().__init__(())
        self.script = list(script)

    async def by_role(self) -> list[tuple[str, MetricsSnapshot]]:
        return self.script.pop(0) if self.script else []


def max_running(script: Sequence[list[tuple[str, MetricsSnapshot]]]) -> float | None:
    sampler = Sampler(Scripted(script), interval_s=10.0)

    async def run() -> None:
        async with sampler.running():
            pass

    asyncio.run(run())
    return sampler.max_running()


def test_role_loads_sum_dp_ranks_and_keep_roles_apart() -> None:
    loads = role_loads([("prefill", snap(1)), ("decode", snap(1, 1)), ("decode", snap(0, 1))])
    assert loads == {"prefill": 1.0, "decode": 3.0}


def test_one_request_per_role_is_alone() -> None:
    # The prefill gauge still reads 1 while the decode leg runs: one request.
    script = [
        [("prefill", snap(0)), ("decode", snap(0))],
        [("prefill", snap(1)), ("decode", snap(1))],
    ]
    assert max_running(script) == 1.0


def test_two_requests_on_one_role_are_not_alone() -> None:
    script = [
        [("prefill", snap(0)), ("decode", snap(1))],
        [("decode", snap(1)), ("decode", snap(1))],
    ]
    assert max_running(script) == 2.0


def test_no_metrics_means_unknown() -> None:
    assert max_running([[], []]) is None
