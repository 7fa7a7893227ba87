"""KV blocks, LRU prefix caching and the latency profiles."""

from __future__ import annotations

import pytest

from servekit.errors import UsageError
from servekit.sim.kvcache import KvCache, block_hashes
from servekit.sim.profile import builtin_profile_names, load_profile, profile_from_mapping


def test_prefix_hits_are_whole_blocks_and_leave_one_token_to_compute() -> None:
    kv = KvCache(num_blocks=100, block_size=4)
    ids = list(range(16))
    hashes = block_hashes(ids, 4)
    first = kv.allocate(hashes, 16, 20)
    assert first is not None and first.cached_tokens == 0
    kv.free(first)
    again = kv.allocate(hashes, 16, 20)
    assert again is not None and again.cached_tokens == 12
    other = kv.allocate(block_hashes([*ids[:8], 99, 98, 97, 96], 4), 12, 14)
    assert other is not None and other.cached_tokens == 8


def test_capacity_blocks_admission_and_lru_evicts_oldest() -> None:
    kv = KvCache(num_blocks=4, block_size=4)
    a = kv.allocate(block_hashes(list(range(8)), 4), 8, 8)
    b = kv.allocate(block_hashes(list(range(100, 108)), 4), 8, 8)
    assert a is not None and b is not None
    assert kv.usage() == 1.0
    assert kv.allocate(block_hashes(list(range(200, 204)), 4), 4, 4) is None
    kv.free(a)
    kv.free(b)
    assert kv.usage() == 0.0
    c = kv.allocate(block_hashes(list(range(300, 308)), 4), 8, 8)
    assert c is not None
    assert kv.allocate(block_hashes(list(range(100, 108)), 4), 9, 9) is None  # c holds 2 of 4
    hit_b = kv.allocate(block_hashes(list(range(100, 108)), 4), 8, 8)
    assert hit_b is not None and hit_b.cached_tokens == 4  # b survived: a was older
    kv.free(c)
    kv.free(hit_b)
    lost_a = kv.allocate(block_hashes(list(range(8)), 4), 8, 8)
    assert lost_a is not None and lost_a.cached_tokens == 0


def test_shipped_profiles_load_and_are_labelled_simulated() -> None:
    assert {"zero", "cpu-tiny", "a3-dsv4-flash"} <= set(builtin_profile_names())
    for name in builtin_profile_names():
        assert "simulated" in load_profile(name).label
    assert load_profile("zero").zero_time
    assert not load_profile("a3-dsv4-flash").zero_time


def test_a3_profile_reproduces_the_published_figures() -> None:
    p = load_profile("a3-dsv4-flash")
    assert p.decode_step(1) == pytest.approx(0.02484)
    single = p.acceptance_length / p.decode_step(1)
    assert single == pytest.approx(116.4, rel=0.01)
    for n, tok_s in ((4, 249.5), (8, 362.7), (16, 536.9)):
        assert n * p.acceptance_length / p.decode_step(n) == pytest.approx(tok_s, rel=0.01)
    chunk = p.max_num_batched_tokens
    rate = chunk / (p.prefill_overhead_s + p.prefill_chunk(chunk, chunk))
    assert rate == pytest.approx(7100, rel=0.02)
    assert p.kv_capacity_tokens == 2_987_727


def test_decode_step_interpolates_and_extrapolates() -> None:
    p = profile_from_mapping({"name": "t", "decode_step_s": [[1, 0.01], [3, 0.03]]})
    assert p.decode_step(2) == pytest.approx(0.02)
    assert p.decode_step(5) == pytest.approx(0.05)


def test_bad_profiles_are_usage_errors_naming_the_field() -> None:
    with pytest.raises(UsageError, match="acceptance_length"):
        profile_from_mapping({"name": "t", "acceptance_length": 3.0})
    with pytest.raises(UsageError, match="nope"):
        profile_from_mapping({"name": "t", "nope": 1})
    with pytest.raises(UsageError, match="unknown profile 'nope'"):
        load_profile("nope")


def test_allocations_from_before_a_reset_are_void() -> None:
    kv = KvCache(num_blocks=8, block_size=4)
    old = kv.allocate(block_hashes(list(range(8)), 4), 8, 8)
    assert old is not None
    kv.reset()
    fresh = kv.allocate(block_hashes(list(range(8)), 4), 8, 8)
    assert fresh is not None and fresh.cached_tokens == 0
    kv.free(old)  # must not disturb the new epoch's accounting
    assert kv.used_blocks == 2
    kv.free(fresh)
    assert kv.used_blocks == 0


def test_prefix_caching_can_be_turned_off() -> None:
    kv = KvCache(num_blocks=16, block_size=4, prefix_caching=False)
    hashes = block_hashes(list(range(16)), 4)
    first = kv.allocate(hashes, 16, 16)
    assert first is not None
    kv.free(first)
    again = kv.allocate(hashes, 16, 16)
    assert again is not None and again.cached_tokens == 0
