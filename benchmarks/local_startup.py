"""Start-up time and peak memory of local runs on real vLLM (CPU).

For each layout: build the tiny model in a temporary project, time
``servekit up LAYOUT --detach --free-ports`` from the command's start until it
returns ready, sample the resident memory of every process of the run (engine
cores and workers included) every 0.2 s (summed RSS, which counts shared pages
once per process, and summed PSS, which shares them out), then ``servekit down``. Prints one row
per layout; ``--json FILE`` keeps the figures.

``--compiled`` also runs each layout with its engines' ``enforce_eager`` turned
off (torch.compile on, vLLM's default), from a copy of the catalog, so the cost
of the compile the defaults table turns off is measured beside it in one run.

    .venv/bin/python benchmarks/local_startup.py [--layouts local/single local/1p1d] [--compiled]

Figures depend on the machine and its load; report them with ``nproc`` and
``uptime`` taken at the same time (the script prints both).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import yaml

from servekit.catalog.loader import packaged_catalog
from servekit.local import proctree
from servekit.local.state import read_state
from servekit.local.tinymodel import build_tiny_model

SAMPLE_S = 0.2


@dataclass
class Result:
    layout: str
    processes: int
    up_to_ready_s: float
    supervisor_ready_s: float | None
    peak_rss_mib: float
    peak_pss_mib: float
    sum_hwm_mib: float


def _kib(pid: int, field: str, source: str = "status") -> int:
    try:
        for line in Path(f"/proc/{pid}/{source}").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


class MemorySampler(threading.Thread):
    """Peak of the summed RSS of a run's processes, and each process's high-water mark."""

    def __init__(self, state_path: Path) -> None:
        super().__init__(daemon=True)
        self.state_path = state_path
        self.stop = threading.Event()
        self.peak_kib = 0
        self.peak_pss_kib = 0
        self.hwm_kib: dict[int, int] = {}

    def run(self) -> None:
        while not self.stop.is_set():
            state = read_state(self.state_path)
            if state is not None:
                roots = {p.pid for p in state.processes if p.pid is not None}
                pids = proctree.members(roots) if roots else set()
                self.peak_kib = max(self.peak_kib, sum(_kib(p, "VmRSS") for p in pids))
                pss = sum(_kib(p, "Pss", "smaps_rollup") for p in pids)
                self.peak_pss_kib = max(self.peak_pss_kib, pss)
                for pid in pids:
                    self.hwm_kib[pid] = max(self.hwm_kib.get(pid, 0), _kib(pid, "VmHWM"))
            time.sleep(SAMPLE_S)


def compiled_catalog(layouts: list[str], folder: Path) -> Path:
    """A catalog of ``layouts`` with every engine's enforce_eager off (torch.compile on)."""
    for layout in layouts:
        data = yaml.safe_load((packaged_catalog() / layout / "layout.yaml").read_text())
        for engine in data["engines"]:
            engine["settings"] = {**engine.get("settings", {}), "enforce_eager": False}
        (folder / layout).mkdir(parents=True)
        (folder / layout / "layout.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    return folder


def measure(layout: str, root: Path, catalog: Path | None = None, label: str = "") -> Result:
    # a fresh vLLM cache per benchmark run, as on a fresh CI machine: compiled runs
    # pay the compile a first start pays
    env = {
        **os.environ,
        "SERVEKIT_RUNS": str(root / "runs"),
        "VLLM_CACHE_ROOT": str(root / "vllm-cache"),
    }
    if catalog is not None:
        env["SERVEKIT_CATALOG"] = str(catalog)
    run_dir = root / "runs" / layout.replace("/", "__")
    sampler = MemorySampler(run_dir / "state.json")
    sampler.start()
    t0 = time.perf_counter()
    cmd = [sys.executable, "-m", "servekit", "up", layout, "--detach", "--free-ports"]
    up = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - t0
    time.sleep(2.0)  # a few samples after ready
    sampler.stop.set()
    sampler.join()
    state = read_state(run_dir / "state.json")
    subprocess.run(
        [sys.executable, "-m", "servekit", "down", layout], cwd=root, env=env, check=False
    )
    if up.returncode != 0:
        raise SystemExit(f"servekit up {layout} failed:\n{up.stderr[-3000:]}")
    ready = state.ready_at - state.started_at if state and state.ready_at else None
    return Result(
        layout=layout + label,
        processes=len(state.processes) if state else 0,
        up_to_ready_s=round(elapsed, 1),
        supervisor_ready_s=round(ready, 1) if ready is not None else None,
        peak_rss_mib=round(sampler.peak_kib / 1024, 1),
        peak_pss_mib=round(sampler.peak_pss_kib / 1024, 1),
        sum_hwm_mib=round(sum(sampler.hwm_kib.values()) / 1024, 1),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layouts", nargs="+", default=["local/single", "local/1p1d"])
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument(
        "--compiled", action="store_true", help="also run each with torch.compile on"
    )
    args = parser.parse_args()
    print(f"nproc={os.cpu_count()} load={os.getloadavg()}", flush=True)
    results = []
    with tempfile.TemporaryDirectory(prefix="servekit-bench-") as tmp:
        root = Path(tmp)
        build_tiny_model(root / ".servekit/models/tiny")
        compiled = compiled_catalog(args.layouts, root / "compiled") if args.compiled else None
        for layout in args.layouts:
            results.append(measure(layout, root))
            print(json.dumps(asdict(results[-1])), flush=True)
            if compiled is not None:
                results.append(measure(layout, root, compiled, " (compiled)"))
                print(json.dumps(asdict(results[-1])), flush=True)
    print(f"load after={os.getloadavg()}")
    header = f"{'layout':<26}{'procs':>6}{'up->ready s':>13}{'supervisor s':>14}{'peak RSS MiB':>14}{'peak PSS MiB':>14}{'sum HWM MiB':>13}"
    print(header)
    for r in results:
        sup = "-" if r.supervisor_ready_s is None else f"{r.supervisor_ready_s:.1f}"
        print(
            f"{r.layout:<26}{r.processes:>6}{r.up_to_ready_s:>13.1f}{sup:>14}"
            f"{r.peak_rss_mib:>14.1f}{r.peak_pss_mib:>14.1f}{r.sum_hwm_mib:>13.1f}"
        )
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=2) + "\n")


if __name__ == "__main__":
    main()
