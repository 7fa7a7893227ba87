"""One simulated engine behind one API server: admission, PD roles, faults, death.

The HTTP layer (``http.py``) parses and formats; this class decides. A request
goes through: dead or starting, model name, injected faults, context length,
the PD role (claim remote KV, or die like the seed's unguarded decoder when a
decode-role engine would have to prefill by itself), then the engine.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import os
from typing import Any

from servekit.kvprotocol import HANDOFFS
from servekit.sim.clock import Clock
from servekit.sim.engine import Engine, EngineDeadError, Seq
from servekit.sim.faults import FaultDice, FaultSpec, patch_faults
from servekit.sim.kvcache import KvCache, block_hashes
from servekit.sim.kvevents import Publisher
from servekit.sim.metrics import EngineStats, Gauges, StatsCollector, make_registry
from servekit.sim.openai import ApiError, GenRequest
from servekit.sim.output import plan_output, token_budget
from servekit.sim.pd import KvRegistry, Producer
from servekit.sim.protocols import HANDLERS
from servekit.sim.protocols.base import Admitted
from servekit.sim.resume import TRANSCRIPTS, continues
from servekit.sim.spec import EndpointSpec
from servekit.sim.textgen import Voice

REPLAY_LIMIT = 128
CROWD_SEED = 7919  # the voice of an engine whose output depends on its batch
_IDS = itertools.count(1)
_LOGGERS = itertools.count(1)
_PREFIX = os.urandom(4).hex()


class SimEndpoint:
    """State and decisions of one endpoint."""

    def __init__(self, spec: EndpointSpec, clock: Clock, kvreg: KvRegistry, seed: int) -> None:
        self.spec = spec
        self.profile = spec.resolved_profile()
        self.clock = clock
        self.kvreg = kvreg
        self.url = ""
        self.stats = EngineStats()
        self.kv = KvCache(
            self.profile.num_blocks, self.profile.block_size, self.profile.enable_prefix_caching
        )
        self.engine = Engine(self.profile, clock, self.kv, self.stats)
        self.kv_events: Publisher | None = None
        if spec.kv_events is not None:
            ev = spec.kv_events
            self.kv_events = Publisher(
                ev.endpoint, host=spec.host, block_size=self.profile.block_size,
                dp_rank=spec.dp_rank, replay_endpoint=ev.replay_endpoint, topic=ev.topic,
                buffer_steps=ev.buffer_steps,
            )  # fmt: skip
            self.kv.listener = self.kv_events
        self.faults = spec.faults
        self.dice = FaultDice(seed)
        self.disagree_seed = spec.disagree_seed
        self.dead = spec.faults.dead
        self.started_at = clock.now()
        self.hung = 0
        self._changed = asyncio.Event()
        self.log = _endpoint_logger(spec)
        self.handoff = HANDLERS[spec.kv_mode]  # what this endpoint does with kv_transfer_params
        self.producer: Producer | None = None
        self.worker_addr: str | None = None  # bootstrap mode across processes: its side channel
        if spec.role == "prefill":
            bootstrap = HANDOFFS[spec.kv_mode].bootstrap_server
            # vLLM's MooncakeConnector names each DP rank <id>_dp<rank> at its bootstrap server
            self.producer = Producer(
                spec.kv_engine_id if bootstrap else spec.engine, spec.host,
                spec.bootstrap_server_port if bootstrap else spec.side_port, spec.tp,
                connector=spec.kv_connector, bootstrap=bootstrap,
            )  # fmt: skip
            kvreg.add_producer(self.producer)
        cache_info = {
            "block_size": str(self.profile.block_size),
            "num_gpu_blocks": str(self.profile.num_blocks),
            "enable_prefix_caching": str(self.profile.enable_prefix_caching),
            "profile": self.profile.name,
        }
        self.collector = StatsCollector(
            self.stats,
            Gauges(
                running=lambda: len(self.engine.running),
                waiting=lambda: len(self.engine.waiting),
                kv_usage=self.kv.usage,
            ),
            {"model_name": spec.served_model_name, "engine": str(spec.dp_rank)},
            cache_info,
        )
        self.registry = make_registry(self.collector)

    # -- lifecycle ---------------------------------------------------------

    def start(self) -> None:
        self.engine.start()
        if self.kv_events is not None:
            self.kv_events.start()
        self._log_start()

    async def stop(self) -> None:
        await self.engine.stop()
        if self.kv_events is not None:
            await self.kv_events.close()
        for handler in list(self.log.handlers):
            handler.close()
            self.log.removeHandler(handler)

    def starting(self) -> bool:
        return self.clock.now() - self.started_at < self.faults.slow_start_s

    def health_status(self) -> int:
        if self.dead:
            return 500
        return 503 if self.starting() else 200

    def kill(self, reason: str) -> None:
        """The engine dies: /health 500, queued and running requests fail."""
        if self.dead:
            return
        self.log.error("EngineDeadError: EngineCore encountered an issue (%s)", reason)
        self._halt(reason)

    def _halt(self, reason: str) -> None:
        self.dead = True
        self.engine.fail_all(EngineDeadError(reason))
        if self.producer is not None:
            self.kvreg.drop_producer(self.producer)
            self.kvreg.down.add(self.producer)
        self._notify()

    def restart(self, slow_start_s: float | None = None) -> None:
        """A fresh engine: empty KV cache, counters reset, faults cleared but slow start."""
        self.log.info("Restarting engine %s", self.spec.name)
        self._halt("restarted")
        if slow_start_s is not None:
            self.faults = patch_faults(self.faults, {"slow_start_s": slow_start_s})
        self.faults = patch_faults(
            self.faults, {"dead": False, "hang": False, "unreachable": False}
        )
        if self.producer is not None:
            self.kvreg.down.discard(self.producer)
        self.kv.reset()
        self.stats = EngineStats()
        self.engine.stats = self.stats
        self.collector.stats = self.stats
        self.dead = False
        self.started_at = self.clock.now()
        self._log_start()
        self._notify()

    def set_faults(self, patch: dict[str, Any]) -> FaultSpec:
        """Apply a partial fault patch; ``disagree_seed`` may ride along."""
        patch = dict(patch)
        if "disagree_seed" in patch:
            seed = patch.pop("disagree_seed")
            if seed is not None and not isinstance(seed, int):
                raise ApiError(400, "disagree_seed: expected an integer or null")
            self.disagree_seed = seed
        self.faults = patch_faults(self.faults, patch)
        gone = self.faults.dead or self.faults.unreachable
        if gone and not self.dead:
            self.kill("node lost" if self.faults.unreachable else "fault injected")
        elif not gone and self.dead:
            self.restart()
        self._notify()
        self.log.warning("faults set: %s", self.faults.model_dump(exclude_defaults=True))
        return self.faults

    def state(self) -> dict[str, Any]:
        return {
            "name": self.spec.name,
            "url": self.url,
            "role": self.spec.role,
            "engine_id": self.spec.engine,
            "health": self.health_status(),
            "dead": self.dead,
            "faults": self.faults.model_dump(),
            "disagree_seed": self.disagree_seed,
            "running": len(self.engine.running),
            "waiting": len(self.engine.waiting),
            "hung": self.hung,
            "kv_usage": self.kv.usage(),
            "steps": self.engine.steps,
            "virtual_time": self.engine.vt,
            "profile": self.profile.name,
            "label": self.profile.label,
            "launch": self.spec.launch,
            "kv_events": None if self.kv_events is None else self.kv_events.endpoint,
            # bootstrap mode across processes: the engine ids bootstrap servers confirmed
            "remote_engines": list(self.kvreg.remote_engines),
        }

    # -- requests ----------------------------------------------------------

    def check_serving(self) -> None:
        if self.dead:
            raise ApiError(500, "EngineCore is dead; restart the instance", "EngineDeadError")
        if self.starting():
            raise ApiError(503, "the engine is still starting", "ServiceUnavailableError")

    async def admit(self, req: GenRequest, request_id: str | None) -> Admitted:
        """Run a request through every gate and hand it to the engine."""
        self.check_serving()
        spec = self.spec
        if req.model is not None and req.model != spec.served_model_name:
            raise ApiError(404, f"The model `{req.model}` does not exist.", "NotFoundError")
        if req.images and not spec.vision:
            raise ApiError(400, f"{spec.served_model_name} is not a multimodal model (vision off)")
        await self._faults_before()
        arrival = self.clock.now()
        rid = request_id or f"{_PREFIX}-{next(_IDS)}"
        prompt_len = len(req.prompt_ids)
        limit = token_budget(req.max_tokens, prompt_len, spec.max_model_len)
        if req.max_tokens is None and spec.default_max_tokens is not None:
            limit = min(limit, spec.default_max_tokens)  # vLLM's get_max_tokens
        digest = hash(tuple(req.prompt_ids))
        delay = self.faults.spike_s if self.dice.hit(self.faults.spike_rate) else 0.0
        on_finish = self.handoff.begin(self, req)
        transfer = None
        if spec.role == "decode":  # does the prompt's KV come from a prefill?
            transfer = await self.handoff.receive(self, req, rid, digest, prompt_len)
        remote = transfer is not None
        delay += transfer or 0.0
        output, finish = self._output(req, digest, limit)
        cacheable = not remote and not self.faults.no_prefix_cache
        hashes = block_hashes(req.prompt_ids, self.kv.block_size) if cacheable else []
        if not self.engine.fits(prompt_len + len(output)):
            raise ApiError(400, "the request needs more KV blocks than the engine has")
        await self.clock.sleep(delay)
        self.check_serving()
        self._check_pulled(rid)
        seq = Seq(
            prompt_len,
            hashes,
            output,
            finish,
            arrival,
            arrival + delay,
            remote_kv=remote,
            stream=req.stream,
            token_ids=req.prompt_ids if hashes else (),
        )
        admitted = Admitted(seq, req, rid, usage_skew=int(self.faults.usage_off_by_one))
        if on_finish is None:
            on_finish = self.handoff.finish(self, admitted, digest)
        seq.on_finish = on_finish
        self.engine.submit(seq)
        return admitted

    def _check_pulled(self, rid: str) -> None:
        """A prefill lost while this decoder pulled its KV: the load fails (vLLM's
        kv_load_failure_policy "fail": the request ends in an internal error)."""
        source = self.kvreg.pulling.pop((self.spec.name, rid), None)
        if source is not None and source in self.kvreg.down:
            self.log.error("KV load failed for %s: engine %s is gone", rid, source.engine_id)
            raise ApiError(500, "Internal server error (KV load failed)", "InternalServerError")

    async def unheard(self) -> None:
        """While the node is lost (``unreachable``), nothing goes out: wait it out."""
        while self.faults.unreachable:
            await self._changed.wait()

    async def wait_done(self, seq: Seq) -> None:
        try:
            await asyncio.shield(seq.done)
        except EngineDeadError as exc:
            raise ApiError(500, f"EngineCore died: {exc}", "EngineDeadError") from exc

    def reset_due(self) -> bool:
        return self.dice.hit(self.faults.reset_rate)

    def empty_due(self) -> bool:
        return self.dice.hit(self.faults.empty_rate)

    async def _faults_before(self) -> None:
        f = self.faults
        await self.unheard()
        if self.dice.hit(f.error_rate):
            raise ApiError(f.error_status, "injected fault", "InjectedFaultError")
        if self.faults.hang and not self.dead:
            self.hung += 1
            try:
                while self.faults.hang and not self.dead:
                    await self._changed.wait()
            finally:
                self.hung -= 1
        self.check_serving()

    def _output(self, req: GenRequest, digest: int, limit: int) -> tuple[list[str], str]:
        f = self.faults
        seed = self.disagree_seed
        if f.crowd_drift and (self.engine.running or self.engine.waiting):
            seed = CROWD_SEED if seed is None else seed + CROWD_SEED
        if f.ignore_stop:
            req = dataclasses.replace(req, stop=())
        voice = Voice(seed, f.misbehave, self.spec.retrieval)
        resumed = self._resume(req, limit, voice)
        if resumed is not None:
            return resumed
        TRANSCRIPTS.record(req, digest)
        return plan_output(req, digest, limit, voice, self.profile.answer_tokens)

    def _resume(self, req: GenRequest, limit: int, voice: Voice) -> tuple[list[str], str] | None:
        """The rest of an answer whose prompt and first tokens this token-id prompt is."""
        if req.structured or req.sampling.penalty:
            return None  # a new grammar, penalties counting from zero: not the first answer
        origin = TRANSCRIPTS.origin(req)
        if origin is None:
            return None
        base, digest, done = origin
        k = len(done)
        base = dataclasses.replace(base, min_tokens=req.min_tokens + k if req.min_tokens else 0)
        plan, finish = plan_output(base, digest, k + limit, voice, self.profile.answer_tokens)
        if not continues(plan, done) or len(plan) == k:
            return None
        return plan[k:], finish

    @property
    def any_peer(self) -> bool:
        """The endpoint's KV peers run in other processes (kv_peers: any)."""
        return self.spec.kv_peers == "any"

    def incident(self, rid: str, prompt_len: int) -> None:
        """A decode-role engine asked to prefill by itself dies (the seed's unguarded decoder)."""
        self.log.error(
            "RuntimeError: decode-role instance asked to prefill %d tokens for request %s; "
            "the fixed %d-token replay limit was exceeded in the worker",
            prompt_len,
            rid,
            REPLAY_LIMIT,
        )
        self.log.error("AssertionError: replay window overflow; EngineCore exiting")
        self.kill(f"unguarded decode prefilled request {rid}")
        raise ApiError(
            500, "EngineCore died while prefilling on a decode instance", "EngineDeadError"
        )

    def _log_start(self) -> None:
        p = self.profile
        self.log.info(
            "Starting simulated engine %s (role %s, engine_id %s, profile %s: %s)",
            self.spec.name,
            self.spec.role,
            self.spec.engine,
            p.name,
            p.label,
        )
        self.log.info("GPU KV cache size: %s tokens", f"{p.num_blocks * p.block_size:,}")
        per_req = self.spec.max_model_len
        self.log.info(
            "Maximum concurrency for %s tokens per request: %.2fx",
            f"{per_req:,}",
            p.num_blocks * p.block_size / per_req,
        )

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()


def _endpoint_logger(spec: EndpointSpec) -> logging.Logger:
    """A logger of this endpoint instance (two simulators in one process never share one)."""
    log = logging.getLogger(f"servekit.sim.engine.{spec.name}.{next(_LOGGERS)}")
    log.setLevel(logging.INFO)
    if spec.log is not None:
        spec.log.parent.mkdir(parents=True, exist_ok=True)
        handler = logging.FileHandler(spec.log)
        handler.setFormatter(
            logging.Formatter("%(levelname)s %(asctime)s [sim] %(message)s", "%m-%d %H:%M:%S")
        )
        log.addHandler(handler)
        log.propagate = False
    return log
