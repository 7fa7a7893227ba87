"""Fuzz campaign: damage a real small kit thousands of ways; kit commands must never crash or hang.

Builds a kit from a payload spec (``kit_fuzz_cases.make_fixture``), then runs

- single-byte flips of the compressed ``.tar.zst`` (a forged, i.e. recomputed,
  sidecar each time, so only the content checks can notice),
- single-byte flips of the decompressed tar stream, recompressed with a
  checksum and a forged sidecar (headers, member content, padding, the end),
- the structured mutations of ``kit_fuzz_cases.MUTATIONS`` plus truncations,

each through ``kit verify``, ``kit inspect`` and ``kit rebuild`` (onto the real
base) in worker processes under an address-space limit (``--memory-mib``) and a
per-case time limit (``--timeout``). A worker that overruns is killed and the
case counts as a hang; any exception other than servekit's one-line refusal
counts as a traceback. Prints counts: tracebacks, hangs, detected, undetected,
per region for the flips and per case for the structured mutations.

    .venv/bin/python benchmarks/kit_fuzz.py --flips-zst 1000 --flips-tar 3000

Goal (issue 13): 0 tracebacks, 0 hangs, every flip detected (undetected = 0).
Flip positions: half uniform over the bytes, half uniform over the regions, so
small regions (padding, the checksum) are hit often.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import kit_fuzz_cases as cases

from servekit.errors import UsageError
from servekit.kit.kitarchive import write_sidecar
from servekit.kit.options import KitRebuildOptions, KitVerifyOptions
from servekit.kit.rebuild import rebuild_kit
from servekit.kit.streams import Limits
from servekit.kit.verify import verify_kit

# ---------------------------------------------------------------- worker side


def _mutated(fx: cases.Fixture, job: dict[str, Any]) -> bytes:
    if job["kind"] == "clean":  # the positive control: the kit as built
        return fx.data
    if job["kind"] == "zst":
        data = bytearray(fx.data)
        data[job["offset"]] ^= job["xor"]
        return bytes(data)
    if job["kind"] == "tar":
        tar = bytearray(fx.tar)
        tar[job["offset"]] ^= job["xor"]
        return cases.compress(bytes(tar))
    mutations = cases.MUTATIONS | cases.truncations(fx, job["cuts"])
    return mutations[job["name"]](fx)


def _run(fx: cases.Fixture, job: dict[str, Any], scratch: Path) -> dict[str, Any]:
    """One case through verify, inspect and rebuild; what happened."""
    from servekit.kit.inspector import inspect_kit

    archive = scratch / "case.tar.zst"
    archive.write_bytes(_mutated(fx, job))
    write_sidecar(archive)
    limits = Limits(max_total=1 << 30)
    out: dict[str, Any] = {"id": job["id"]}
    try:
        report = verify_kit(KitVerifyOptions(archive=archive, max_size=limits.max_total))
        out["verify"] = "detected" if not report.ok else "undetected"
        out["failed_rows"] = [c.name for c in report.checks if c.status == "fail"]
    except UsageError:
        out["verify"] = "detected"
        out["failed_rows"] = ["exit 2"]
    for name, call in (
        ("inspect", lambda: inspect_kit(archive, limits)),
        (
            "rebuild",
            lambda: rebuild_kit(
                KitRebuildOptions(
                    kit=archive, base=str(fx.base), out=scratch / "out", max_size=limits.max_total
                )
            ),
        ),
    ):
        if name == "rebuild" and not job.get("rebuild", True):
            continue
        try:
            call()
            out[name] = "undetected"  # it accepted the kit: a damaged one should be refused
        except UsageError:
            out[name] = "detected"
        shutil.rmtree(scratch / "out", ignore_errors=True)
    return out


def worker(fixture_dir: Path, memory_mib: int) -> None:
    """Read jobs (JSON lines) on stdin, answer each on stdout."""
    limit = memory_mib << 20
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    fx = cases.Fixture(
        fixture_dir,
        fixture_dir / "fuzzkit.tar.zst",
        fixture_dir / "base",
        (fixture_dir / "fuzzkit.tar.zst").read_bytes(),
        cases.decompress((fixture_dir / "fuzzkit.tar.zst").read_bytes()),
    )
    scratch = Path(tempfile.mkdtemp(prefix="kitfuzz-"))
    try:
        for line in sys.stdin:
            job = json.loads(line)
            try:
                result = _run(fx, job, scratch)
            except BaseException as exc:  # the finding this campaign is after
                if isinstance(exc, KeyboardInterrupt):
                    raise
                tb = traceback.extract_tb(exc.__traceback__)[-1]
                where = f"{Path(tb.filename).name}:{tb.lineno}"
                result = {
                    "id": job["id"],
                    "traceback": f"{type(exc).__name__} at {where}: {exc}"[:300],
                }
            print(json.dumps(result), flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


# ---------------------------------------------------------------- driver side

OUTCOMES = ("traceback", "hang", "detected", "undetected")
COMMANDS = ("verify", "inspect", "rebuild")


@dataclass
class Tally:
    """Counts per outcome, per region or case."""

    total: collections.Counter[str] = field(default_factory=collections.Counter)
    by_group: dict[str, collections.Counter[str]] = field(default_factory=dict)
    examples: dict[str, str] = field(default_factory=dict)
    commands: dict[str, collections.Counter[str]] = field(default_factory=dict)

    def add(self, group: str, outcome: str, example: str = "") -> None:
        self.total[outcome] += 1
        self.by_group.setdefault(group, collections.Counter())[outcome] += 1
        if example and outcome in ("traceback", "hang", "undetected"):
            self.examples.setdefault(f"{outcome}: {group}", example)

    def add_commands(self, group: str, result: dict[str, Any], example: str) -> None:
        """Each command's own verdict (verify, inspect, rebuild when it ran)."""
        for command in COMMANDS:
            verdict = result.get(command)
            if verdict is None:
                continue
            self.commands.setdefault(command, collections.Counter())[verdict] += 1
            if verdict == "undetected" and command != "verify":
                self.examples.setdefault(f"{command} accepted: {group}", example)


