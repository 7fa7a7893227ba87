"""One verify run going through its steps: up (or attach), accept, bench, kit, down.

Each step records its outcome in :class:`~servekit.verify.steps.Steps` and
writes its result file into the run folder; the flow object keeps what later
steps and the report need. Bad input at start-up (a UsageError from the
runner) propagates, so the command exits 2 after teardown. An interrupt
(``KeyboardInterrupt``) propagates too, after the running step recorded it;
:meth:`Flow.interruption` then says what had finished.

Simulated engines started here run acceptance at ``--speed`` and the
benchmarks at ``--bench-speed`` (default 1): when the two differ the layout is
restarted at the benchmark speed before measuring, since client-timed figures
are wall time.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path

from servekit.accept import AcceptResult, write_result
from servekit.bench import BenchResult, Point
from servekit.catalog import LoadedLayout
from servekit.deployment import Deployment
from servekit.errors import UsageError
from servekit.preflight import PreflightRecord, read_preflight
from servekit.report import Files, Interruption, KitCheck
from servekit.verify.attach import attach_deployment, check_engine_flag, describe, with_identity
from servekit.verify.components import Components
from servekit.verify.identity import Identity
from servekit.verify.options import VerifyOptions
from servekit.verify.progress import KIT_UNITS, VerifyProgress, accept_units, bench_units
from servekit.verify.steps import StepFailed, Steps, one_line
from servekit.verify.workloads import contexts_for, settings_for, workloads_for
from servekit.vocabulary import atomic_write_text


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
    progress: VerifyProgress = field(default_factory=VerifyProgress)
    restarted: bool = False
    identity: Identity | None = None
    made_run_dir: bool = False
    preflight: PreflightRecord | None = None
    preflight_why: str = "not observed: started on this machine (no rendered entry ran it)"

    def up(self) -> None:
        if self.opts.attached:
            refused: list[UsageError] = []

            def attach() -> Deployment:
                try:
                    dep = attach_deployment(
                        self.opts,
                        self.loaded.layout,
                        self.parts.attach,
                        old_names=self.loaded.aliases,
                    )
                    return self._identified(dep)
                except UsageError as exc:
                    refused.append(exc)
                    raise

            self.deployment = self.steps.run("up", attach, describe)
            if refused:
                self._unwrite()
                raise refused[0]  # --engine contradicting the engines: exit 2, no report
            self._read_preflight()
            return
        self.started_here = True
        start = self.steps.begin("up")
        try:
            dep = self._start(self.opts.speed)
        except UsageError:
            raise  # bad input (wrong hardware, port taken, no model): exit 2, no report
        except KeyboardInterrupt:
            self.steps.interrupted("up", start)
            raise
        except Exception as exc:
            self.steps.mark("up", False, one_line(exc), start)
            return
        self.deployment = dep = self._identified(dep)
        self.steps.mark(
            "up", True, f"{len(dep.endpoints)} endpoints ready, entry {dep.entry_url}", start
        )

    def _read_preflight(self) -> None:
        """The preflight the cluster's nodes ran before its engines, as they reported it
        (``--logs``), kept in the run folder."""
        if self.opts.logs is None:
            self.preflight_why = "not observed: no --logs to read the nodes' report from"
            return
        self.preflight, why = read_preflight(self.opts.logs, self.loaded.layout.name)
        if self.preflight is None:
            self.preflight_why = f"not observed: {why}"
            return
        out = self.run_dir / "preflight.json"
        atomic_write_text(out, self.preflight.model_dump_json(indent=2) + "\n")
        self.files = self.files.model_copy(update={"preflight": out.name})

    def _unwrite(self) -> None:
        """A refused run leaves nothing: what it wrote, and its folder if it made it."""
        for name in ("plan.json", "baseline.json"):
            (self.run_dir / name).unlink(missing_ok=True)
        if self.made_run_dir:
            with contextlib.suppress(OSError):
                self.run_dir.rmdir()  # only when empty: nothing of anyone else's goes

    def _identified(self, dep: Deployment) -> Deployment:
        """``dep`` as its engines say they are; refuses an ``--engine`` they contradict."""
        identity = self.parts.identify(dep)
        self.identity = identity
        check_engine_flag(self.opts.engine, identity, dep.entry_url)
        return with_identity(dep, identity, self.opts, self.parts.fetch)

    def _start(self, speed: float | None) -> Deployment:
        runner, engine = self.parts.runner, self.opts.engine_choice
        if speed is None:
            return runner.up(self.loaded, engine)
        return runner.up(self.loaded, engine, speed=speed)

    def measure(self) -> None:
        dep = self.deployment
        if dep is None:
            self.steps.skip("accept", "not run: the deployment did not come up")
            self.steps.skip("bench", "not run: the deployment did not come up")
            self.check_kit()  # the kit does not need the deployment
            return
        atomic_write_text(self.run_dir / "deployment.json", dep.model_dump_json(indent=2) + "\n")
        self.files = self.files.model_copy(update={"deployment": "deployment.json"})
        layout, quick = self.loaded.layout, self.opts.is_quick
        contexts = contexts_for(layout, quick)
        workloads, settings = workloads_for(layout, quick), settings_for(quick)
        units = sum(accept_units(contexts).values()) + bench_units(workloads, settings)
        units += KIT_UNITS if self.opts.kit is not None else 0.0
        with self.progress.measuring(units):
            self._accept(dep, contexts)
            self._bench(dep)
            self.check_kit()

    def _accept(self, dep: Deployment, contexts: tuple[str, ...]) -> None:
        out = self.run_dir / "accept"

        def go() -> AcceptResult:
            result = self.parts.accept(dep, out, contexts)
            write_result(result, out / "result.json")
            self.accept = result
            if not result.ok:
                c = result.counts
                raise StepFailed(f"{c.passed}/{c.ran} passed, {c.failed} failed")
            return result

        try:
            self.steps.run("accept", go, lambda r: f"{r.counts.passed}/{r.counts.ran} passed")
        finally:
            if self.accept is None and self.progress.checks:
                self._keep_partial_accept(dep, out)
            if self.accept is not None:
                self.files = self.files.model_copy(update={"accept": "accept/result.json"})

    def _keep_partial_accept(self, dep: Deployment, out: Path) -> None:
        """The checks that finished before an interrupt, as the acceptance result."""
        checks = tuple(self.progress.checks)
        self.accept = AcceptResult(
            target=dep.entry_url,
            model=dep.model,
            simulated=dep.simulated,
            started_at=checks[0].started_at,
            duration_s=round(sum(c.duration_s for c in checks), 3),
            sim_speed=dep.sim_speed if dep.simulated else None,
            checks=checks,
        )
        write_result(self.accept, out / "result.json")

    def _bench_target(self, dep: Deployment) -> Deployment:
        """The deployment to benchmark: restarted at the benchmark speed when it differs."""
        wanted = self.opts.bench_speed or 1.0  # unset: real time
        if not (self.started_here and dep.simulated) or wanted == (dep.sim_speed or 1.0):
            return dep
        self.progress.doing(f"restarting at {wanted:g}x speed for the benchmarks")
        with self.progress.paused():
            self.parts.runner.down(self.loaded)
            self.deployment = None
            fresh = self._start(wanted)
        self.deployment = fresh
        self.restarted = True
        return fresh

    def _bench(self, dep: Deployment) -> None:
        layout = self.loaded.layout
        quick = self.opts.is_quick
        wl = workloads_for(layout, quick)

        def go() -> BenchResult:
            target = self._bench_target(dep)
            result = self.parts.bench(target, wl, settings_for(quick))
            result.write(self.run_dir / "bench" / "bench.json")
            self.bench = result
            bad = [f"{p.workload} {p.label}" for p in result.points if p.errors]
            if bad:
                raise StepFailed(f"requests failed in {', '.join(bad)}")
            empty = [f"{p.workload} {p.label}" for p in result.points if no_figure(p)]
            if empty:
                raise StepFailed(f"no valid run for {', '.join(empty)}")
            return result

        self.steps.run("bench", go, self._bench_detail)
        if self.bench is not None:
            self.files = self.files.model_copy(update={"bench": "bench/bench.json"})

    def _bench_detail(self, result: BenchResult) -> str:
        speed = result.inputs.sim_speed
        at = f" at {speed:g}x speed" if speed is not None else ""
        again = " (restarted at that speed after acceptance)" if self.restarted else ""
        return f"{len(result.points)} points measured{at}{again}"

    def check_kit(self) -> None:
        if self.opts.kit is None:
            self.steps.skip("kit", "no --kit given")
            return
        out = self.run_dir / "kit"
        asked = self.opts.kit_options(out)

        def go() -> KitCheck:
            result = self.parts.kit(asked)
            atomic_write_text(out / "kit-check.json", result.model_dump_json(indent=2) + "\n")
            self.kit = result
            self.progress.advance(KIT_UNITS)
            if not result.ok:
                raise StepFailed(result.summary)
            return result

        self.steps.run("kit", go, lambda k: k.summary)
        if self.kit is not None:
            self.files = self.files.model_copy(update={"kit": "kit/kit-check.json"})

    def down(self) -> None:
        """Tear down what this run started; also after a failed or interrupted start."""
        if not self.started_here:
            self.steps.skip("down", "attached: the deployment was left running")
            return
        if self.deployment is None:
            try:
                detail = self.parts.runner.down(self.loaded)
            except Exception as exc:
                detail = f"nothing left to stop ({exc})"
            self.steps.skip("down", f"start-up failed or was interrupted; {detail}")
            return
        self.steps.run("down", lambda: self.parts.runner.down(self.loaded), lambda text: text)

    def interruption(self, signal_name: str, step: str | None) -> Interruption:
        """What an interrupt stopped: the running step, what had finished, how far it got."""
        detail = ""
        if step == "accept":
            done = len(self.progress.checks)
            planned = len(accept_units(contexts_for(self.loaded.layout, self.opts.is_quick)))
            detail = f"{done} of {planned} acceptance checks had finished"
        elif step == "bench" and self.bench is None:
            detail = "no benchmark result was written"
        return Interruption.model_validate(
            {
                "signal": signal_name,
                "step": step,
                "finished": self.steps.finished(),
                "detail": detail,
            }
        )


def no_figure(point: Point) -> bool:
    """A measured point none of whose figures has a value (KV capacity may be unknown)."""
    if point.workload == "kv_capacity" or not point.figures:
        return False
    return all(f.median is None for f in point.figures.values())
