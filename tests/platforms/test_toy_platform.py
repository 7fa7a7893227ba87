"""A platform is one folder and one table row (issue 46): a toy platform proves it.

The test copies servekit's source tree, adds ``platforms/toyplat/`` (renderer,
start commands, a render flag and a ``--set`` setting, a summary file, an attach
flag, its requirements) and its row in ``platforms/table.py``, and checks that nothing else in the
copy differs from the source and that nothing else names the toy. Then, in a
fresh interpreter running the copy, everything that used to branch on a
platform's name works for the toy: ``servekit render --target toyplat`` (its flag,
its setting, its plan.md, the summary it prints), another platform's flag refused
with it and its flag refused with another target, the report's "how to use it",
``servekit deployment`` with its attach flag, ``verify``'s attach check and help,
``layouts show``'s requirements.

Positive control: without the row ``--target toyplat`` is not a choice, so the
row is what the toy needs besides its folder. The module is marked slow: one
interpreter runs the copy (about 4 s here, on a busy 2-core machine).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "servekit"
NAME = "toyplat"
LAYOUT = "a3/deepseekv4-flash/1p1d"

TOY = '''\
"""toyplat: a platform a test adds; everything of it is in this folder."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from servekit.errors import UsageError
from servekit.platforms.platform import Attach, Platform, Start
from servekit.platforms.request import Files, RenderRequest
from servekit.render import Plan, plan_page, process_script
from servekit.vocabulary import StrictModel


class ToyplatFlags(StrictModel):
    toyplat_flavour: Literal["plain", "fancy"] = Field(
        "plain", description="toyplat: how the launcher is dressed"
    )


def start(plan: Plan, out: str) -> Start:
    return Start(
        f"Toyplat: {out}/launch.toyplat lists every process",
        (f"toyplat-launch {out}/launch.toyplat   # on the toy's controller",),
        ("launch.toyplat",),
        "Toyplat starts each process from launch.toyplat.",
    )


def render(req: RenderRequest) -> Files:
    plan = req.plan
    files: Files = {f"{p.name}.sh": process_script(plan, p) for p in plan.processes}
    files["launch.toyplat"] = "".join(f"{p.node} {p.name}.sh\\n" for p in plan.processes)
    how = start(plan, ".")
    files["plan.md"] = plan_page(plan, how.title, how.lines, how.note)
    files["toyplat.md"] = (
        f"toyplat summary: {len(plan.processes)} processes, flavour "
        f"{req.settings.get('flavour')}, region {req.settings.get('region', 'none')}\\n"
    )
    return files


def hosts(text: str, plan: Plan) -> dict[str, str]:
    given = dict(part.partition("=")[::2] for part in text.split(",") if part)
    for p in plan.processes:
        if p.name not in given:
            raise UsageError(f"--toyplat-hosts: no address for {p.name}; give PROCESS=IP each")
    return {p.name: given[p.name] for p in plan.processes}


def requirements(name: str, catalog: object) -> list[str]:
    return [f"toyplat requirement: one controller for {name}"]


PLATFORM = Platform(
    name="toyplat",
    describe="a launch list the toy's controller runs",
    where="the toy platform",
    render=render,
    start=start,
    settings=("region",),
    set_examples=("toyplat.region=eu",),
    settings_page="the toy's manual",
    flags=ToyplatFlags,
    summary="toyplat.md",
    attach=Attach(
        field="toyplat_hosts",
        example="PROCESS=IP,...",
        what="each process's address",
        entry="the toy entry's URL",
        hosts=hosts,
    ),
    requirements=requirements,
)
'''

ROW_IMPORT = "from servekit.platforms.nodes import PLATFORM as NODES\n"
ROW = "(MODELARTS, NODES, K8S)"

DRIVER = '''\
import json, sys
from pathlib import Path
from typer.testing import CliRunner

from servekit.cli import app
from servekit.catalog import load
from servekit.render import build_plan
from servekit.report.usage import usage
from servekit.errors import UsageError

out = Path(sys.argv[1])
name = sys.argv[2]
runner = CliRunner()
said = {}

def run(*argv):
    """Exit status as the CLI's main gives it: a UsageError is 2 (one line)."""
    r = runner.invoke(app, list(argv), env={"COLUMNS": "300"})
    if isinstance(r.exception, UsageError):
        return 2, str(r.exception)
    return r.exit_code, r.output + ("" if r.exception is None else repr(r.exception))

