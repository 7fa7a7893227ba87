"""The comparison of two fact sets, and fixture files that hold them."""

from __future__ import annotations

from pathlib import Path

from servekit.importer.platform import fixture
from servekit.importer.platform.compare import compare
from servekit.importer.platform.normalize import Placeholders, ProcessFacts, process_facts


def facts(
    argv: list[str],
    env: dict[str, str | None] | None = None,
    node: int = 0,
    cwd: str | None = None,
    kind: str = "engine",
) -> ProcessFacts:
    return process_facts(
        node=node, kind=kind, argv=argv, env=env or {}, cwd=cwd, placeholders=Placeholders()
    )


ENGINE = [
    "vllm",
    "serve",
    "/root/model",
    "--port",
    "7100",
    "--data-parallel-size",
    "2",
    "--data-parallel-rank",
    "0",
    "--enforce-eager",
    "--additional-config",
    '{"enable_cpu_binding": true, "nested": {"a": 1}}',
]


def test_identical_sets_are_clean() -> None:
    one = [facts(ENGINE, {"A": "1"}, cwd="/root/kernel_cache")]
    diff = compare(one, list(one))
    assert diff.clean
    assert (diff.matched, diff.flag_diffs, diff.env_diffs) == (1, 0, 0)


def test_flag_order_does_not_matter() -> None:
    reordered = [*ENGINE[:3], *ENGINE[9:], *ENGINE[3:9]]
    assert compare([facts(ENGINE)], [facts(reordered)]).clean


def test_flags_missing_extra_and_changed_are_counted_and_named() -> None:
    plan = [w for w in ENGINE if w != "--enforce-eager"] + ["--seed", "1"]
    plan[-3] = '{"enable_cpu_binding": "true", "nested": {"a": 2}}'
    diff = compare([facts(ENGINE)], [facts(plan)])
    assert diff.flag_diffs == 3
    assert "flag missing --enforce-eager (boolean)" in diff.text
    assert "flag extra   --seed 1" in diff.text
    assert '.enable_cpu_binding: true -> "true"' in diff.text
    assert ".nested.a: 1 -> 2" in diff.text


def test_env_and_cwd_differences_are_counted_and_named() -> None:
    source = facts(ENGINE, {"A": "1", "B": "x", "http_proxy": None}, cwd="/root/kernel_cache")
    plan = facts(ENGINE, {"A": "2", "C": "y"})
    diff = compare([source], [plan])
    assert (diff.env_diffs, diff.cwd_diffs) == (4, 1)
    for line in (
        "env changed  A: 1 -> 2",
        "env missing  B=x",
        "env extra    C=y",
        "env missing  http_proxy=(unset)",
        "cwd: /root/kernel_cache -> None",
    ):
        assert line in diff.text


def test_missing_and_extra_processes_are_listed() -> None:
    rank1 = [*ENGINE[:8], "1", *ENGINE[9:]]
    diff = compare([facts(ENGINE), facts(rank1)], [facts(ENGINE), facts(ENGINE, node=1)])
    assert diff.missing == ["n0/engine/dp1"]
    assert diff.extra == ["n1/engine/dp0"]
    assert diff.matched == 1
    assert not diff.clean


def test_processes_with_the_same_differences_print_as_one_block() -> None:
    ranks = [[*ENGINE[:8], str(r), *ENGINE[9:]] for r in range(2)]
    source = [facts(argv, {"A": "1"}) for argv in ranks]
    plan = [facts(argv) for argv in ranks]
    diff = compare(source, plan)
    assert diff.env_diffs == 2
    assert diff.lines == ["n0/engine/dp0, n0/engine/dp1:", "  env missing  A=1"]


def test_fixture_documents_round_trip_and_list_one_flag_per_line(tmp_path: Path) -> None:
    processes = [
        facts(ENGINE, {"A": "1", "GONE": None}, cwd="/root/kernel_cache"),
        facts(["python3", "proxy.py", "--hosts", "a", "b"], kind="proxy"),
    ]
    path = tmp_path / "layout.json"
    text = fixture.dumps(fixture.document({"nodes": 1}, processes))
    path.write_text(text)
    meta, back = fixture.read(path)
    assert meta["nodes"] == 1
    assert back == processes
    assert '        ["--enforce-eager", null],' in text.splitlines()
    assert '        ["--hosts", "a", "b"]' in text.splitlines()
