"""Hostile text in every free-text field a layout can carry: rendered, run, never executed.

Hypothesis builds strings from the pieces an attacker or a careless paste
brings (``$(...)``, backticks, quotes, newlines, ``;``, ``${VAR}``, globs,
leading dashes, non-ASCII) and puts them in the model path and served name,
engine_args values, JSON configs (additional_config, the connector's
extra_config), extra_args, environment values (literal and prepended), the
working directory, the bind host, the proxy's host and key files, and in a
profile's values. Both targets are rendered; every process script runs under
``dash`` with ``DRY_RUN=1`` and the nodes' ``run.sh`` under ``bash``. The
proof: the canary folder stays empty (nothing ran), and each script prints
exactly the Plan's argv, environment and working directory, byte for byte
(so no expansion, splitting or globbing touched a value), with each hostile
value present literally. Names that become shell words (environment variable
names, flag names, engine ids) are not free text: the schema refuses them
(tests/catalog/test_settings.py).
"""

from __future__ import annotations

import atexit
import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings, strategies as st
from pydantic import ValidationError

from servekit.catalog.loader import load, packaged_catalog, parse_layout_file
from servekit.catalog.profiles import PROFILES_DIR
from servekit.catalog.schema import _FLAG_NAME as FLAG_NAME, Engine, Layout
from servekit.platforms import write_rendering
from servekit.render.envvalues import resolve_env
from servekit.render.plan import Plan, PlanOptions, ProcessPlan, build_plan