said["render"] = run("render", name, "--target", "toyplat", "--out", str(out / "r"),
                     "--toyplat-flavour", "fancy", "--set", "toyplat.region=eu")
said["files"] = sorted(p.name for p in (out / "r").iterdir()) if (out / "r").is_dir() else []
said["plan_md"] = (out / "r" / "plan.md").read_text() if (out / "r" / "plan.md").is_file() else ""
said["k8s_flag_on_toy"] = run("render", name, "--target", "toyplat", "--out", str(out / "x"),
                              "--k8s-kind", "disaggregatedset")
said["toy_flag_on_nodes"] = run("render", name, "--target", "nodes", "--out", str(out / "y"),
                                "--toyplat-flavour", "fancy")
said["toy_set_on_nodes"] = run("render", name, "--target", "nodes", "--out", str(out / "z"),
                               "--set", "toyplat.region=eu")
plan = build_plan(load(name).layout)
said["usage"] = [[c.title, *c.lines] for c in usage(plan)]
hosts = ",".join(f"{p.name}=10.9.0.{i + 2}" for i, p in enumerate(plan.processes))
said["deployment"] = run("deployment", name, "--toyplat-hosts", hosts, "--entry",
                         "http://10.9.0.1:8000", "--out", str(out / "dep.json"))
dep = json.loads((out / "dep.json").read_text()) if (out / "dep.json").is_file() else {}
said["endpoints"] = {e["name"]: e["url"] for e in dep.get("endpoints", [])}
said["plan"] = {p.name: [i + 2, p.api_port] for i, p in enumerate(plan.processes)}
said["deployment_missing"] = run("deployment", name, "--toyplat-hosts", "x=1", "--entry",
                                 "http://10.9.0.1:8000", "--out", str(out / "dep2.json"))
said["verify_help"] = run("verify", "--help")
said["show"] = run("layouts", "show", name)
from servekit.platforms.options import RenderOptions
said["set_help"] = RenderOptions.model_fields["set"].description
from servekit.verify import VerifyOptions
from servekit.verify.attach import check_attach_inputs
opts = VerifyOptions(name=name, target="http://10.9.0.1:8000", toyplat_hosts=hosts)
check_attach_inputs(opts, load(name).layout)
try:
    check_attach_inputs(VerifyOptions(name=name, toyplat_hosts=hosts), load(name).layout)
    said["verify_no_target"] = "accepted"
except UsageError as exc:
    said["verify_no_target"] = str(exc)