class Pool:
    """Worker processes fed one job at a time, each under a time limit."""

    def __init__(self, size: int, argv: list[str], timeout: float) -> None:
        self.argv, self.timeout = argv, timeout
        self.procs = [self._start() for _ in range(size)]

    def _start(self) -> subprocess.Popen[str]:
        return subprocess.Popen(
            self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1
        )

    def run(self, jobs: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
        import selectors

        results: dict[int, dict[str, Any]] = {}
        queue = list(reversed(jobs))
        busy: dict[int, tuple[dict[str, Any], float]] = {}
        sel = selectors.DefaultSelector()
        for i, proc in enumerate(self.procs):
            sel.register(proc.stdout, selectors.EVENT_READ, i)  # type: ignore[arg-type]
        while queue or busy:
            for i, proc in enumerate(self.procs):
                if i not in busy and queue:
                    job = queue.pop()
                    proc.stdin.write(json.dumps(job) + "\n")  # type: ignore[union-attr]
                    proc.stdin.flush()  # type: ignore[union-attr]
                    busy[i] = (job, time.monotonic())
            for key, _ in sel.select(timeout=0.5):
                i = key.data
                line = self.procs[i].stdout.readline()  # type: ignore[union-attr]
                job, _ = busy.pop(i)
                if line:
                    results[job["id"]] = json.loads(line)
                else:  # the worker died (memory limit hit outside Python, or a crash)
                    results[job["id"]] = {"id": job["id"], "traceback": "worker died"}
                    self._replace(sel, i)
            now = time.monotonic()
            for i, (job, started) in list(busy.items()):
                if now - started > self.timeout:
                    results[job["id"]] = {"id": job["id"], "hang": True}
                    busy.pop(i)
                    self._replace(sel, i)
        return results

    def _replace(self, sel: Any, i: int) -> None:
        old = self.procs[i]
        sel.unregister(old.stdout)
        old.kill()
        old.wait()
        self.procs[i] = self._start()
        sel.register(self.procs[i].stdout, 1, i)

    def close(self) -> None:
        for proc in self.procs:
            proc.stdin.close()  # type: ignore[union-attr]
            proc.wait(timeout=60)


def _flip_jobs(
    kind: str, size: int, regions: list[tuple[int, int, str]], count: int, rng: random.Random
) -> list[dict[str, Any]]:
    jobs = []
    for n in range(count):
        if n % 2:
            start, end, _ = rng.choice(regions)
            offset = rng.randrange(start, end)
        else:
            offset = rng.randrange(size)
        jobs.append({"kind": kind, "offset": offset, "xor": rng.randrange(1, 256)})
    return jobs


def _outcome(result: dict[str, Any]) -> str:
    if result.get("hang"):
        return "hang"
    if "traceback" in result:
        return "traceback"
    return str(result["verify"])


def _report(tallies: dict[str, Any], args: argparse.Namespace, seconds: float) -> dict[str, Any]:
    return {
        "command": "benchmarks/kit_fuzz.py " + " ".join(sys.argv[1:]),
        "seconds": round(seconds, 1),
        "limits": {"timeout_s": args.timeout, "memory_mib": args.memory_mib},
        "positive_control": tallies["positive control"],
        "totals": {
            name: {k: t.total.get(k, 0) for k in OUTCOMES} | {"cases": sum(t.total.values())}
            for name, t in tallies.items()
            if isinstance(t, Tally)
        },
        "by_command": {
            name: {c: dict(sorted(v.items())) for c, v in t.commands.items()}
            for name, t in tallies.items()
            if isinstance(t, Tally)
        },
        "by_region": {
            name: {g: dict(sorted(c.items())) for g, c in sorted(t.by_group.items())}
            for name, t in tallies.items()
            if isinstance(t, Tally) and name != "structured"
        },
        "structured_not_detected": {
            g: dict(c) for g, c in tallies["structured"].by_group.items() if set(c) - {"detected"}
        },
        "examples": dict(
            list(
                {
                    k: v
                    for t in tallies.values()
                    if isinstance(t, Tally)
                    for k, v in t.examples.items()
                }.items()
            )[:20]
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--flips-zst", type=int, default=1000)
    parser.add_argument("--flips-tar", type=int, default=3000)
    parser.add_argument("--cuts", type=int, default=20, help="truncation points per stream")
    parser.add_argument("--rebuild-every", type=int, default=10, help="rebuild on every Nth flip")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per case")
    parser.add_argument("--memory-mib", type=int, default=1024, help="address space per worker")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.memory_mib)
        return
    start = time.monotonic()
    top = Path(tempfile.mkdtemp(prefix="kitfuzz-fixture-"))
    try:
        fx = cases.make_fixture(top / "fx")
        report = campaign(fx, args)
    finally:
        shutil.rmtree(top, ignore_errors=True)
    print(json.dumps(_report(report, args, time.monotonic() - start), indent=2))
    if report["positive control"] != CLEAN_OK:
        sys.exit(1)


CLEAN_OK = {"verify": "passed", "inspect": "accepted", "rebuild": "accepted"}


def positive_control(pool: Pool) -> dict[str, str]:
    """The undamaged kit through the same worker: verify, inspect and rebuild must accept it.

    Without it, a verify that refused everything would read as 100% detected.
    """
    result = pool.run([{"id": -1, "kind": "clean", "rebuild": True}])[-1]
    if "traceback" in result or result.get("hang"):
        return {"verify": "traceback" if "traceback" in result else "hang"}
    seen = {c: result.get(c, "not run") for c in COMMANDS}
    words = {"undetected": "accepted", "detected": "refused"}
    return {
        "verify": "passed" if seen["verify"] == "undetected" else "failed",
        "inspect": words.get(seen["inspect"], seen["inspect"]),
        "rebuild": words.get(seen["rebuild"], seen["rebuild"]),
    }


def campaign(fx: cases.Fixture, args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(args.seed)
    zst_regions, tar_regions = cases.zst_regions(fx.data), cases.tar_regions(fx.tar)
    jobs = _flip_jobs("zst", len(fx.data), zst_regions, args.flips_zst, rng)
    jobs += _flip_jobs("tar", len(fx.tar), tar_regions, args.flips_tar, rng)
    names = list(cases.MUTATIONS | cases.truncations(fx, args.cuts))
    jobs += [{"kind": "structured", "name": n, "cuts": args.cuts} for n in names]
    for i, job in enumerate(jobs):
        job["id"] = i
        job["rebuild"] = job["kind"] == "structured" or i % args.rebuild_every == 0
    argv = [sys.executable, __file__, "--worker", str(fx.dir), "--memory-mib", str(args.memory_mib)]
    pool = Pool(args.workers, argv, args.timeout)
    tallies: dict[str, Any] = {"zst flips": Tally(), "tar flips": Tally(), "structured": Tally()}
    try:
        tallies["positive control"] = control = positive_control(pool)
        if control != CLEAN_OK:
            print(f"positive control failed: the undamaged kit gave {control}", file=sys.stderr)
            return tallies | {"zst flips": Tally(), "tar flips": Tally(), "structured": Tally()}
        results = pool.run(jobs)
    finally:
        pool.close()
    for job in jobs:
        result = results[job["id"]]
        example = json.dumps(job | {k: v for k, v in result.items() if k != "id"})
        if job["kind"] == "structured":
            group, tally = job["name"], tallies["structured"]
        else:
            regions = zst_regions if job["kind"] == "zst" else tar_regions
            group = cases.region_of(regions, job["offset"])
            tally = tallies[f"{job['kind']} flips"]
        tally.add(group, _outcome(result), example)
        tally.add_commands(group, result, example)
    return tallies


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
