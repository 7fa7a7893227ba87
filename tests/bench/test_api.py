"""The public API ``servekit verify`` and the release report build on."""

from __future__ import annotations

from servekit import bench


def test_public_api_is_pinned() -> None:
    # ruff (RUF022) keeps the order; here: no duplicates, every name importable.
    assert len(set(bench.__all__)) == len(bench.__all__)
    assert all(hasattr(bench, name) for name in bench.__all__)
    needed = {"run_bench", "bench_async", "BenchResult", "write_outputs", "render_section"}
    assert needed <= set(bench.__all__)


def test_default_workloads_are_the_seeds_release_table() -> None:
    kinds = [w.model_dump()["kind"] for w in bench.default_workloads()]
    assert kinds == ["single_stream", "multi_stream", "prefill", "kv_capacity"]
    multi = bench.default_workloads()[1]
    assert isinstance(multi, bench.MultiStream)
    assert (multi.streams, multi.input_tokens, multi.output_tokens) == ((1, 4, 8, 16), 1024, 256)
