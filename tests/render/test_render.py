"""Rendered scripts: shellcheck-clean, JSON-valid, pinned by goldens, and equal to the Plan.

The dry-run test is the proof that the scripts and the Plan (and so the local
runner) cannot disagree: bash expands every script and the result must be the
Plan's argv and env, token for token.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from servekit.catalog.loader import load, load_all
from servekit.defaults import script_defaults
from servekit.render.plan import Plan, PlanOptions, build_plan
from servekit.render.shell import render_files, write_rendering

GOLDEN = Path(__file__).parent / "golden"
NAMES = [x.layout.name for x in load_all()]
JSON_FLAGS = ("--kv-transfer-config", "--speculative-config", "--additional-config")


def rendered(name: str, tmp_path: Path) -> tuple[Plan, Path]:
    plan = build_plan(load(name).layout)
    out = tmp_path / name.replace("/", "__")
    write_rendering(plan, out)
    return plan, out


def node_env(plan: Plan) -> dict[str, str]:
    return {f"NODE{i}_IP": f"10.9.0.{i + 1}" for i in range(len(plan.nodes))}


def dry_run(script: Path, extra: dict[str, str]) -> list[str]:
    env = {"PATH": os.environ["PATH"], "DRY_RUN": "1", **extra}
    out = subprocess.run(["bash", str(script)], capture_output=True, text=True, env=env, check=True)
    return out.stdout.splitlines()


@pytest.mark.parametrize("name", NAMES)
def test_dry_run_expands_to_the_plans_argv_and_env(name: str, tmp_path: Path) -> None:
    plan, out = rendered(name, tmp_path)
    hosts = node_env(plan)
    resolved = build_plan(load(name).layout, PlanOptions(hosts=tuple(hosts.values())))
    for p in resolved.processes:
        lines = dry_run(out / f"node{p.node}" / f"{p.name}.sh", hosts)
        env_lines = [ln for ln in lines if ln.startswith("env ")]
        argv = [ln for ln in lines if not ln.startswith("env ")]
        assert argv == list(p.argv), p.name
        assert dict(ln[4:].split("=", 1) for ln in env_lines) == p.env, p.name


def test_operator_can_tune_a_default_at_launch(tmp_path: Path) -> None:
    plan, out = rendered("a3/1p1d", tmp_path)
    lines = dry_run(
        out / "node1" / "decode0.dp0.sh", {**node_env(plan), "MAX_SEQS": "48", "GUARD": "0"}
    )
    assert lines[lines.index("--max-num-seqs") + 1] == "48"
    assert "--middleware" not in lines


@pytest.mark.parametrize("name", NAMES)
def test_inline_json_parses(name: str) -> None:
    for p in build_plan(load(name).layout).processes:
        for flag in JSON_FLAGS:
            if flag in p.argv:
                assert isinstance(json.loads(p.argv[p.argv.index(flag) + 1]), dict)


def test_script_variables_equal_the_defaults_table() -> None:
    plan = build_plan(load("local/1p1d").layout)
    files = render_files(plan)
    for proc, role in (("prefill", "prefill"), ("decode", "decode")):
        text = files[f"node0/{proc}.sh"]
        for var, value in script_defaults("vllm-cpu", role).items():  # type: ignore[arg-type]
            assert f"{var}=${{{var}:-{value}}}" in text


@pytest.mark.parametrize("name", NAMES)
def test_bash_parses_every_script(name: str, tmp_path: Path) -> None:
    _, out = rendered(name, tmp_path)
    for script in sorted(out.rglob("*.sh")):
        subprocess.run(["bash", "-n", str(script)], check=True)


@pytest.mark.tools
def test_shellcheck_passes_every_layout(tmp_path: Path) -> None:
    shellcheck = shutil.which("shellcheck")
    assert shellcheck, "Debian's shellcheck is required (scripts/bootstrap.sh tools installs it)"
    scripts: list[str] = []
    for name in NAMES:
        _, out = rendered(name, tmp_path)
        scripts += [str(s) for s in sorted(out.rglob("*.sh"))]
    result = subprocess.run(
        [shellcheck, "-x", "-S", "style", *scripts], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout[-4000:]


def golden_text(name: str) -> str:
    files = render_files(build_plan(load(name).layout))
    return "".join(f"==> {rel} <==\n{files[rel]}" for rel in sorted(files))


@pytest.mark.parametrize("name", NAMES)
def test_golden_rendering(name: str) -> None:
    path = GOLDEN / f"{name.replace('/', '__')}.txt"
    text = golden_text(name)
    if os.environ.get("SERVEKIT_UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.read_text() == text, (
        f"rendering of {name} changed; review and rerun with SERVEKIT_UPDATE_GOLDEN=1"
    )


def test_launcher_stops_the_nodes_other_processes_when_one_fails(tmp_path: Path) -> None:
    """Upstream's per-rank launcher leaves the other ranks running; servekit's stops them."""
    plan, out = rendered("a3/1p1d", tmp_path)
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    pids = tmp_path / "pids"
    pids.mkdir()
    (fake_bin / "vllm").write_text(
        "#!/usr/bin/env bash\n"
        f'echo $$ > "{pids}/$$"\n'
        'case " $* " in *" --port 7102 "*) sleep 0.5; exit 7;; esac\n'
        "exec sleep 120\n"
    )
    (fake_bin / "vllm").chmod(0o755)
    (fake_bin / "python3").symlink_to(fake_bin / "vllm")  # the proxy's interpreter
    env = {
        "PATH": f"{fake_bin}:{os.environ['PATH']}",
        "LOG_DIR": str(tmp_path / "logs"),
        **node_env(plan),
    }
    result = subprocess.run(
        ["bash", str(out / "node0" / "run.sh")],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert result.returncode == 7, result.stderr
    assert "exited with status 7; stopping the others" in result.stderr
    started = [int(p.name) for p in pids.iterdir()]
    assert len(started) == 5  # 4 prefill ranks and the proxy
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(pid) for pid in started):
        time.sleep(0.1)
    assert not [pid for pid in started if _alive(pid)]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split()[2] != "Z"
    except FileNotFoundError:
        return False