print(json.dumps(said))
'''


def _tree(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in root.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }


def _copy(tmp: Path, *, row: bool) -> Path:
    """servekit's source with the toy's folder, and its table row when ``row``."""
    copy = tmp / "src" / "servekit"
    shutil.copytree(SRC, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (tmp / "layouts").symlink_to(ROOT / "layouts")  # the source tree's packaged catalog
    (copy / "platforms" / NAME).mkdir()
    (copy / "platforms" / NAME / "__init__.py").write_text(TOY)
    if row:
        table = copy / "platforms" / "table.py"
        text = table.read_text()
        assert ROW_IMPORT in text and ROW in text
        text = text.replace(
            ROW_IMPORT, ROW_IMPORT + "from servekit.platforms.toyplat import PLATFORM as TOYPLAT\n"
        )
        table.write_text(text.replace(ROW, ROW[:-1] + ", TOYPLAT)"))
    return copy


def _drive(copy: Path, out: Path) -> dict[str, object]:
    out.mkdir()
    env = {
        **os.environ,
        "PYTHONPATH": str(copy.parent),
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, str(out), LAYOUT],
        check=False, capture_output=True, text=True, env=env, timeout=120, cwd=out,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return result


@pytest.fixture(scope="module")
def toy(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, object]]:
    tmp = tmp_path_factory.mktemp("toy")
    copy = _copy(tmp, row=True)
    return copy, _drive(copy, tmp / "out")


def test_the_toy_touches_only_its_folder_and_the_table(toy: tuple[Path, dict[str, object]]) -> None:
    copy, _ = toy
    before, after = _tree(SRC), _tree(copy)
    changed = {rel for rel in before.keys() | after.keys() if before.get(rel) != after.get(rel)}
    assert changed == {f"platforms/{NAME}/__init__.py", "platforms/table.py"}
    naming = {rel for rel in after if NAME in (copy / rel).read_text(errors="replace").lower()}
    assert naming == changed
    table = (copy / "platforms" / "table.py").read_text().splitlines()
    assert sum(NAME in line.lower() for line in table) == 2  # its import and its row


def test_render_takes_its_target_flag_setting_and_prints_its_summary(
    toy: tuple[Path, dict[str, object]],
) -> None:
    _, said = toy
    code, output = said["render"]  # type: ignore[misc]
    assert code == 0, output
    assert "rendered a3/deepseekv4-flash/1p1d for toyplat" in output
    assert "toyplat summary: " in output and "flavour fancy, region eu" in output
    files = said["files"]
    assert isinstance(files, list) and {"launch.toyplat", "plan.md", "toyplat.md"} <= set(files)
    page = str(said["plan_md"])
    assert "toyplat-launch ./launch.toyplat" in page
    assert "Toyplat starts each process from launch.toyplat." in page
    assert "rank table" not in page and "NODE<i>_IP" not in page  # no other platform's words


def test_set_help_names_its_settings(toy: tuple[Path, dict[str, object]]) -> None:
    _, said = toy
    text = str(said["set_help"])
    assert "toyplat.KEY=VALUE for --target toyplat, e.g. toyplat.region=eu" in text
    assert "(the toy's manual lists them)" in text and "k8s.KEY=VALUE" in text


def test_each_platform_flag_is_refused_with_another_target(
    toy: tuple[Path, dict[str, object]],
) -> None:
    _, said = toy
    code, output = said["k8s_flag_on_toy"]  # type: ignore[misc]
    assert code == 2 and "--k8s-kind is for --target k8s" in output
    code, output = said["toy_flag_on_nodes"]  # type: ignore[misc]
    assert code == 2 and "--toyplat-flavour is for --target toyplat" in output
    code, output = said["toy_set_on_nodes"]  # type: ignore[misc]
    assert code == 2 and "not a setting of --target nodes" in output


def test_the_usage_renders_and_starts_it_too(toy: tuple[Path, dict[str, object]]) -> None:
    _, said = toy
    steps = said["usage"]
    assert isinstance(steps, list)
    (mine,) = [s for s in steps if "toyplat" in " ".join(s)]
    assert (
        mine[0]
        == "Or on the toy platform: Toyplat: out/a3-deepseekv4-flash-1p1d-toyplat/launch.toyplat lists every process"
    )
    assert mine[1] == (
        "servekit render a3/deepseekv4-flash/1p1d --target toyplat "
        "--out out/a3-deepseekv4-flash-1p1d-toyplat"
    )


def test_its_attach_places_each_process(toy: tuple[Path, dict[str, object]]) -> None:
    _, said = toy
    code, output = said["deployment"]  # type: ignore[misc]
    assert code == 0, output
    assert "toyplat_hosts" in output  # the unit the command prints: the attach's field
    endpoints, plan = said["endpoints"], said["plan"]
    assert isinstance(endpoints, dict) and isinstance(plan, dict) and endpoints
    for process, url in endpoints.items():
        host, port = plan[process]
        if process != "proxy":
            assert url.startswith(f"http://10.9.0.{host}:{port}"), (process, url)
    code, output = said["deployment_missing"]  # type: ignore[misc]
    assert code == 2 and "--toyplat-hosts: no address for" in output
    code, output = said["verify_help"]  # type: ignore[misc]
    assert code == 0 and "--toyplat-hosts" in output
    assert "--target URL (the toy entry's URL)" in str(said["verify_no_target"])


def test_layouts_show_prints_its_requirements(toy: tuple[Path, dict[str, object]]) -> None:
    _, said = toy
    code, output = said["show"]  # type: ignore[misc]
    assert code == 0, output
    assert "toyplat requirement: one controller for a3/deepseekv4-flash/1p1d" in output
    assert "kubernetes requirement" in output  # the other rows' still print


def test_without_its_row_the_folder_alone_is_not_a_platform() -> None:
    """Positive control: without the row, ``--target toyplat`` is refused. This tree is the
    copy without the folder and the row; a folder nothing names is never imported (the
    first test shows only the table names it), so it is the folder alone as well."""
    from servekit.platforms import RenderOptions

    with pytest.raises(ValidationError, match="Input should be 'modelarts', 'nodes' or 'k8s'"):
        RenderOptions(name=LAYOUT, out=Path("o"), target=NAME)
    assert not (SRC / "platforms" / NAME).exists()
