#!/usr/bin/env python3
"""Where the test suite's time goes: per file and per test, from a junit report.

Runs pytest (any arguments after ``--`` are passed on) with a junit report, then sums
each test's time (setup + call + teardown, so a module-scoped engine start is charged
to the first test that asks for it) by file and prints the slowest files and tests.
``--from report.xml`` reads a report an earlier run wrote instead of running pytest.

    scripts/test_times.py -- -m "not vllm and not tools"
    scripts/test_times.py --top 40 -- tests/local
    scripts/test_times.py --from runs/junit.xml

Figures are wall-clock times on whatever machine ran them: on a shared, busy machine
they are noisy, so compare files against each other rather than against a budget.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LIVE_ENV = "TEST_TIMES_LIVE"


def pytest_runtest_logreport(report: Any) -> None:
    """As a pytest plugin (``-p test_times``): each phase's time appended as it ends.

    A long run killed before its end still leaves what it measured in that file.
    """
    live = os.environ.get(LIVE_ENV)
    if live and not os.environ.get("PYTEST_XDIST_WORKER"):  # xdist's controller logs them all
        with open(live, "a", encoding="utf-8") as out:
            out.write(f"{report.duration:.3f}\t{report.when}\t{report.outcome}\t{report.nodeid}\n")


@dataclass(frozen=True)
class Case:
    """One test case as the junit report recorded it."""

    file: str
    test_id: str
    seconds: float
    outcome: str


def read_live(path: Path) -> list[Case]:
    """The test cases of a live log (setup, call and teardown summed per test)."""
    seconds: dict[str, float] = defaultdict(float)
    outcome: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        duration, when, result, nodeid = line.split("\t", 3)
        nodeid = nodeid.split("@", 1)[0]  # pytest-xdist's loadgroup suffix
        seconds[nodeid] += float(duration)
        if when == "call" or result != "passed":
            outcome[nodeid] = result
    return [Case(n.split("::", 1)[0], n, s, outcome.get(n, "passed")) for n, s in seconds.items()]


def read_report(path: Path) -> list[Case]:
    """The test cases of a junit report (xunit1 carries each case's file)."""
    cases: list[Case] = []
    for case in ET.parse(path).getroot().iter("testcase"):
        file = case.get("file") or case.get("classname", "?").replace(".", "/") + ".py"
        name = case.get("name", "?").split("@", 1)[0]  # pytest-xdist's loadgroup suffix
        classname = case.get("classname", "")
        # classname is the dotted module path plus any class: keep the class in the id.
        module = file.removesuffix(".py").replace("/", ".")
        inner = classname.removeprefix(module).lstrip(".")
        test_id = f"{file}::{inner}::{name}" if inner else f"{file}::{name}"
        outcome = "passed"
        for tag in ("failure", "error", "skipped"):
            if case.find(tag) is not None:
                outcome = tag
                break
        cases.append(Case(file, test_id, float(case.get("time", "0")), outcome))
    return cases


def summary(cases: list[Case], top: int) -> str:
    """The slowest files and tests, with totals, as plain text."""
    by_file: dict[str, list[Case]] = defaultdict(list)
    for case in cases:
        by_file[case.file].append(case)
    total = sum(c.seconds for c in cases)
    lines = [f"{len(cases)} tests, {total:.1f} s summed over tests ({total / 60:.1f} min)", ""]
    lines.append(f"slowest {top} files (seconds, tests, share of total):")
    files = sorted(by_file.items(), key=lambda kv: -sum(c.seconds for c in kv[1]))
    for file, group in files[:top]:
        seconds = sum(c.seconds for c in group)
        share = 100 * seconds / total if total else 0.0
        lines.append(f"{seconds:9.1f}  {len(group):4d}  {share:5.1f}%  {file}")
    lines.append("")
    lines.append(f"slowest {top} tests (seconds, outcome):")
    for case in sorted(cases, key=lambda c: -c.seconds)[:top]:
        lines.append(f"{case.seconds:9.1f}  {case.outcome:7s}  {case.test_id}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=30, help="how many files and tests to list")
    parser.add_argument(
        "--from", dest="reports", type=Path, nargs="+", help="read these junit reports"
    )
    parser.add_argument(
        "--live", type=Path, help="also log each test's time to this file as it ends"
    )
    parser.add_argument("--keep", type=Path, help="write the junit report here (kept)")
    parser.add_argument("pytest_args", nargs="*", help="passed on to pytest (after --)")
    args = parser.parse_args(argv)
    rc = 0
    if args.reports is None:
        report = args.keep or Path(tempfile.mkdtemp(prefix="test-times-")) / "junit.xml"
        env = dict(os.environ)
        plugin: list[str] = []
        if args.live is not None:
            env[LIVE_ENV] = str(args.live.resolve())
            here = str(Path(__file__).resolve().parent)
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [here, env.get("PYTHONPATH")]))
            plugin = ["-p", "test_times"]
        cmd = [
            sys.executable,
            "-m",
            "pytest",
            f"--junitxml={report}",
            "-o",
            "junit_family=xunit1",
            *plugin,
            *args.pytest_args,
        ]
        print("+", " ".join(cmd), flush=True)
        rc = subprocess.call(cmd, env=env)
        reports = [report]
    else:
        reports = args.reports
    cases: list[Case] = []
    for path in reports:
        if not path.is_file():
            print(f"test_times: no report at {path}", file=sys.stderr)
            continue
        cases += read_live(path) if path.suffix != ".xml" else read_report(path)
    if not cases:
        return rc or 2
    print(summary(cases, args.top))
    return rc


if __name__ == "__main__":
    sys.exit(main())
