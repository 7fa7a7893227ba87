"""Active health probes, passive outlier detection and failure domains: who may take new work.

Active: every instance's ``/health`` is probed each interval (concurrently, so a
slow instance delays nobody); ``eject_after`` consecutive failures eject it,
``readmit_after`` consecutive successes bring it back. A never-probed instance
is admitted on its first good probe.

Passive (outlier detection, as Envoy does it): ``outlier_after`` consecutive
failed requests on an instance (5xx, 200 with an empty body, connection
errors) eject it for ``outlier_eject_s`` times the number of its ejections in a
row (at most 30x); only then may good probes re-admit it. An outlier is never
the last healthy instance of its pool to go: ejecting it would turn errors
into "no healthy instance" for every request. Draining instances are left
alone: the admin put them there.

Failure domains (``--failure-domains``): the DP ranks of one engine die
together (one rank's death takes its peers' collectives down), and so do the
processes of one node. Waiting for each to fail a request of its own cost the
streams migrated onto them: on a simulated 2p2d with all 16 ranks of a decode
engine killed, 31 migrations failed against 17 good ones and 2-3 of 16 streams
were cut. So one failed request (or failed probe) makes the instance and every
sibling *suspect* at once: the pools offer them only when nothing else is left
(:meth:`~servekit.proxy.instances.Pool.routable`) until a probe sent after the
failure shows each alive, and they are probed now, not at the next round. The
round's probes then say what failed (a failure of an instance that a round
found alive less than ``--health-interval`` ago starts no new round: a flood of
5xx answers from a live engine is not made a flood of probes), logged and
counted by scope: ``request``
(the instance answers its probe: its request failed, not it), ``instance`` (it
is down, its siblings answer), ``engine`` (every rank of its engine is down) or
``node`` (every backend of its node is). An instance found down is ejected at
once (never its pool's last) and its work in flight is cut, so its streams
migrate now: when its probe was refused or answered 5xx, and when it timed out
only where the whole engine or node did too (a busy engine's slow probe must
not cut healthy streams); otherwise when ``eject_after`` probes eject it.

Decoders also say their model's length once admitted (``GET /v1/models``):
a chat migration carries chat's limit (what fits in the model's length).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections.abc import Callable, Iterable

import aiohttp

from servekit.proxy import jsoncodec
from servekit.proxy.bodies import read_capped
from servekit.proxy.config import ProxyConfig
from servekit.proxy.failures import ProxyError
from servekit.proxy.instances import Instance, State

log = logging.getLogger("servekit.proxy")
MAX_EJECTION_FACTOR = 30
MODELS_MAX_BYTES = 1 << 20  # a /v1/models page is a few hundred bytes
SCOPES = ("request", "instance", "engine", "node")


class HealthChecker:
    """Probes instances and applies the ejection / re-admission / suspicion rules."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        instances: Callable[[], Iterable[Instance]],
        config: ProxyConfig,
        headers: dict[str, str],
    ) -> None:
        self._session = session
        self._instances = instances
        self._cfg = config  # the health_* and outlier_* fields, eject_after, readmit_after
        self._timeout = aiohttp.ClientTimeout(total=config.health_timeout_s)
        self._headers = headers
        self._rounds: set[asyncio.Task[None]] = set()
        self.on_outlier: Callable[[Instance], None] = lambda inst: None
        self.on_failure: Callable[[str], None] = lambda scope: None  # a round's verdict

    async def run(self) -> None:
        """Probe forever; cancelled when the proxy stops."""
        try:
            while True:
                await self.probe_all()
                await asyncio.sleep(self._cfg.health_interval_s)
        finally:
            for task in list(self._rounds):
                task.cancel()

    async def probe_all(self) -> None:
        members = [i for i in self._instances() if i.state is not State.DRAINING]
        await asyncio.gather(*(self.probe(i) for i in members))

    async def probe(self, inst: Instance) -> bool | None:
        """One GET /health; 200 counts as success, anything else as failure.

        Returns True (alive), False (refused, reset or 5xx: down for sure) or None
        (no answer in ``--health-timeout``).
        """
        started = time.monotonic()
        verdict: bool | None
        try:
            async with self._session.get(
                f"{inst.url}/health", timeout=self._timeout, headers=self._headers
            ) as resp:
                await resp.read()
                verdict = resp.status == 200
        except TimeoutError:
            verdict = None
        except aiohttp.ClientError:
            verdict = False
        self.record(inst, verdict is True, started)
        if verdict and inst.max_model_len is None and inst.role != "prefill":
            await self._read_model_len(inst)
        return verdict

    def record(self, inst: Instance, ok: bool, started: float | None = None) -> None:
        """Apply one probe result (of a probe sent at ``started``) to the instance's state."""
        if inst.state is State.DRAINING:
            return
        if ok:
            since = inst.suspect_since
            if since is not None and (started is None or started >= since):
                inst.suspect_since = None
            inst.fails, inst.oks = 0, inst.oks + 1
            if inst.state is State.UNKNOWN or (
                inst.state is State.EJECTED
                and inst.oks >= self._cfg.readmit_after
                and time.monotonic() >= inst.ejected_until
            ):
                self._set(inst, State.HEALTHY, "probe ok")
            return
        inst.oks, inst.fails = 0, inst.fails + 1
        if inst.state is State.HEALTHY and inst.suspect_since is None:
            self.suspect(inst, "a failed probe")
        if inst.state is State.HEALTHY and inst.fails >= self._cfg.eject_after:
            self._set(inst, State.EJECTED, f"{inst.fails} failed probes")
            inst.cut()

    def request_ok(self, inst: Instance) -> None:
        """A request got an answer from ``inst`` (2xx with a body, or a 4xx)."""
        inst.request_fails = 0
        inst.ejections = 0

    def request_failed(self, inst: Instance, reason: str, peers: Iterable[Instance]) -> None:
        """A request failed on ``inst``: it and its siblings are suspect until probed alive;
        it is ejected after ``outlier_after`` in a row."""
        self.suspect(inst, reason)
        inst.request_fails += 1
        if inst.request_fails < self._cfg.outlier_after or inst.state is not State.HEALTHY:
            return
        if not any(p is not inst and p.routable for p in peers):
            return  # never eject the last healthy instance of a pool
        inst.ejections += 1
        factor = min(inst.ejections, MAX_EJECTION_FACTOR)
        inst.ejected_until = time.monotonic() + self._cfg.outlier_eject_s * factor
        inst.oks, inst.request_fails = 0, 0
        self._set(
            inst, State.EJECTED, f"outlier: {self._cfg.outlier_after} failed requests, {reason}"
        )
        self.on_outlier(inst)

    # -- failure domains ---------------------------------------------------

    def suspect(self, inst: Instance, reason: str) -> None:
        """``inst`` failed (``reason``): it and its siblings take no new work while
        another is left, and are probed now; a round already under way for them stands."""
        now = time.monotonic()
        if (
            inst.suspect_since is not None
            or now - inst.probed_alive_at < self._cfg.health_interval_s
        ):
            return  # a round is under way, or one just found it alive: no probe storm
        domain = [i for i in self._instances() if inst.siblings(i)]
        fresh = [i for i in domain if i.suspect_since is None and i.state is not State.DRAINING]
        for member in fresh:
            member.suspect_since = now
        try:  # its own context: not the failed request's memory budget
            loop = asyncio.get_running_loop()
            task = loop.create_task(self._round(inst, fresh, reason), context=contextvars.Context())
        except RuntimeError:  # no loop (a unit test recording results by hand)
            return
        self._rounds.add(task)
        task.add_done_callback(self._rounds.discard)

    async def _round(self, origin: Instance, members: list[Instance], reason: str) -> None:
        """Probe a failed instance's domain; cut and report what is down."""
        verdicts = await asyncio.gather(*(self.probe(i) for i in members))
        down = {i: v for i, v in zip(members, verdicts, strict=True) if v is not True}
        scope = self._scope(origin, set(down))
        if scope == "request":
            origin.probed_alive_at = time.monotonic()
        for inst, verdict in down.items():
            if verdict is False or scope in ("engine", "node"):
                self._down(inst, f"its probe after a failure ({reason}) found it down")
        self.on_failure(scope)
        level = logging.INFO if scope == "request" else logging.WARNING
        log.log(level, "%s %s failed (%s): %s", origin.role, origin.name, reason,
                self._verdict(origin, scope, len(down), len(members)))  # fmt: skip

    def _down(self, inst: Instance, reason: str) -> None:
        """Eject ``inst`` now (unless it is its pool's last) and cut its work in flight."""
        peers = [i for i in self._instances() if i.role == inst.role and i is not inst]
        if inst.state is State.HEALTHY and any(p.routable for p in peers):
            inst.oks = 0
            self._set(inst, State.EJECTED, reason)
        inst.cut()

    def _scope(self, origin: Instance, down: set[Instance]) -> str:
        if origin not in down:
            return "request"
        every = list(self._instances())
        node = [i for i in every if origin.node is not None and i.node == origin.node]
        if node and all(i in down for i in node):
            return "node"
        engine = [i for i in every if origin.engine is not None and i.engine == origin.engine]
        if engine and all(i in down for i in engine):
            return "engine"
        return "instance"

    @staticmethod
    def _verdict(origin: Instance, scope: str, down: int, probed: int) -> str:
        if scope == "request":
            return "it answers its probe; its siblings stay in service once probed"
        if scope == "node":
            return f"node {origin.node} is gone ({down} of {probed} backends probed are down)"
        if scope == "engine":
            return f"engine {origin.engine} is gone (every rank is down)"
        return f"this {('rank of engine ' + origin.engine) if origin.engine else 'instance'} " + (
            f"is down; its {probed - down} siblings answer"
        )

    async def _read_model_len(self, inst: Instance) -> None:
        """The model length a decoder reports (vLLM's /v1/models card), once."""

        def too_large() -> ProxyError:
            return ProxyError("answer_too_large", "health", "/v1/models page too large")

        try:
            async with self._session.get(
                f"{inst.url}/v1/models", timeout=self._timeout, headers=self._headers
            ) as resp:
                raw = await read_capped(resp.content, resp.content_length, MODELS_MAX_BYTES,
                                        too_large)  # fmt: skip
                status = resp.status
            doc = jsoncodec.loads(raw) if status == 200 else None
        except (aiohttp.ClientError, TimeoutError, ValueError, RecursionError, ProxyError):
            return
        cards = doc.get("data") if isinstance(doc, dict) else None
        cards = cards if isinstance(cards, list) else []
        lengths = [c.get("max_model_len") for c in cards if isinstance(c, dict)]
        found = [n for n in lengths if isinstance(n, int) and not isinstance(n, bool) and n > 0]
        if found:
            inst.max_model_len = min(found)

    @staticmethod
    def _set(inst: Instance, state: State, reason: str) -> None:
        if inst.state is not state:
            level = logging.INFO if state is State.HEALTHY else logging.WARNING
            log.log(level, "%s %s -> %s (%s)", inst.name, inst.state.value, state.value, reason)
            inst.state = state
