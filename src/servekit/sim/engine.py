"""Continuous batching in virtual time: waiting queue, running batch, steps.

Each step admits waiting sequences while there are free slots and KV blocks,
gives prefilling sequences chunks of the token budget, and advances every
decoding sequence by the accepted length of a speculative step. The step lasts
prefill overhead + chunk costs + the decode step time of the batch size; the
engine sleeps that long (scaled) and then delivers the tokens. What is
generated is fixed before a sequence enters (see textgen), so scheduling only
changes timing, never text.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from servekit.sim.clock import Clock
from servekit.sim.kvcache import Allocation, KvCache
from servekit.sim.metrics import EngineStats
from servekit.sim.profile import Profile

log = logging.getLogger("servekit.sim")


class EngineDeadError(RuntimeError):
    """The engine died while the sequence was queued or running."""


@dataclass(eq=False, slots=True)
class Seq:
    """One request inside the engine."""

    prompt_len: int
    hashes: list[int]
    output: list[str]
    finish_reason: str
    arrival: float
    ready: float
    remote_kv: bool = False
    stream: bool = False
    token_ids: Sequence[int] = ()  # the prompt's, for the KV-event publisher
    on_finish: Callable[[Seq], bool] | None = None
    alloc: Allocation | None = None
    computed: int = 0
    emitted: int = 0
    admitted_at: float | None = None
    first_token_at: float | None = None
    last_token_at: float = 0.0
    finished_at: float | None = None
    phase: float = 0.0
    aborted: bool = False
    done: asyncio.Future[None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    chunks: asyncio.Queue[list[str] | None] | None = None

    def __post_init__(self) -> None:
        if self.stream and self.chunks is None:
            self.chunks = asyncio.Queue()

    @property
    def cached_tokens(self) -> int:
        """Prompt tokens not computed here: prefix-cache hits, or the KV pulled from prefill."""
        if self.remote_kv:
            return max(0, self.prompt_len - 1)
        return self.alloc.cached_tokens if self.alloc is not None else 0

    @property
    def text(self) -> str:
        return "".join(self.output[: self.emitted])


class Engine:
    """The scheduler of one simulated engine.

    While busy the engine runs on its own virtual timeline (each step starts
    where the last ended) and only paces itself against the wall clock, so its
    metrics are exact model accounting even when the host is too loaded to keep
    up; it re-anchors at the first ready sequence after being idle.
    """

    def __init__(self, profile: Profile, clock: Clock, kv: KvCache, stats: EngineStats) -> None:
        self.profile = profile
        self.clock = clock
        self.kv = kv
        self.stats = stats
        self.waiting: deque[Seq] = deque()
        self.running: list[Seq] = []
        self.vt = 0.0
        self.steps = 0
        self._busy = False
        self._epoch = 0
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def fits(self, total_len: int) -> bool:
        """Whether a sequence of ``total_len`` tokens could ever fit in the KV cache."""
        return self.kv.blocks_for(total_len) <= self.kv.num_blocks

    def submit(self, seq: Seq) -> None:
        self.waiting.append(seq)
        self._wake.set()

    def abort(self, seq: Seq) -> None:
        """The client went away: drop the sequence and free its blocks."""
        if seq.aborted or seq.finished_at is not None:
            return
        seq.aborted = True
        if seq in self.waiting:
            self.waiting.remove(seq)
            if not seq.done.done():
                seq.done.set_result(None)
        self._wake.set()

    def wake(self) -> None:
        """Blocks were freed outside a step (a held prefill was collected)."""
        self._wake.set()

    def fail_all(self, exc: Exception) -> None:
        """Engine death: every queued and running sequence fails."""
        self._epoch += 1  # a step in flight must not deliver into the next life
        for seq in [*self.running, *self.waiting]:
            seq.aborted = True
            if seq.alloc is not None:
                with contextlib.suppress(Exception):
                    self.kv.free(seq.alloc)
            if not seq.done.done():
                seq.done.set_exception(exc)
                seq.done.exception()
            if seq.chunks is not None:
                seq.chunks.put_nowait(None)
        self.running.clear()
        self.waiting.clear()

    async def _loop(self) -> None:
        while True:
            if not self.waiting and not self.running:
                await self._idle()
            try:
                await self._cycle()
            except Exception as exc:  # a bug must fail requests, not hang them
                log.exception("simulated engine step failed; failing its requests")
                with contextlib.suppress(Exception):
                    self.kv.reset()
                self.fail_all(EngineDeadError(f"internal simulator error: {exc!r}"))

    async def _cycle(self) -> None:
        self._admit()
        if not self.running:
            await self._idle()
            return
        await self._step()

    async def _idle(self) -> None:
        self._busy = False
        self._wake.clear()
        await self._wake.wait()

    def _admit(self) -> None:
        limit = self.profile.max_num_seqs
        while self.waiting and len(self.running) < limit:
            seq = self.waiting[0]
            total = seq.prompt_len + len(seq.output)
            alloc = self.kv.allocate(seq.hashes, seq.prompt_len, total, seq.token_ids)
            if alloc is None:
                return
            self.waiting.popleft()
            if self._busy and seq.ready > self.vt:
                seq.arrival -= seq.ready - self.vt
                seq.ready = self.vt
            seq.alloc = alloc
            seq.admitted_at = max(self.vt, seq.ready)
            seq.computed = seq.prompt_len if seq.remote_kv else alloc.cached_tokens
            self.stats.prefix_queries += seq.prompt_len
            self.stats.prefix_hits += alloc.cached_tokens
            self.running.append(seq)

    async def _step(self) -> None:
        prof = self.profile
        budget = prof.max_num_batched_tokens
        decodes = [s for s in self.running if s.computed >= s.prompt_len and not s.aborted]
        budget -= len(decodes) * (1 + prof.num_speculative_tokens)
        chunks: list[tuple[Seq, int]] = []
        for s in self.running:
            if s.computed < s.prompt_len and not s.aborted and budget > 0:
                n = min(budget, s.prompt_len - s.computed)
                chunks.append((s, n))
                budget -= n
        context = sum(s.prompt_len + s.emitted for s in decodes)
        dt = prof.decode_step(len(decodes), context) if decodes else 0.0
        if chunks:
            dt += prof.prefill_overhead_s
            dt += sum(prof.prefill_chunk(n, s.computed + n) for s, n in chunks)
        epoch = self._epoch
        start = self.vt
        if not self._busy:
            start = max(start, min(s.ready for s in self.running))
            self._busy = True
        self.vt = start + dt
        if dt > 0:
            await self.clock.sleep_until(self.vt)
        elif self.steps % 64 == 63:
            await asyncio.sleep(0)
        if epoch != self._epoch:
            return
        self.steps += 1
        self._apply(chunks, decodes)

    def _apply(self, chunks: list[tuple[Seq, int]], decodes: list[Seq]) -> None:
        now = self.vt
        for s, n in chunks:
            s.computed += n
            if s.computed >= s.prompt_len and not s.aborted:
                self._emit(s, 1, now)
        k = self.profile.num_speculative_tokens
        for s in decodes:
            if s.aborted:
                continue
            if s.emitted == 0:
                self._emit(s, 1, now)
                continue
            s.phase += self.profile.acceptance_length
            n = min(int(s.phase), k + 1)
            s.phase -= n
            n = self._emit(s, n, now)
            if k:
                self.stats.drafts += 1
                self.stats.draft_tokens += k
                self.stats.accepted_tokens += n - 1
        self._retire(now)

    def _emit(self, s: Seq, n: int, now: float) -> int:
        n = min(n, len(s.output) - s.emitted)
        if s.chunks is not None:
            s.chunks.put_nowait(s.output[s.emitted : s.emitted + n])
        s.emitted += n
        self.stats.generation_tokens += n
        if s.first_token_at is None:
            s.first_token_at = now
            self.stats.ttft.observe(now - s.arrival)
            self.stats.prompt_tokens += s.prompt_len
        else:
            self.stats.itl.observe(now - s.last_token_at)
        s.last_token_at = now
        return n

    def _retire(self, now: float) -> None:
        keep: list[Seq] = []
        for s in self.running:
            if s.aborted or s.emitted >= len(s.output):
                self._finish(s, now)
            else:
                keep.append(s)
        if len(keep) != len(self.running):
            self.running = keep

    def _observe_phases(self, s: Seq, now: float) -> None:
        stats = self.stats
        stats.e2e.observe(now - s.arrival)
        admitted = s.admitted_at if s.admitted_at is not None else s.arrival
        first = s.first_token_at if s.first_token_at is not None else now
        stats.queue.observe(max(0.0, admitted - s.arrival))
        stats.prefill.observe(max(0.0, first - admitted))
        stats.decode.observe(now - first)

    def _count_finished(self, reason: str) -> None:
        stats = self.stats

        def count() -> None:
            stats.finished[reason] = stats.finished.get(reason, 0) + 1

        lag = self.profile.finished_lag_s * self.clock.time_scale
        if lag > 0:
            asyncio.get_running_loop().call_later(lag, count)
        else:
            count()

    def _finish(self, s: Seq, now: float) -> None:
        held = False
        if not s.aborted:
            s.finished_at = now
            self._observe_phases(s, now)
            self._count_finished(s.finish_reason)
            held = s.on_finish(s) if s.on_finish is not None else False
        if s.alloc is not None and not held:
            self.kv.free(s.alloc)
        if s.chunks is not None:
            s.chunks.put_nowait(None)
        if not s.done.done():
            s.done.set_result(None)
