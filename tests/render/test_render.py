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
from typing import Literal

import pytest

from servekit.catalog.loader import aliases, load, load_all, packaged_catalog
from servekit.defaults import script_defaults
from servekit.errors import UsageError
from servekit.guard import source_bytes
from servekit.platforms import render_files, write_rendering
from servekit.platforms.modelarts import ranktable
from servekit.preflight import checker_files
from servekit.proxy.bundle import zipapp_bytes
from servekit.render.envvalues import resolve_env
from servekit.render.plan import Plan, PlanOptions, build_plan

Target = Literal["modelarts", "nodes"]
TARGETS: tuple[Target, ...] = ("modelarts", "nodes")  # the script targets (k8s: tests/platforms)

GOLDEN = Path(__file__).parent / "golden"
NAMES = [x.layout.name for x in load_all()]
JSON_FLAGS = ("--kv-transfer-config", "--speculative-config", "--additional-config")


def rendered(name: str, tmp_path: Path, target: Target = "nodes") -> tuple[Plan, Path]:
    plan = build_plan(load(name).layout)
    out = tmp_path / f"{name.replace('/', '__')}-{target}"
    write_rendering(plan, out, target)
    return plan, out


def node_env(plan: Plan) -> dict[str, str]:
    return {f"NODE{i}_IP": f"10.9.0.{i + 1}" for i in range(len(plan.nodes))}


INHERITED = {"LD_PRELOAD": "/inherited/preload", "LD_LIBRARY_PATH": "/inherited/lib"}
BUNDLE = "/opt/bundle"


def dry_run(script: Path, extra: dict[str, str]) -> list[str]:
    env = {"PATH": os.environ["PATH"], "DRY_RUN": "1", **extra}
    out = subprocess.run(["dash", str(script)], capture_output=True, text=True, env=env, check=True)
    return out.stdout.splitlines()


@pytest.mark.parametrize("name", NAMES)
def test_dry_run_expands_to_the_plans_argv_env_and_cwd(name: str, tmp_path: Path) -> None:
    """dash expands every process script to exactly the Plan (argv, typed env resolved, cwd)."""
    plan, out = rendered(name, tmp_path)
    hosts = node_env(plan)
    resolved = build_plan(
        load(name).layout, PlanOptions(hosts=tuple(hosts.values()), bundle_dir=BUNDLE)
    )
    for p in resolved.processes:
        given = {**hosts, **INHERITED, "NODE_IP": p.host, "NODE_NIC": "eth9", "BUNDLE_DIR": BUNDLE}
        lines = dry_run(out / f"node{p.node}" / f"{p.name}.sh", given)
        cwd = [ln[4:] for ln in lines if ln.startswith("cwd ")]
        env_lines = [ln for ln in lines if ln.startswith("env ")]
        argv = [ln for ln in lines if not ln.startswith(("env ", "cwd "))]
        assert argv == list(p.argv), p.name
        want = resolve_env(p.env, node_ip=p.host, node_nic="eth9", inherited=INHERITED)
        assert dict(ln[4:].split("=", 1) for ln in env_lines) == want, p.name
        assert cwd == ([p.cwd] if p.cwd else []), p.name


@pytest.mark.parametrize("name", NAMES)
def test_both_targets_share_each_process_script(name: str) -> None:
    plan = build_plan(load(name).layout)
    flat, per_node = render_files(plan, "modelarts"), render_files(plan, "nodes")
    for p in plan.processes:
        assert flat[f"{p.name}.sh"] == per_node[f"node{p.node}/{p.name}.sh"], p.name


def test_operator_can_tune_a_default_at_launch(tmp_path: Path) -> None:
    plan, out = rendered("a3/1p1d", tmp_path)
    given = {**node_env(plan), "NODE_IP": "10.9.0.2", "NODE_NIC": "eth9"}
    lines = dry_run(out / "node1" / "decode0.dp0.sh", {**given, "MAX_SEQS": "48", "GUARD": "0"})
    assert lines[lines.index("--max-num-seqs") + 1] == "48"
    assert "--middleware" not in lines
    lines = dry_run(out / "node1" / "decode0.dp0.sh", {**given, "BIND_HOST": "127.0.0.9"})
    assert lines[lines.index("--host") + 1] == "127.0.0.9"
    assert lines[lines.index("--middleware") + 1] == "servekit_decode_guard.DecodeGuardMiddleware"


def test_no_host_flag_unless_bind_host_is_given(tmp_path: Path) -> None:
    """a3/1node's source passes no --host; BIND_HOST adds one for dry runs."""
    _, out = rendered("a3/1node", tmp_path)
    script = out / "node0" / "mixed.n0.sh"
    base = {"NODE0_IP": "10.9.0.1", "NODE_IP": "10.9.0.1"}
    assert "--host" not in dry_run(script, base)
    lines = dry_run(script, {**base, "BIND_HOST": "127.0.0.2"})
    assert lines[lines.index("--host") + 1] == "127.0.0.2"


@pytest.mark.parametrize("name", NAMES)
def test_inline_json_parses(name: str) -> None:
    for p in build_plan(load(name).layout).processes:
        for flag in JSON_FLAGS:
            if flag in p.argv:
                assert isinstance(json.loads(p.argv[p.argv.index(flag) + 1]), dict)


