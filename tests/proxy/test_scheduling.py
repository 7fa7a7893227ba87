"""Policies, token estimates and lease accounting, without servers."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st
from tests.helpers.cli import servekit_inproc

from servekit.errors import UsageError
from servekit.proxy.config import ProxyConfig, parse_args
from servekit.proxy.instances import Instance, Pool, State, acquire
from servekit.proxy.policies import (
    KV_POLICY,
    POLICIES,
    LeastLoaded,
    Policy,
    PrefixAffinity,
    RoundRobin,
    make_policy,
)
from servekit.proxy.requests import make_ticket
from servekit.vocabulary import dataclass_options

loads = st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 50)), min_size=1, max_size=8)


def instances(spec: list[tuple[int, int]]) -> list[Instance]:
    return [
        Instance(f"decode-{n}", "decode", f"http://10.0.0.{n}:8000", State.HEALTHY, tok, req)
        for n, (tok, req) in enumerate(spec)
    ]


@given(loads)
def test_least_loaded_picks_the_fewest_outstanding_tokens(spec: list[tuple[int, int]]) -> None:
    insts = instances(spec)
    chosen = LeastLoaded().choose(insts, b"")
    assert chosen.tokens == min(i.tokens for i in insts)
    tied = [i for i in insts if i.tokens == chosen.tokens]
    assert chosen.requests == min(i.requests for i in tied)


@given(st.binary(min_size=1, max_size=64), st.integers(2, 8))
def test_least_loaded_breaks_ties_by_prefix_so_repeats_hit_the_cache(key: bytes, n: int) -> None:
    insts = instances([(0, 0)] * n)
    chosen = LeastLoaded().choose(insts, key)
    assert chosen is PrefixAffinity().choose(insts, key)
    assert all(LeastLoaded().choose(insts, key) is chosen for _ in range(3))


@given(st.integers(1, 8), st.integers(1, 40))
def test_round_robin_visits_each_instance_in_turn(n: int, rounds: int) -> None:
    insts = instances([(0, 0)] * n)
    rr = RoundRobin()
    picks = [rr.choose(insts, b"").name for _ in range(n * rounds)]
    assert all(picks.count(i.name) == rounds for i in insts)


@given(st.binary(min_size=1, max_size=64), st.integers(2, 8))
def test_prefix_affinity_is_stable_and_survives_other_instances_leaving(key: bytes, n: int) -> None:
    insts = instances([(0, 0)] * n)
    policy = PrefixAffinity()
    first = policy.choose(insts, key)
    assert all(policy.choose(insts, key) is first for _ in range(3))
    others = [i for i in insts if i is not first]
    assert policy.choose([first, *others[1:]], key) is first  # rendezvous hashing


def test_prefix_affinity_yields_to_the_least_loaded_when_overloaded() -> None:
    insts = instances([(0, 0), (0, 0)])
    policy = PrefixAffinity(overload=2.0, slack=100)
    home = policy.choose(insts, b"system prompt")
    home.tokens = 10_000
    assert policy.choose(insts, b"system prompt") is not home


def test_same_prefix_goes_to_the_same_prefill_through_tickets() -> None:
    shared = "You are a helpful assistant. " * 40
    a = make_ticket("/v1/completions", {"prompt": shared + "question one"}, 512)
    b = make_ticket("/v1/completions", {"prompt": shared + "another question"}, 512)
    assert a.prefix_key == b.prefix_key
    insts = instances([(0, 0)] * 5)
    policy = make_policy("prefix-affinity")
    assert policy.choose(insts, a.prefix_key) is policy.choose(insts, b.prefix_key)


class _Kv:
    """Stands in for the kv-events indexes: hands out one marked policy per stage."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def policy(self, stage: str) -> Policy:
        self.asked.append(stage)
        return RoundRobin()


def test_policies_are_chosen_from_one_table_whose_names_the_options_offer() -> None:
    options = {o.name: o for o in dataclass_options(ProxyConfig)}
    for field in ("prefill_policy", "decode_policy"):
        assert options[field].choices == tuple(POLICIES)
    made = {name: type(make_policy(name)) for name in POLICIES if name != KV_POLICY}
    assert made == {
        "least-loaded": LeastLoaded, "round-robin": RoundRobin, "prefix-affinity": PrefixAffinity,
    }  # fmt: skip
    kv = _Kv()
    assert isinstance(make_policy(KV_POLICY, kv, "decode"), RoundRobin)
    assert kv.asked == ["decode"]


