"""The normalizer: argv to program + flags, env changes, placeholders, process keys."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, strategies as st

from servekit.importer.platform.normalize import (
    Placeholders,
    ProcessFacts,
    env_changes,
    keyed,
    node_placeholders,
    parse_argv,
    parse_word,
    process_facts,
    process_key,
    render_argv,
)

NO_PLACEHOLDERS = Placeholders()


def facts(argv: list[str], node: int = 0, kind: str = "engine") -> ProcessFacts:
    return process_facts(
        node=node, kind=kind, argv=argv, env={}, cwd=None, placeholders=NO_PLACEHOLDERS
    )


def test_program_is_the_words_before_the_first_flag() -> None:
    program, flags = parse_argv(["vllm", "serve", "/root/model", "--port", "8080"])
    assert program == ("vllm", "serve", "/root/model")
    assert flags == (("--port", ("8080",)),)


def test_python_dash_m_module_counts_as_program() -> None:
    program, flags = parse_argv(["python3", "-m", "servekit.proxy", "--host", "0.0.0.0"])
    assert program == ("python3", "-m", "servekit.proxy")
    assert flags == (("--host", ("0.0.0.0",)),)


def test_equals_is_split_and_boolean_flags_have_no_value() -> None:
    _, flags = parse_argv(["vllm", "--seed=1024", "--enforce-eager", "--x", "--y=a=b"])
    assert flags == (("--seed", ("1024",)), ("--enforce-eager", ()), ("--x", ()), ("--y", ("a=b",)))


def test_negative_numbers_are_values_not_flags() -> None:
    _, flags = parse_argv(["p", "--seed", "-1", "--scale", "-0.5", "--z", "-"])
    assert flags == (("--seed", ("-1",)), ("--scale", ("-0.5",)), ("--z", ("-",)))


def test_several_value_words_stay_several_strings() -> None:
    _, flags = parse_argv(["p", "--hosts", "a", "b", "--ports", "1"])
    assert flags == (("--hosts", ("a", "b")), ("--ports", ("1",)))


def test_json_values_are_parsed_whatever_the_whitespace() -> None:
    spaced = parse_word('{"a":  1,\n   "b": [1, 2],  "c": {"d": true}}')
    assert spaced == parse_word('{"a":1,"b":[1,2],"c":{"d":true}}')
    assert spaced == {"a": 1, "b": [1, 2], "c": {"d": True}}


def test_json_keeps_string_true_apart_from_boolean_true() -> None:
    assert parse_word('{"x": "true"}') != parse_word('{"x": true}')
    assert parse_word('{"x": "true"}') == {"x": "true"}


def test_words_that_are_not_json_objects_stay_strings() -> None:
    assert parse_word("0.9") == "0.9"
    assert parse_word("true") == "true"
    assert parse_word("{not json") == "{not json"
    assert parse_word("[NaN]") == "[NaN]"
    assert parse_word("[1e400]") == "[1e400]"


def test_env_changes_are_set_changed_and_unset_relative_to_base() -> None:
    base = {"KEEP": "1", "CHANGE": "a", "DROP": "x"}
    env = {"KEEP": "1", "CHANGE": "b", "NEW": "n"}
    assert env_changes(env, base) == {"CHANGE": "b", "NEW": "n", "DROP": None}


def test_platform_plumbing_is_not_a_fact() -> None:
    env = {
        "AISHIPBOX_NODE_RANK": "0",
        "SERVEKIT_NODE": "0",
        "FAKEPLATFORM_NODE": "0",
        "MASTER": "true",
        "NIC_NAME": "eth0",
        "PWD": "/",
        "_": "/usr/bin/vllm",
        "HCCL_BUFFSIZE": "1024",
    }
    got = process_facts(
        node=0, kind="engine", argv=["vllm"], env=env, cwd=None, placeholders=NO_PLACEHOLDERS
    )
    assert got.env == {"HCCL_BUFFSIZE": "1024"}


def test_placeholders_replace_whole_values_only() -> None:
    ph = Placeholders(
        literals=node_placeholders(["10.88.0.1", "10.88.0.10"], ["fakenic1"]),
        inherited={"LD_LIBRARY_PATH": ("/inherited/lib",)},
    )
    assert ph.text("http://10.88.0.1:7100 10.88.0.10") == "http://{NODE0_IP}:7100 {NODE1_IP}"
    assert ph.text("fakenic1 fakenic10") == "{NODE0_NIC} fakenic10"
    assert ph.env_value("LD_LIBRARY_PATH", "/usr/local/lib:/inherited/lib") == (
        "/usr/local/lib:{INHERITED}"
    )
    assert ph.env_value("OTHER", "/inherited/lib") == "/inherited/lib"
    assert ph.value({"ip": ["10.88.0.1", 1, True]}) == {"ip": ["{NODE0_IP}", 1, True]}


def test_cwd_of_the_start_dir_is_none() -> None:
    ph = Placeholders(start_dir="/start")
    at_start = process_facts(
        node=0, kind="engine", argv=["vllm"], env={}, cwd="/start", placeholders=ph
    )
    elsewhere = process_facts(
        node=0, kind="engine", argv=["vllm"], env={}, cwd="/root/kernel_cache", placeholders=ph
    )
    assert (at_start.cwd, elsewhere.cwd) == (None, "/root/kernel_cache")


def test_keys_use_the_dp_rank_for_dp_processes_and_the_port_otherwise() -> None:
    external = facts(
        ["vllm", "--port", "7103", "--data-parallel-size", "4", "--data-parallel-rank", "3"], 1
    )
    leader = facts(["vllm", "--port", "8080", "--data-parallel-size", "8"])
    headless = facts(
        ["vllm", "--headless", "--data-parallel-size", "8", "--data-parallel-start-rank", "4"], 1
    )
    single = facts(["vllm", "--port", "7100"])
    proxy = facts(["python3", "proxy.py", "--port", "8080"], kind="proxy")
    assert [process_key(f) for f in (external, leader, headless, single, proxy)] == [
        "n1/engine/dp3",
        "n0/engine/dp0",
        "n1/engine/dp4",
        "n0/engine/port7100",
        "n0/proxy/port8080",
    ]


def test_headless_ranks_match_with_or_without_a_port() -> None:
    with_port = facts(
        [
            "vllm",
            "--port",
            "7100",
            "--headless",
            "--data-parallel-size",
            "32",
            "--data-parallel-start-rank",
            "16",
        ],
        3,
    )
    without = facts(
        ["vllm", "--headless", "--data-parallel-size", "32", "--data-parallel-start-rank", "16"], 3
    )
    assert process_key(with_port) == process_key(without) == "n3/engine/dp16"


def test_colliding_keys_are_made_unique() -> None:
    a = facts(["vllm", "--port", "7100", "--data-parallel-size", "2", "--data-parallel-rank", "0"])
    b = facts(["vllm", "--port", "7200", "--data-parallel-size", "2", "--data-parallel-rank", "0"])
    c = facts(["vllm", "--port", "7200", "--data-parallel-size", "2", "--data-parallel-rank", "0"])
    assert list(keyed([a, b, c])) == [
        "n0/engine/dp0/port7100",
        "n0/engine/dp0/port7200",
        "n0/engine/dp0/port7200#2",
    ]


SPECIAL_WORDS = st.sampled_from(
    [
        "--x",
        "--x=1",
        "--x=--y",
        "-5",
        "-0.5",
        "-",
        "--",
        "--=",
        "-m",
        "python3",
        "{",
        "[1, 2]",
        '{"a": true, "b": "true"}',
        "[NaN]",
        "[1e400]",
        "=",
        "",
        " {} ",
    ]
)
WORDS = st.lists(st.one_of(st.text(max_size=8), SPECIAL_WORDS), max_size=12)


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=False)


@given(WORDS)
def test_any_argv_parses_and_round_trips(argv: list[str]) -> None:
    program, flags = parse_argv(argv)
    again = parse_argv(render_argv(program, flags))
    assert _canonical(again) == _canonical((program, flags))
    one = ProcessFacts(node=0, kind="engine", cwd=None, program=program, flags=flags, env={})
    text = json.dumps(one.to_json())
    assert ProcessFacts.from_json(json.loads(text)) == one


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4)
    ),
    max_leaves=12,
)
JSON_DATA = st.one_of(
    st.lists(JSON, max_size=4), st.dictionaries(st.text(max_size=5), JSON, max_size=4)
)


@given(
    st.lists(st.tuples(st.from_regex(r"--[a-z][a-z-]{0,8}", fullmatch=True), JSON_DATA), max_size=5)
)
def test_json_flag_values_survive_rendering_with_their_types(pairs: list[tuple[str, Any]]) -> None:
    flags = tuple((name, (value,)) for name, value in pairs)
    _, parsed = parse_argv(render_argv(("vllm", "serve"), flags))
    assert _canonical(parsed) == _canonical(flags)