CANARY = Path(tempfile.mkdtemp(prefix="servekit-canary-"))
atexit.register(shutil.rmtree, CANARY, True)
PIECES = [
    f"$(touch {CANARY}/subst)",
    f"`touch {CANARY}/backtick`",
    f"; touch {CANARY}/semicolon",
    f"' ; touch {CANARY}/quote ; '",
    f'" ; touch {CANARY}/dquote ; "',
    f"\n touch {CANARY}/newline\n",
    f"| touch {CANARY}/pipe",
    f"&& touch {CANARY}/and",
    "${HOME}",
    "$HOME",
    "${PATH:+x}",
    "$((1+1))",
    "*",
    "?",
    "[a-z]",
    "~",
    "-",
    "--help",
    "-rf",
    "\\",
    "\t",
    " ",
    "é",
    "中文",
    "%s%n",
    "!",
    "#",
    "{a,b}",
    "x",
    "/",
]
HOSTILE = st.lists(st.sampled_from(PIECES), min_size=1, max_size=5).map("".join)
NOT_A_DASH = HOSTILE.filter(lambda s: not s.startswith("-"))
BUNDLE = "/opt/servekit bundle"
INHERITED = {"LD_PRELOAD": "/inherited/preload", "LD_LIBRARY_PATH": "/inherited/lib"}
HYPO = settings(
    max_examples=int(os.environ.get("SERVEKIT_HOSTILE_EXAMPLES", "25")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def _raw(name: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(load(name).path.read_text())
    return data


def _small_a3() -> dict[str, Any]:
    """a3/1p1d with one rank per engine: every A3 feature, three processes."""
    data = _raw("a3/1p1d")
    for engine in data["engines"]:
        engine.update(dp_size=1, dp_size_per_node=1)
    data["proxy"]["prefill"] = [{"node": 0, "ports": 7100}]
    data["proxy"]["decode"] = [{"node": 1, "ports": 7100}]
    return data


def _fill(data: dict[str, Any], h: dict[str, str]) -> dict[str, Any]:
    """Put the hostile strings ``h`` in every free-text field of a layout."""
    data["model"].update(path=h["path"], served_name=h["served"], quantization=h["quant"])
    data["env"] = {**data.get("env", {}), "HOSTILE_TOP": h["env"]}
    for engine in data["engines"]:
        engine["engine_args"] = {
            **engine.get("engine_args", {}),
            "hostile_arg": h["arg"],
            "hostile_json": {"k": h["json"], h["json"]: [h["arg"]]},
        }
        engine["additional_config"] = {"hostile": h["json"]}
        engine["extra_args"] = [h["extra"], "--x", h["extra"]]
        engine["env"] = {
            **engine.get("env", {}),
            "HOSTILE_ENV": h["env"],
            "HOSTILE_PATH": {"prepend": h["env"]},
        }
        engine["cwd"] = h["cwd"]
        engine["bind_host"] = h["host"]
        if engine.get("kv_connector"):
            engine["kv_connector"] = {
                **engine["kv_connector"],
                "module_path": h["module"],
                "extra_config": {**engine["kv_connector"].get("extra_config", {}), "x": h["json"]},
            }
    proxy = data["proxy"]
    proxy.update(host=h["host"], api_key_file=h["file"], admin_key_file=h["file"], admin=True)
    return data


def _hostile_profile(root: Path, h: dict[str, str]) -> None:
    """The A3 profile of the copied catalog (the one a3/1p1d's layout uses, through its
    alias), with hostile values of its own in each role it gives."""
    path = root / "a3" / PROFILES_DIR / "deepseekv4-flash-a3.yaml"
    profile = yaml.safe_load(path.read_text())
    for role in ("prefill", "decode"):
        profile["roles"][role]["env"]["HOSTILE_PROFILE"] = h["profile"]
        profile["roles"][role]["engine_args"]["hostile_profile"] = h["profile"]
    profile["roles"]["decode"]["additional_config"]["hostile"] = h["profile"]
    path.write_text(yaml.safe_dump(profile, allow_unicode=True, sort_keys=False))


def _given_env(plan: Plan, p: ProcessPlan) -> dict[str, str]:
    hosts = {f"NODE{i}_IP": f"10.9.0.{i + 1}" for i in range(len(plan.nodes))}
    return {
        "PATH": os.environ["PATH"],
        "DRY_RUN": "1",
        **hosts,
        **INHERITED,
        "NODE_IP": p.host,
        "NODE_NIC": "eth9",
        "BUNDLE_DIR": BUNDLE,
    }


def _expected(p: ProcessPlan) -> str:
    lines = [f"cwd {p.cwd}"] if p.cwd else []
    env = resolve_env(p.env, node_ip=p.host, node_nic="eth9", inherited=INHERITED)
    lines += [f"env {key}={env[key]}" for key in sorted(env)]
    return "".join(line + "\n" for line in [*lines, *p.argv])


def _run(shell: str, script: Path, env: dict[str, str], cwd: Path) -> str:
    out = subprocess.run(
        [shell, str(script)], capture_output=True, env=env, cwd=cwd, check=True, timeout=60
    )
    return out.stdout.decode("utf-8")


def _proxy_value(argv: list[str], flag: str) -> str:
    """A proxy flag's value: the word after it, or joined to it (``--x=-y``, for a value
    that starts with ``-``, which the proxy's parser would take for a flag)."""
    if flag in argv:
        return argv[argv.index(flag) + 1]
    return next(a for a in argv if a.startswith(flag + "=")).removeprefix(flag + "=")


def _literal_everywhere(plan: Plan, h: dict[str, str]) -> None:
    """Each hostile value is in the Plan as it was given (what the scripts must print)."""
    for p in plan.processes:
        argv = list(p.argv)
        if p.kind == "proxy":
            assert _proxy_value(argv, "--host") == h["host"]
            assert _proxy_value(argv, "--api-key-file") == h["file"]
            continue
        assert h["path"] in argv and h["served"] in argv and h["quant"] in argv
        assert argv[argv.index("--hostile-arg") + 1] == h["arg"]
        assert json.loads(argv[argv.index("--hostile-json") + 1])["k"] == h["json"]
        assert json.loads(argv[argv.index("--additional-config") + 1])["hostile"] == h["json"]
        assert argv.count(h["extra"]) >= 2
        assert p.env["HOSTILE_ENV"] == h["env"] and p.env["HOSTILE_TOP"] == h["env"]
        assert p.cwd == h["cwd"]


def _prove(layout: Layout, h: dict[str, str], work: Path) -> None:
    plan = build_plan(layout)
    hosts = tuple(f"10.9.0.{i + 1}" for i in range(len(plan.nodes)))
    resolved = build_plan(layout, PlanOptions(hosts=hosts, bundle_dir=BUNDLE))
    _literal_everywhere(resolved, h)
    for target in ("modelarts", "nodes"):
        out = work / target
        write_rendering(plan, out, target)  # type: ignore[arg-type]
        for p in resolved.processes:
            folder = out / f"node{p.node}" if target == "nodes" else out
            shown = _run("dash", folder / f"{p.name}.sh", _given_env(resolved, p), work)
            assert shown == _expected(p), (target, p.name)
    for node in resolved.nodes:
        env = _given_env(resolved, node.processes[0])
        shown = _run("bash", work / "nodes" / f"node{node.index}" / "run.sh", env, work)
        assert shown == "".join(f"# {p.name}\n{_expected(p)}" for p in node.processes)
    assert not any(CANARY.iterdir()), sorted(CANARY.iterdir())


SLOTS = {
    "path": HOSTILE,
    "served": HOSTILE,
    "quant": HOSTILE,
    "arg": HOSTILE,
    "json": HOSTILE,
    "extra": HOSTILE,
    "env": HOSTILE,
    "cwd": NOT_A_DASH,
    "host": HOSTILE,
    "module": HOSTILE,
    "file": HOSTILE,
    "profile": HOSTILE,
}


@pytest.mark.slow
@HYPO
@given(st.fixed_dictionaries(SLOTS))
def test_hostile_values_in_a_cpu_pd_layout_never_run(h: dict[str, str]) -> None:
    data = _fill(_raw("local/1p1d"), h)
    with tempfile.TemporaryDirectory() as work:
        _prove(Layout.model_validate(data), h, Path(work))


@pytest.mark.slow
@HYPO
@given(st.fixed_dictionaries(SLOTS))
def test_hostile_values_in_an_a3_layout_and_its_profile_never_run(h: dict[str, str]) -> None:
    with tempfile.TemporaryDirectory() as work:
        root = Path(work) / "catalog"
        shutil.copytree(packaged_catalog() / "a3" / PROFILES_DIR, root / "a3" / PROFILES_DIR)
        _hostile_profile(root, h)
        folder = root / "a3" / "deepseekv4-flash" / "1p1d"
        folder.mkdir(parents=True)
        data = _fill(_small_a3(), h)
        text = yaml.safe_dump(data, allow_unicode=True, sort_keys=False)
        (folder / "layout.yaml").write_text(text, encoding="utf-8")
        layout = parse_layout_file(folder / "layout.yaml", "a3/deepseekv4-flash/1p1d")
        for engine in layout.engines:
            assert engine.engine_args["hostile_profile"] == h["profile"]
            assert engine.env["HOSTILE_PROFILE"] == h["profile"]
        _prove(layout, h, Path(work))


# Slots whose names are wider than an identifier: text of their pattern is a good name
# there (e.g. 'x-' is an engine id and a flag name), only text outside it is hostile.
WIDER = {
    "engine id": Engine.model_json_schema()["properties"]["engine_id"]["anyOf"][0]["pattern"],
    "flag name": FLAG_NAME.pattern,
}
NAME_SLOTS = [
    ("env name", lambda d, h: d["engines"][0].setdefault("env", {}).update({h: "1"})),
    ("layout env name", lambda d, h: d.setdefault("env", {}).update({h: "1"})),
    ("flag name", lambda d, h: d["engines"][0].setdefault("engine_args", {}).update({h: True})),
    ("engine id", lambda d, h: d["engines"][0].update(engine_id=h)),
    ("api key env", lambda d, h: d["proxy"].update(api_key_env=h)),
    ("setting", lambda d, h: d["engines"][0].setdefault("settings", {}).update(max_num_seqs=h)),
    ("bool setting", lambda d, h: d["engines"][0].setdefault("settings", {}).update(guard=h)),
    (
        "dtype setting",
        lambda d, h: d["engines"][0].setdefault("settings", {}).update(kv_cache_dtype=h),
    ),
]


@pytest.mark.parametrize(("slot", "put"), NAME_SLOTS, ids=[s for s, _ in NAME_SLOTS])
@HYPO
@given(h=HOSTILE.filter(lambda s: not s.isidentifier() and not s.isdigit()))
def test_hostile_text_is_refused_where_a_name_or_a_number_belongs(
    slot: str, put: Any, h: str
) -> None:
    assume(slot not in WIDER or not re.fullmatch(WIDER[slot], h))
    data = _raw("local/1p1d")
    put(data, h)
    with pytest.raises(ValidationError):
        Layout.model_validate(data)


def test_the_catalog_itself_proves_the_same(tmp_path: Path) -> None:
    """The unchanged layouts pass the same proof (the comparison is not vacuous)."""
    layout = load("local/1p1d").layout
    plan = build_plan(layout, PlanOptions(hosts=("10.9.0.1",), bundle_dir=BUNDLE))
    write_rendering(build_plan(layout), tmp_path / "r", "nodes")
    p = plan.process("decode")
    shown = _run("dash", tmp_path / "r" / "node0" / "decode.sh", _given_env(plan, p), tmp_path)
    assert shown == _expected(p) and "--max-num-seqs" in shown