def test_an_unknown_policy_is_refused_not_made_least_loaded() -> None:
    """The if-chain this replaced made any unknown name (and kv-events without its
    indexes) least-loaded, silently; the control: a known name is made."""
    for name, kv in (("random", None), ("Least-Loaded", None), (KV_POLICY, None)):
        with pytest.raises(ValueError) as info:
            make_policy(name, kv, "prefill")
        assert "\n" not in str(info.value) and (
            name in str(info.value) or "--kv-events" in str(info.value)
        )
    assert isinstance(make_policy("least-loaded"), LeastLoaded)
    with pytest.raises(UsageError) as refused:
        parse_args(["--replica", "http://a:1", "--decode-policy", "random"])
    line = str(refused.value)
    assert "--decode-policy" in line and "round-robin" in line and "\n" not in line
    with pytest.raises(UsageError, match="--prefill-policy: pick one of"):
        ProxyConfig(replica=("http://a:1",), prefill_policy="random")
    assert parse_args(["--replica", "http://a:1", "--decode-policy", "round-robin"])


def test_an_unknown_policy_on_the_command_line_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Both entries (``servekit proxy``, and ``python -m servekit.proxy`` / the zipapp's
    ``main``) refuse it before anything starts; the control: a known name passes the
    option (the mock ``run`` sees its config)."""
    from servekit.proxy import server

    argv = ["--replica", "http://a:1", "--prefill-policy", "random"]
    cli = servekit_inproc("proxy", *argv)
    assert cli.returncode == 2 and "Traceback" not in cli.stderr
    refusal = cli.stderr.strip()
    assert "\n" not in refusal and "--prefill-policy" in refusal and "least-loaded" in refusal
    assert server.main(argv) == 2
    line = capsys.readouterr().err.strip()
    assert "\n" not in line and "--prefill-policy" in line and "'random'" in line
    seen: list[ProxyConfig] = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(server, "run", seen.append)
        assert server.main([*argv[:3], "round-robin"]) == 0
    assert [c.prefill_policy for c in seen] == ["round-robin"]


def test_prompt_token_estimates() -> None:
    text = make_ticket("/v1/completions", {"prompt": "a" * 400}, 64)
    assert text.prompt_tokens == 101
    ids = make_ticket("/v1/completions", {"prompt": list(range(300))}, 64)
    assert ids.prompt_tokens == 300
    chat = {"messages": [{"role": "system", "content": "s" * 40},
                         {"role": "user", "content": [{"type": "text", "text": "u" * 40}]}]}  # fmt: skip
    assert make_ticket("/v1/chat/completions", chat, 64).prompt_tokens == 21
    resp = make_ticket("/v1/responses", {"input": "r" * 80, "stream": True}, 64)
    assert resp.prompt_tokens == 21 and resp.stream


@given(st.lists(st.tuples(st.integers(1, 5000), st.integers(0, 30), st.booleans()), max_size=30))
def test_leases_always_return_load_to_zero(work: list[tuple[int, int, bool]]) -> None:
    pool = Pool("decode")
    inst = pool.add("http://10.0.0.1:8000")
    leases = []
    for tokens, streamed, twice in work:
        lease = acquire(inst, tokens)
        lease.grow(streamed)
        leases.append((lease, twice))
    assert inst.requests == len(work)
    for lease, twice in leases:
        lease.release()
        if twice:
            lease.release()  # idempotent
            lease.grow(7)  # a released lease no longer counts
    assert (inst.tokens, inst.requests) == (0, 0)


def test_pool_add_is_idempotent_and_discard_drops_one() -> None:
    pool = Pool("prefill")
    a, b = pool.add("http://a:1"), pool.add("http://b:1")
    assert pool.add("http://a:1") is a and [i.name for i in pool.members] == [
        "prefill-0",
        "prefill-1",
    ]
    lease = acquire(b, 10)
    assert not b.idle() and b.leases == {lease}
    lease.release()
    assert b.idle() and not b.leases
    pool.discard(a)
    assert pool.members == [b]
    assert pool.add("http://a:1").name == "prefill-2"  # a new engine, a new name