def test_script_variables_equal_the_defaults_table() -> None:
    plan = build_plan(load("local/1p1d").layout)
    files = render_files(plan, "nodes")
    for proc, role in (("prefill", "prefill"), ("decode", "decode")):
        text = files[f"node0/{proc}.sh"]
        for var, value in script_defaults("vllm-cpu", role).items():  # type: ignore[arg-type]
            assert f"{var}=${{{var}:-{value}}}" in text


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("target", TARGETS)
def test_every_script_parses(name: str, target: Target, tmp_path: Path) -> None:
    _, out = rendered(name, tmp_path, target)
    for script in sorted(out.rglob("*.sh")):
        shell = "bash" if script.name in ("run.sh", "env.sh") and target == "nodes" else "dash"
        subprocess.run([shell, "-n", str(script)], check=True)


@pytest.mark.tools
def test_shellcheck_passes_every_layout(tmp_path: Path) -> None:
    shellcheck = shutil.which("shellcheck")
    assert shellcheck, "Debian's shellcheck is required (scripts/bootstrap.sh tools installs it)"
    posix: list[str] = []
    bash: list[str] = []
    for name in NAMES:
        for target in TARGETS:
            _, out = rendered(name, tmp_path, target)
            for script in sorted(out.rglob("*.sh")):
                nodes_launcher = target == "nodes" and script.name in ("run.sh", "env.sh")
                (bash if nodes_launcher else posix).append(str(script))
    for shell, scripts in (("sh", posix), ("bash", bash)):
        result = subprocess.run(
            [shellcheck, "-x", "-s", shell, "-S", "style", *scripts],
            capture_output=True,
            text=True,
            check=False,
        )
        assert result.returncode == 0, result.stdout[-4000:]


def golden_text(name: str) -> str:
    files = render_files(build_plan(load(name).layout), "modelarts")
    return "".join(f"==> {rel} <==\n{_shown(files[rel])}" for rel in sorted(files))


def _shown(content: str | bytes) -> str:
    """Text files as they are; the bundled files by what they are (tested byte for byte apart)."""
    if isinstance(content, str):
        return content
    if content == source_bytes():
        return "(servekit's guard.py, byte for byte)\n"
    if content == zipapp_bytes():
        return "(servekit's proxy zipapp)\n"
    if content == ranktable.source_bytes():
        return "(servekit's render/ranktable.py, byte for byte)\n"
    for name, data in checker_files().items():
        if content == data:
            return f"(servekit's preflight/node/{name}, byte for byte)\n"
    return content.decode("utf-8")


def test_the_bundle_beside_the_scripts_is_servekits_own_code(tmp_path: Path) -> None:
    _, out = rendered("a3/1p1d", tmp_path, "modelarts")
    assert (out / "servekit_decode_guard.py").read_bytes() == source_bytes()
    assert (out / "servekit-proxy.pyz").read_bytes() == zipapp_bytes()
    assert os.access(out / "servekit-proxy.pyz", os.X_OK)


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


def test_every_golden_is_a_listed_layouts() -> None:
    """A golden of a name that is gone (or an alias now) would pin nothing: none is kept."""
    names = {f"{name.replace('/', '__')}.txt" for name in NAMES}
    assert sorted(p.name for p in GOLDEN.glob("*.txt") if p.name not in names) == []
    assert "a3__1p1d.txt" not in names  # positive control: an alias's golden would be stray
    assert "a3__deepseekv4-flash__1p1d.txt" in names


@pytest.mark.parametrize("alias", sorted(aliases(packaged_catalog())))
def test_an_alias_renders_its_layouts_golden(alias: str) -> None:
    """The old name renders what its layout's golden pins, byte for byte."""
    name = aliases(packaged_catalog())[alias]
    assert name in NAMES and alias not in NAMES
    assert golden_text(alias) == (GOLDEN / f"{name.replace('/', '__')}.txt").read_text()


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
        "NODE_NIC": "eth9",
        "WORK_DIR": str(tmp_path / "work"),
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


def test_out_never_replaces_a_folder_servekit_did_not_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 13 item 5: render --out replaced a folder of the user's files, and . or / crashed."""
    plan = build_plan(load("a3/1p1d").layout)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("precious")
    with pytest.raises(UsageError, match="did not write; give a new or empty folder"):
        write_rendering(plan, mine)
    assert (mine / "notes.txt").read_text() == "precious"
    write_rendering(plan, mine, force=True)  # the user said so
    assert not (mine / "notes.txt").exists() and (mine / "run.sh").is_file()
    write_rendering(plan, mine)  # servekit's own rendering is replaced without --force
    monkeypatch.chdir(mine)
    for protected in (Path("."), Path("/"), Path.home(), mine.parent):
        with pytest.raises(UsageError, match="give a new or empty folder"):
            write_rendering(plan, protected, force=True)
    (tmp_path / "afile").write_text("x")
    with pytest.raises(UsageError, match="is not a folder"):
        write_rendering(plan, tmp_path / "afile")
    (tmp_path / "link").symlink_to(mine)
    with pytest.raises(UsageError, match="symbolic link"):
        write_rendering(plan, tmp_path / "link")


def test_replacing_a_rendering_leaves_its_neighbours_alone(tmp_path: Path) -> None:
    """The old folder is swapped into a fresh temp name: a sibling ``.out.old`` is the user's."""
    plan = build_plan(load("a3/1p1d").layout)
    out = tmp_path / "out"
    write_rendering(plan, out)
    neighbour = tmp_path / ".out.old"
    neighbour.mkdir()
    (neighbour / "keep.txt").write_text("mine")
    write_rendering(plan, out)  # replaces servekit's own rendering
    assert (neighbour / "keep.txt").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == [".out.old", "out"]
