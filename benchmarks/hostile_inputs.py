"""Hostile-input campaign (issue 23): bombs, hostile rank tables, manifests, URLs, stale pids.

Builds each hostile input, runs the real command on it in a child process under
an address-space limit (``--memory-mib``) and a time limit (``--timeout``), and
prints one row per case: exit code, lines on stderr, whether a traceback showed,
wall time to the refusal, the child's peak RSS and the bytes it wrote. Run it
against another source tree (say main before the fix) with ``--src``:

    .venv/bin/python benchmarks/hostile_inputs.py                 # this checkout
    .venv/bin/python benchmarks/hostile_inputs.py --src /tmp/before/src

Cases: YAML string-alias bombs (57 KB and 970 KB, plus ``--random`` bombs of
random shape), a kit MANIFEST.json with 10^6 entries (verify and inspect), a
payload named ``.wh.x``, rendered run.sh under dash on the fake platform with
unreadable tables (UTF-16, 17 MB, nested), ``RANK_TABLE_TIMEOUT=30m`` and IPv6
scope ids carrying shell text, ``render --out CAT --catalog CAT --force``,
``--target`` URLs with userinfo, a ``--set`` newline and a FIFO layout.yaml.
The expectation after issue 23: every row exit 2 (1 for run.sh), one line, no
traceback, well under a second or two and a few tens of MB, nothing written.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))


@dataclass
class Row:
    case: str
    rc: int | None
    lines: int
    traceback: bool
    seconds: float
    rss_mib: float
    written_mib: float
    note: str = ""


def run(
    argv: list[str], src: Path, limit_mib: int, timeout: float, env: dict[str, str] | None = None
) -> tuple[int | None, str, str, float, float]:
    """(rc, stdout, stderr, seconds, the child's own peak RSS in MiB) under the limits."""
    full = {**os.environ, "PYTHONPATH": str(src), "COLUMNS": "200", **(env or {})}

    def limit() -> None:
        cap = limit_mib << 20
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.monotonic()
        # Through /usr/bin/time: a child forked from this (large) process would count
        # this process's pages in its peak RSS; time's own child starts small.
        proc = subprocess.Popen(
            ["/usr/bin/time", "-f", "MAXRSS_KB %M", *argv], env=full, stdout=out, stderr=err, preexec_fn=limit,  # noqa: PLW1509 (one thread)
            start_new_session=True,
            cwd=src.parent,
        )  # fmt: skip
        rc: int | None = None
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
        seconds = time.monotonic() - start
        out.seek(0)
        err.seek(0)
        text = err.read().decode(errors="replace")
        lines = text.splitlines()
        rss = float("nan")  # killed at the time limit: time had no chance to say
        if lines and lines[-1].startswith("MAXRSS_KB "):
            rss = int(lines[-1].split()[1]) / 1024
            lines = [x for x in lines[:-1] if not x.startswith("Command exited with non-zero")]
        return rc, out.read().decode(errors="replace"), "\n".join(lines), seconds, rss


def size_mib(path: Path) -> float:
    if not path.exists():
        return 0.0
    if path.is_file():
        return path.stat().st_size / 2**20
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 2**20


def servekit(src: Path) -> list[str]:
    return [sys.executable, "-m", "servekit"]


def bomb_catalog(top: Path, chars: int, aliases: int) -> Path:
    base = (ROOT / "layouts" / "local" / "single" / "layout.yaml").read_text()
    env = ", ".join(f"V{i}: *s" for i in range(aliases))
    text = base.replace(
        "engines:\n  - {name: engine,",
        f'x-s: &s "{"a" * chars}"\nengines:\n  - {{env: {{{env}}}, name: engine,',
    )
    folder = top / "local" / "single"
    folder.mkdir(parents=True)
    (folder / "layout.yaml").write_text(text)
    return top


def row(case: str, result: tuple[int | None, str, str, float, float], written: float,
        note: str = "") -> Row:  # fmt: skip
    rc, _, err, seconds, rss = result
    lines = len([x for x in err.strip().splitlines() if not x.startswith("ERROR: ld.so")])
    return Row(case, rc, lines, "Traceback" in err, seconds, rss, written, note)


def yaml_cases(src: Path, work: Path, a: argparse.Namespace) -> list[Row]:
    rows = []
    for label, chars, aliases in (("57 KB", 50_000, 2_000), ("970 KB", 500_000, 40_000)):
        cat = bomb_catalog(work / f"bomb-{chars}", chars, aliases)
        size = (cat / "local/single/layout.yaml").stat().st_size // 1024
        got = run([*servekit(src), "layouts", "check", "--catalog", str(cat)], src, a.memory_mib,
                  a.timeout)  # fmt: skip
        rows.append(row(f"yaml bomb {label} ({size} KiB): layouts check", got, 0.0))
        out = work / f"out-{chars}"
        got = run([*servekit(src), "render", "local/single", "--target", "nodes", "--out",
                   str(out), "--catalog", str(cat)], src, a.memory_mib, a.timeout)  # fmt: skip
        rows.append(row(f"yaml bomb {label}: render", got, size_mib(out)))
    rng = random.Random(23)
    refused = accepted = bad = 0
    worst = 0.0
    for i in range(a.random):
        width, fanout, levels = rng.randint(1, 60_000), rng.randint(2, 60), rng.randint(1, 3)
        lines = [f'a0: &a0 "{"x" * width}"']
        lines += [
            f"a{n}: &a{n} [{', '.join([f'*a{n - 1}'] * fanout)}]" for n in range(1, levels + 1)
        ]
        path = work / f"random-{i}.yaml"
        path.write_text("\n".join(lines) + "\n")
        code = (
            "import sys; from servekit import safeyaml; from servekit.errors import UsageError\n"
            "try: safeyaml.load_file(__import__('pathlib').Path(sys.argv[1]))\n"
            "except UsageError as e: print(e, file=sys.stderr); sys.exit(2)\n"
        )
        rc, _, err, seconds, _ = run([sys.executable, "-c", code, str(path)], src, a.memory_mib,
                                     a.timeout)  # fmt: skip
        worst = max(worst, seconds)
        expanded = width * fanout**levels
        if rc == 2 and "Traceback" not in err:
            refused += 1
        elif rc == 0 and expanded <= 1 << 20:
            accepted += 1
        else:
            bad += 1
    rows.append(Row(f"{a.random} random yaml bombs: refused/accepted/wrong", None, 0, False,
                    worst, 0.0, 0.0, f"{refused}/{accepted}/{bad}"))  # fmt: skip
    return rows


def kit_cases(src: Path, work: Path, a: argparse.Namespace) -> list[Row]:
    import kit_fuzz_cases as cases

    from servekit.kit.kitarchive import pack, write_sidecar
    from servekit.kit.kitdir import open_kit
    from servekit.kit.streams import Limits

    fixture = cases.make_fixture(work / "kitfix")
    with open_kit(fixture.kit, Limits()) as kit:
        folder = work / "bigkit" / kit.root.name
        shutil.copytree(kit.root, folder)
    data = json.loads((folder / "MANIFEST.json").read_text())
    one = data["payload"][0]
    data["payload"] = [{**one, "path": f"/opt/f{i:07d}"} for i in range(a.manifest_entries)]
    (folder / "MANIFEST.json").write_text(json.dumps(data))
    archive = work / "bigkit.tar.zst"
    with archive.open("wb") as fh:
        pack(folder, folder.name, fh)
    write_sidecar(archive)
    mib = (folder / "MANIFEST.json").stat().st_size / 2**20
    rows = []
    for cmd in ("verify", "inspect"):
        got = run([*servekit(src), "kit", cmd, str(archive)], src, a.memory_mib, a.timeout)
        rows.append(row(f"kit MANIFEST {a.manifest_entries} entries ({mib:.0f} MiB): kit {cmd}",
                        got, 0.0))  # fmt: skip
    project = work / "whproject"
    project.mkdir()
    (project / "x").write_text("x")
    spec = project / "kit.yaml"
    spec.write_text('files: [{src: x, dest: "/etc/.wh.passwd"}]\n')
    out = work / "wh.tar.zst"
    got = run([*servekit(src), "kit", "build", "--base", str(fixture.base), "--payload",
               str(spec), "--out", str(out)], src, a.memory_mib, a.timeout)  # fmt: skip
    rows.append(row("kit build: payload named /etc/.wh.passwd", got, size_mib(out)))
    return rows


def runsh_cases(src: Path, work: Path, a: argparse.Namespace) -> list[Row]:
    from servekit.catalog.loader import load
    from servekit.importer.platform.harness import create_platform, run_node
    from servekit.render.plan import build_plan
    from servekit.render.shell import write_rendering

    rows = []
    script = work / "script"
    got = run([*servekit(src), "render", "a3/1p1d", "--out", str(script)], src, a.memory_mib,
              a.timeout)  # fmt: skip
    if got[0] != 0:
        write_rendering(build_plan(load("a3/1p1d").layout), script, "modelarts")
    entry = script / "run.sh"

    def table(
        name: str,
        data: bytes | None,
        env: dict[str, str],
        note: str = "",
        status: str = "completed",
    ) -> None:
        platform = create_platform(work / f"platform-{len(rows)}", 2, status=status)
        if data is not None:
            platform.rank_table.write_bytes(data)
        tmp = work / f"tmp-{len(rows)}"
        tmp.mkdir()
        start = time.monotonic()
        nrun = run_node(platform, 0, entry, extra_env={"TMPDIR": str(tmp), **env},
                        timeout=a.timeout)  # fmt: skip
        seconds = time.monotonic() - start
        err = [x for x in nrun.stderr.strip().splitlines() if not x.startswith("ERROR: ld.so")]
        waits = nrun.stdout.count("waiting for")
        rows.append(Row(name, nrun.returncode, len(err), "Traceback" in nrun.stderr, seconds,
                        0.0, 0.0, note or f"{waits} 'waiting' lines"))  # fmt: skip

    good = json.loads(create_platform(work / "platform-good", 2).rank_table.read_text())
    raw = json.dumps(good).encode()
    wait = {"RANK_TABLE_TIMEOUT": "1800", "RANK_TABLE_INTERVAL": "1"}
    table("run.sh: UTF-16 rank table", raw.decode().encode("utf-16"), wait)
    table("run.sh: 17 MB rank table", raw[:-1] + b', "p": "' + b"x" * (17 << 20) + b'"}', wait)
    table("run.sh: nested rank table", b'{"a":' * 200_000 + b"1" + b"}" * 200_000, wait)
    table("run.sh: RANK_TABLE_TIMEOUT=30m", None, {"RANK_TABLE_TIMEOUT": "30m"}, "",
          "initializing")  # fmt: skip
    canary = work / "PWNED"
    scopes = ["$(touch${IFS}" + str(canary) + ")", "`touch " + str(canary) + "`", "x 6.6.6.6",
              "a b", "x\ny"]  # fmt: skip
    for scope in scopes:
        doc = json.loads(raw)
        doc["server_group_list"][1]["server_list"][0]["server_ip"] = f"fe80::1%{scope}"
        table(f"run.sh: scope id {scope[:14]!r}", json.dumps(doc).encode(),
              {"DRY_RUN": "1", "NODE_NIC": "fakenic0"},
              f"ran: {canary.exists()}")  # fmt: skip
    return rows


def misc_cases(src: Path, work: Path, a: argparse.Namespace) -> list[Row]:
    rows = []
    cat = work / "cat"
    shutil.copytree(ROOT / "layouts" / "local", cat / "local")
    before = len(list(cat.glob("*/*/layout.yaml")))
    got = run([*servekit(src), "render", "local/single", "--target", "nodes", "--out", str(cat),
               "--catalog", str(cat), "--force"], src, a.memory_mib, a.timeout)  # fmt: skip
    after = len(list(cat.glob("*/*/layout.yaml")))
    rows.append(row("render --out CAT --catalog CAT --force", got, 0.0,
                    f"layouts {before} -> {after}"))  # fmt: skip
    out = work / "dep.json"
    got = run([*servekit(src), "deployment", "local/single", "--nodes", "127.0.0.1", "--out",
               str(out), "--entry", "http://admin:hunter2@127.0.0.1:8000"], src, a.memory_mib,
              a.timeout)  # fmt: skip
    leaked = out.is_file() and "hunter2" in out.read_text()
    rows.append(row("deployment --entry http://user:pass@...", got, size_mib(out),
                    f"password in deployment.json: {leaked}"))  # fmt: skip
    out = work / "set-out"
    got = run([*servekit(src), "render", "local/single", "--target", "nodes", "--out", str(out),
               "--set", "model.served_name=a\nb"], src, a.memory_mib, a.timeout)  # fmt: skip
    rows.append(row("render --set with a newline", got, size_mib(out)))
    fifo_cat = work / "fifo-cat"
    shutil.copytree(ROOT / "layouts" / "local", fifo_cat / "local")
    (fifo_cat / "local" / "piped").mkdir()
    os.mkfifo(fifo_cat / "local" / "piped" / "layout.yaml")
    got = run([*servekit(src), "layouts", "list", "--catalog", str(fifo_cat)], src,
              a.memory_mib, a.timeout)  # fmt: skip
    rows.append(row("layouts list with a FIFO layout.yaml", got, 0.0,
                    f"listed: {'piped' in got[1]}"))  # fmt: skip
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--src", type=Path, default=ROOT / "src", help="servekit source tree to run")
    ap.add_argument("--memory-mib", type=int, default=4096)
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--random", type=int, default=20, help="random YAML bombs")
    ap.add_argument("--manifest-entries", type=int, default=1_000_000)
    ap.add_argument("--only", choices=("yaml", "kit", "runsh", "misc"), action="append")
    a = ap.parse_args()
    groups = {"yaml": yaml_cases, "kit": kit_cases, "runsh": runsh_cases, "misc": misc_cases}
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="servekit-hostile-") as tmp:
        for name, group in groups.items():
            if a.only and name not in a.only:
                continue
            rows += group(a.src.resolve(), Path(tmp) / name, a)
    print(f"source: {a.src}  limits: {a.memory_mib} MiB address space, {a.timeout:g} s")
    print(
        "| case | exit | stderr lines | traceback | seconds | peak RSS MiB | written MiB | note |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        rc = "timeout" if r.rc is None and r.seconds >= a.timeout else r.rc
        print(f"| {r.case} | {rc if rc is not None else '-'} | {r.lines} | {r.traceback} | "
              f"{r.seconds:.2f} | {r.rss_mib:.0f} | {r.written_mib:.1f} | {r.note} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
