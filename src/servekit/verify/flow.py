"""One verify run going through its steps: up (or attach), accept, bench, kit, down.

Each step records its outcome in :class:`~servekit.verify.steps.Steps` and
writes its result file into the run folder; the flow object keeps what later
steps and the report need. Bad input at start-up (a UsageError from the
runner) propagates, so the command exits 2 after teardown.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from servekit.accept.models import AcceptResult, write_result
from servekit.bench.schema import BenchResult, Point
from servekit.catalog.loader import LoadedLayout
from servekit.deployment import Deployment
from servekit.errors import UsageError
from servekit.fsutil import atomic_write_text
from servekit.report.models import Files, KitCheck
from servekit.verify.components import Components
from servekit.verify.options import VerifyOptions
from servekit.verify.steps import StepFailed, Steps, one_line
from servekit.verify.workloads import contexts_for, settings_for, workloads_for


@dataclass
class Flow:
    """The state of one run while it goes through its steps."""

    opts: VerifyOptions
    loaded: LoadedLayout
    parts: Components
    run_dir: Path
    steps: Steps
    deployment: Deployment | None = None
    started_here: bool = False
    accept: AcceptResult | None = None
    bench: BenchResult | None = None
    kit: KitCheck | None = None
    files: Files = field(default_factory=Files)
    baseline_source: str | None = None

    def up(self) -> None:
        target = self.opts.target
        if target is not None:
            self.deployment = self.steps.run(
                "up", lambda: self.parts.attach(target), lambda d: f"attached to {d.entry_url}"
            )
            return
        self.started_here = True
        start = self.steps.now()
        try:
            dep = self.parts.runner.up(self.loaded, self.opts.engine)
        except UsageError:
            raise  # bad input (wrong hardware, port taken, no model): exit 2, no report
        except Exception as exc:
            self.steps.mark("up", False, one_line(exc), start)
            return
        self.deployment = dep
        self.steps.mark(
            "up", True, f"{len(dep.endpoints)} endpoints ready, entry {dep.entry_url}", start
        )

    def measure(self) -> None:
        dep = self.deployment
        if dep is None:
            self.steps.skip("accept", "not run: the deployment did not come up")
            self.steps.skip("bench", "not run: the deployment did not come up")
            return
        atomic_write_text(self.run_dir / "deployment.json", dep.model_dump_json(indent=2) + "\n")
        self.files = self.files.model_copy(update={"deployment": "deployment.json"})
        self._accept(dep)
        self._bench(dep)

    def _accept(self, dep: Deployment) -> None:
        layout = self.loaded.layout
        contexts = contexts_for(layout, self.opts.is_quick)
        out = self.run_dir / "accept"

        def go() -> AcceptResult:
            result = self.parts.accept(dep, out, contexts)
            write_result(result, out / "result.json")
            self.accept = result
            if not result.ok:
                c = result.counts
                raise StepFailed(f"{c.passed}/{c.ran} passed, {c.failed} failed")
            return result

        self.steps.run("accept", go, lambda r: f"{r.counts.passed}/{r.counts.ran} passed")
        if self.accept is not None:
            self.files = self.files.model_copy(update={"accept": "accept/result.json"})

    def _bench(self, dep: Deployment) -> None:
        layout = self.loaded.layout
        quick = self.opts.is_quick
        wl = workloads_for(layout, quick)

        def go() -> BenchResult:
            result = self.parts.bench(dep, wl, settings_for(quick))
            result.write(self.run_dir / "bench" / "bench.json")
            self.bench = result
            bad = [f"{p.workload} {p.label}" for p in result.points if p.errors]
            if bad:
                raise StepFailed(f"requests failed in {', '.join(bad)}")
            empty = [f"{p.workload} {p.label}" for p in result.points if no_figure(p)]
            if empty:
                raise StepFailed(f"no valid run for {', '.join(empty)}")
            return result

        self.steps.run("bench", go, lambda r: f"{len(r.points)} points measured")
        if self.bench is not None:
            self.files = self.files.model_copy(update={"bench": "bench/bench.json"})

    def check_kit(self) -> None:
        archive = self.opts.kit
        if archive is None:
            self.steps.skip("kit", "no --kit given")
            return

        def go() -> KitCheck:
            result = self.parts.kit(archive, self.run_dir / "kit")
            atomic_write_text(
                self.run_dir / "kit" / "kit-check.json", result.model_dump_json(indent=2) + "\n"
            )
            self.kit = result
            if not result.ok:
                raise StepFailed(result.summary)
            return result

        self.steps.run("kit", go, lambda k: k.summary)
        if self.kit is not None:
            self.files = self.files.model_copy(update={"kit": "kit/kit-check.json"})

    def down(self) -> None:
        """Tear down what this run started; also after a failed or interrupted start."""
        if not self.started_here:
            self.steps.skip("down", "attached with --target: left running")
            return
        if self.deployment is None:
            try:
                detail = self.parts.runner.down(self.loaded)
            except Exception as exc:
                detail = f"nothing left to stop ({exc})"
            self.steps.skip("down", f"start-up failed; {detail}")
            return
        self.steps.run("down", lambda: self.parts.runner.down(self.loaded), lambda text: text)


def no_figure(point: Point) -> bool:
    """A measured point none of whose figures has a value (KV capacity may be unknown)."""
    if point.workload == "kv_capacity" or not point.figures:
        return False
    return all(f.median is None for f in point.figures.values())
