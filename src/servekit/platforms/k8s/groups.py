"""Which pods a Plan becomes on Kubernetes: one LeaderWorkerSet per engine group.

An engine instance is one engine of the Plan; its pods are the nodes it spans,
in the Plan's order (the first, node rank 0, is the LWS leader and its DP
master; the others are the workers, ``LWS_WORKER_INDEX`` 1, 2, ...). Engines of
one role whose pods are alike (same size, devices and ports per pod) are one
group: one LeaderWorkerSet whose ``replicas`` is the number of instances, so a
``2p1d`` layout is two LeaderWorkerSets (prefill: 2 replicas, decode: 1).
Each pod runs the Plan's processes of its engine on its node, nothing else: two
engines sharing a ModelArts node become two pods.
"""

from __future__ import annotations

from dataclasses import dataclass

from servekit.render import Plan, ProcessPlan


@dataclass(frozen=True)
class Pod:
    """One pod of an engine instance: the Plan node it stands for and what it runs."""

    group: str
    instance: int
    worker: int
    node: int
    processes: tuple[ProcessPlan, ...]

    @property
    def name(self) -> str:
        """The pod's name as LWS names it (``<lws>-<group>`` / ``<lws>-<group>-<worker>``)."""
        base = f"{self.group}-{self.instance}"
        return base if self.worker == 0 else f"{base}-{self.worker}"

    @property
    def dns(self) -> str:
        """The pod's name in its namespace through the LWS's headless Service."""
        return f"{self.name}.{self.group}"

    @property
    def devices(self) -> tuple[int, ...]:
        """The Plan's device ids this pod's processes use on its node."""
        return tuple(sorted({d for p in self.processes for d in p.devices}))

    @property
    def api_ports(self) -> tuple[int, ...]:
        return tuple(p.api_port for p in self.processes if p.api_port is not None)

    @property
    def ports(self) -> tuple[int, ...]:
        return tuple(sorted({port for p in self.processes for port in p.bound_ports()}))


@dataclass(frozen=True)
class Group:
    """One LeaderWorkerSet: instances of one shape."""

    name: str
    role: str
    engines: tuple[str, ...]
    pods: tuple[Pod, ...]

    @property
    def replicas(self) -> int:
        return len(self.engines)

    @property
    def size(self) -> int:
        return len(self.pods) // len(self.engines)

    def pod(self, instance: int, worker: int) -> Pod:
        return next(p for p in self.pods if (p.instance, p.worker) == (instance, worker))

    def leader(self) -> Pod:
        return self.pod(0, 0)

    def worker(self) -> Pod | None:
        return next((p for p in self.pods if p.instance == 0 and p.worker == 1), None)


def _engine_pods(plan: Plan, engine: str) -> list[tuple[int, tuple[ProcessPlan, ...]]]:
    procs = [p for p in plan.processes if p.engine == engine]
    nodes = list(dict.fromkeys(p.node for p in procs))
    return [(n, tuple(p for p in procs if p.node == n)) for n in nodes]


def _shape(pods: list[tuple[int, tuple[ProcessPlan, ...]]]) -> tuple[object, ...]:
    """What must be equal for two instances to share one LWS template."""
    return tuple(
        (
            len({d for p in procs for d in p.devices}),
            tuple(sorted({port for p in procs for port in p.bound_ports()})),
            tuple(p.headless for p in procs),
        )
        for _, procs in pods
    )


def engine_groups(plan: Plan, prefix: str) -> tuple[Group, ...]:
    """The LeaderWorkerSets of a Plan, in the Plan's engine order."""
    engines = list(dict.fromkeys(p.engine for p in plan.processes if p.engine is not None))
    by_key: dict[tuple[object, ...], list[str]] = {}
    for engine in engines:
        engine_role = next(p.role for p in plan.processes if p.engine == engine)
        by_key.setdefault((engine_role, _shape(_engine_pods(plan, engine))), []).append(engine)
    per_role: dict[str, int] = {}
    for role_key, _ in by_key:
        per_role[str(role_key)] = per_role.get(str(role_key), 0) + 1
    groups = []
    seen: dict[str, int] = {}
    for (role_key, _), members in by_key.items():
        role = str(role_key)
        index = seen.get(role, 0)
        seen[role] = index + 1
        name = f"{prefix}-{role}" if per_role[role] == 1 else f"{prefix}-{role}{index}"
        pods = tuple(
            Pod(name, g, w, node, procs)
            for g, engine in enumerate(members)
            for w, (node, procs) in enumerate(_engine_pods(plan, engine))
        )
        groups.append(Group(name, role, tuple(members), pods))
    return tuple(groups)


def pod_of(groups: tuple[Group, ...], process: str) -> Pod:
    """The pod running a process of the Plan."""
    for group in groups:
        for pod in group.pods:
            if any(p.name == process for p in pod.processes):
                return pod
    raise KeyError(process)
