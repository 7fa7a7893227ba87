"""``k8s.elastic=on``: a role's LeaderWorkerSet scales while it serves (issue 41).

Without it, ``pod.sh`` knows only the instances the layout renders, and the proxy's
backends are a list in its arguments: ``kubectl scale lws/sk-decode --replicas 3``
gave a group whose pods exit 2 ("has nothing to run"). With it:

- **any group index runs.** A group's instances are alike but for their engine id
  and their leader's address (checked for every rendered instance: :func:`check_alike`),
  so the rendering adds, per group, its first instance's process scripts with the
  engine id as a variable (``scaled.<process>.sh``, ``SERVEKIT_ENGINE_ID``) and a row
  of ``pod.sh``'s table for every other index; the leader's address comes from LWS as
  for every instance. The rendered instances keep their scripts and ids; index ``g``
  beyond them gets ``base + (g - rendered) x groups + k`` (:class:`~servekit.proxy.IdRule`),
  above every id the layout gives, so ids stay unique across any number of instances
  of every group;
- **the proxy learns the pods** (``--discovery kubernetes``) from the spec this module
  writes from the Plan (:func:`discovery_spec`: per group its labels, per worker index
  the API and KV-event ports), with a ServiceAccount allowed to get/list/watch pods.
  In bootstrap mode (vLLM's MooncakeConnector) a decoder is told each prefill's engine
  id and bootstrap server: the spec carries each prefill API server's bootstrap port
  (the Plan's, on its own pod) and DP rank (vLLM names each rank ``<id>_dp<rank>``),
  the very :class:`~servekit.proxy.IdRule` that numbers its pods (``engine_id_from:
  id_rule``) and ``engine_id_pod_uid``: every prefill pod serves under its rule's id
  followed by ``-`` and its own ``metadata.uid`` (downward API ``SERVEKIT_POD_UID``,
  :func:`incarnation_processes`), which discovery reads from the pod object, so a pod
  made again (``kubectl delete pod``, a rollout, LWS recreating a group) is an engine id
  no decoder met: vLLM's connector keeps the worker address it learned for an id for
  good, and would pull from the old pod under a reused one;
- **a pod that leaves is drained first**: its preStop hook (``pod.sh GROUP prestop``)
  calls every proxy's ``POST /admin/instances/leave`` through the headless Service
  ``<prefix>-proxy-peers`` (``python3 -m servekit.proxy.prestop`` from the zipapp the
  engines' bundle carries), and ``terminationGracePeriodSeconds`` outlasts it;
- **autoscaling** (``k8s.autoscale``): a KEDA ScaledObject or an HPA per
  LeaderWorkerSet on its scale subresource, reading the proxy's
  ``servekit_desired_replicas{role}``, rate-limited as the proxy's own windows are.
"""

from __future__ import annotations

import json
from typing import Any

from servekit.errors import UsageError
from servekit.kvprotocol import kv_engine_id
from servekit.platforms.k8s.groups import Group
from servekit.platforms.k8s.podspec import GROUP_LABEL, MOUNT
from servekit.platforms.k8s.rendering import K8sRendering
from servekit.platforms.k8s.settings import DEFAULT_TIMING, K8sSettings
from servekit.platforms.k8s.wiring import POD_IP, Change, proxy_service
from servekit.proxy import (
    KV_POLICY,
    DiscoverySpec,
    Endpoint,
    IdRule,
    RoleSpec,
    WorkerPorts,
    option_words,
    spec_from_doc,
)
from servekit.render import (
    Arg,
    Bootstrap,
    HostOf,
    Plan,
    ProcessPlan,
    Ref,
    Word,
    kv_events_switch,
    proxy_words,
    resolved_argv,
)

ENGINE_ID_VAR = "SERVEKIT_ENGINE_ID"
POD_UID_VAR = "SERVEKIT_POD_UID"
"""The pod's metadata.uid (downward API): ``pod.sh`` appends it to a prefill's engine id."""
KUBE_API_VAR = "SERVEKIT_KUBE_API"
KUBE_TOKEN_VAR = "SERVEKIT_KUBE_TOKEN_FILE"
"""Set in the proxy pod's environment, they point discovery at another API server than
the pod's own (the fake cluster's); unset (a real cluster), their words vanish."""
SCALED = "scaled."
SPEC_FILE = "servekit-discovery.json"
ADMIN_KEY_ENV = "SERVEKIT_ADMIN_KEY"
PROXY_ZIPAPP = "servekit-proxy.pyz"
LWS_API = "leaderworkerset.x-k8s.io/v1"
DS_API = "disaggregatedset.x-k8s.io/v1"
KEDA_API = "keda.sh/v1alpha1"
SHUTDOWN_S = 30
"""What the engine itself gets after the hook, before SIGKILL (vLLM's shutdown)."""


def id_rules(plan: Plan, groups: tuple[Group, ...]) -> dict[str, IdRule]:
    """Each group's rule; every derived id is above every numeric id the layout gives.

    A rule's ``ids`` are its rendered instances' own ids, by group index, where each
    instance names exactly one (empty otherwise: nothing names them).
    """
    numeric = [int(p.engine_id) for p in plan.processes if p.engine_id and p.engine_id.isdigit()]
    base = max(numeric, default=-1) + 1
    out = {}
    for k, g in enumerate(groups):
        named = [_instance_ids(g, i) for i in range(g.replicas)]
        ids = tuple(n[0] for n in named) if all(len(n) == 1 for n in named) else ()
        out[g.name] = IdRule(g.replicas, base, len(groups), k, ids)
    return out


def _instance_ids(g: Group, instance: int) -> list[str]:
    """The engine ids the processes of one rendered instance name (one, for an engine)."""
    found = [p.engine_id for pod in g.pods if pod.instance == instance for p in pod.processes
             if p.engine_id is not None]  # fmt: skip
    return list(dict.fromkeys(found))


def _kv_config_index(p: ProcessPlan) -> int | None:
    """Where the Plan put the engine's KV-transfer config (the JSON word naming its
    engine id), read from the Plan's own typed command: the one JSON object word that
    carries ``p.engine_id`` and re-serializes to itself."""
    for i, arg in enumerate(p.command):
        if not isinstance(arg, str) or not arg.startswith("{"):
            continue
        try:
            doc = json.loads(arg)
        except ValueError:
            continue
        same = json.dumps(doc, separators=(",", ":")) == arg
        if same and isinstance(doc, dict) and doc.get("engine_id") == p.engine_id:
            return i
    return None


def _reads_id(p: ProcessPlan) -> bool:
    """Whether ``p``'s command already reads its engine id from ``SERVEKIT_ENGINE_ID``."""
    return any(isinstance(a, Word) and any(isinstance(part, Ref) and part.var == ENGINE_ID_VAR
                                           for part in a.parts) for a in p.command)  # fmt: skip


def variable_id(p: ProcessPlan) -> ProcessPlan:
    """``p`` (same name) with its engine id read from ``SERVEKIT_ENGINE_ID``."""
    return template_process(p).model_copy(update={"name": p.name})


def template_process(p: ProcessPlan) -> ProcessPlan:
    """``p`` with its engine id read from ``SERVEKIT_ENGINE_ID`` (its value here: ``p``'s)."""
    if p.engine_id is None or _reads_id(p):
        return p.model_copy(update={"name": SCALED + p.name})
    index = _kv_config_index(p)
    if index is None:
        raise UsageError(
            f"k8s.elastic=on: {p.name} names engine_id {p.engine_id} outside its KV-transfer "
            "config; render without k8s.elastic"
        )
    arg = p.command[index]
    assert isinstance(arg, str)
    doc = json.loads(arg)
    mark = "\x00servekit-engine-id\x00"
    doc["engine_id"] = mark
    before, after = json.dumps(doc, separators=(",", ":")).split(json.dumps(mark))
    word = Word(parts=(before + '"', Ref(var=ENGINE_ID_VAR, value=p.engine_id), '"' + after))
    command = (*p.command[:index], word, *p.command[index + 1 :])
    return p.model_copy(update={"name": SCALED + p.name, "command": command})


def _alike(p: ProcessPlan, template: ProcessPlan) -> bool:
    """``p`` is ``template`` with ``p``'s engine id and its own leader's address."""
    swapped = template_process(template)
    if p.engine_id is not None:
        swapped = swapped.model_copy(
            update={
                "command": tuple(
                    Word(
                        parts=tuple(
                            Ref(var=part.var, value=p.engine_id)
                            if isinstance(part, Ref) and part.var == ENGINE_ID_VAR
                            else part
                            for part in a.parts
                        ),
                        when=a.when,
                    )
                    if isinstance(a, Word)
                    else a
                    for a in swapped.command
                )
            }
        )
    node = "${LEADER}"
    return (
        resolved_argv(p.command, node_text=node) == resolved_argv(swapped.command, node_text=node)
        and p.env == template.env
        and p.settings == template.settings
        and p.bind_host == template.bind_host
    )


def check_alike(r: K8sRendering) -> None:
    """Every rendered instance of a group runs its first's processes but for the engine
    id and the leader's address, so an index beyond them may run the first's."""
    for g in r.groups:
        for pod in g.pods:
            first = g.pod(0, pod.worker)
            if len(pod.processes) != len(first.processes):
                raise UsageError(
                    f"k8s.elastic=on: {pod.name} runs other processes than {first.name}"
                )
            for p, t in zip(pod.processes, first.processes, strict=True):
                if not _alike(r.processes[p.name], r.processes[t.name]):
                    raise UsageError(
                        f"k8s.elastic=on: {p.name} differs from {t.name} in more than its "
                        "engine id and leader; render without k8s.elastic"
                    )


def pod_rows(r: K8sRendering, g: Group, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``pod.sh``'s rows for every group index beyond the rendered ones (a ``*`` index);
    for a group whose pods serve per incarnation (:func:`incarnation_groups`), each
    rendered row's id too, and the uid's switch on every row."""
    rule = id_rules(r.plan, r.groups)[g.name]
    uid = g.name in incarnation_groups(r)
    if uid:
        for row in rows:
            row.update(id_fixed=rule.ids[int(row["instance"])], id_uid=1)
    out = []
    for row in rows:
        if row["instance"] != 0:
            continue
        procs = " ".join(SCALED + name for name in str(row["procs"]).split())
        fresh = {k: v for k, v in row.items() if k != "id_fixed"}
        fresh.update(instance="*", procs=procs, unit="", id_base=rule.base, id_step=rule.step,
                     id_offset=rule.offset, rendered=rule.rendered)  # fmt: skip
        out.append(fresh)
    return out


def bootstrap_groups(r: K8sRendering) -> frozenset[str]:
    """The groups whose API servers a decoder is told by engine id: bootstrap mode's
    prefills."""
    servers = bootstrap_servers(r)
    return frozenset(g.name for g in r.groups
                     if any(p.name in servers for pod in g.pods for p in pod.processes))  # fmt: skip


def incarnation_groups(r: K8sRendering) -> frozenset[str]:
    """The groups whose engine ids are per pod incarnation: every bootstrap group."""
    return bootstrap_groups(r)


def incarnation_processes(r: K8sRendering, changes: list[Change]) -> None:
    """Every process of a per-incarnation group reads its engine id from ``pod.sh``
    (the rule's id, ``-``, the pod's uid), each such change recorded."""
    uid_groups = incarnation_groups(r)
    for g in r.groups:
        if g.name not in uid_groups:
            continue
        for pod in g.pods:
            for proc in pod.processes:
                p = r.processes[proc.name]
                if p.engine_id is None:
                    continue
                r.processes[p.name] = variable_id(p)
                changes.append(Change(p.name, "argv", f"engine_id {p.engine_id}",
                                      f"engine_id {p.engine_id}-${{{POD_UID_VAR}}}",
                                      "incarnation"))  # fmt: skip


def template_scripts(r: K8sRendering, g: Group) -> list[ProcessPlan]:
    """The first instance's processes with the engine id as a variable."""
    return [template_process(r.processes[p.name]) for pod in g.pods if pod.instance == 0
            for p in pod.processes]  # fmt: skip


def discovery_spec(r: K8sRendering) -> DiscoverySpec:
    """Per group its pods' labels and, per worker index, the API and KV-event ports; in
    bootstrap mode, per prefill API server its bootstrap port and DP rank, and per
    prefill group the rule of its engine ids and their pod-uid suffix.

    The spec goes through the proxy's own reader before it is written, so a rendering
    never ships a spec its proxy would refuse."""
    proxy = r.proxy
    assert proxy is not None and proxy.proxy is not None
    publishers = {p.engine.process: p.events.port for p in proxy.proxy.kv_events}
    servers = bootstrap_servers(r)
    named, uid_groups = bootstrap_groups(r), incarnation_groups(r)
    rules = id_rules(r.plan, r.groups)
    roles = []
    for g in r.groups:
        workers = []
        for pod in g.pods:
            if pod.instance != 0:
                continue
            endpoints = tuple(
                _endpoint(p, publishers.get(p.name), servers.get(p.name))
                for p in pod.processes
                if p.api_port is not None
            )
            if endpoints:  # a pod serving no API (headless ranks) is a worker index unnamed
                workers.append(WorkerPorts(pod.worker, endpoints))
        selector = (("app.kubernetes.io/instance", r.options.prefix), (GROUP_LABEL, g.name))
        if g.name in named:
            roles.append(RoleSpec(g.role, selector, tuple(workers), engine_id_from="id_rule",
                                  engine_ids=rules[g.name],
                                  engine_id_pod_uid=g.name in uid_groups))  # fmt: skip
        else:
            roles.append(RoleSpec(g.role, selector, tuple(workers)))
    spec = DiscoverySpec(tuple(roles))
    try:
        spec_from_doc(spec.to_doc())
    except UsageError as exc:
        raise UsageError(f"k8s.elastic=on: the discovery spec would be refused by the proxy "
                         f"({exc.message}); render without k8s.elastic") from None  # fmt: skip
    return spec


def _endpoint(p: ProcessPlan, events: int | None, server: Bootstrap | None) -> Endpoint:
    """One API server in the spec: its ports, and in bootstrap mode its own server's port
    and, under DP, its rank (vLLM's ``_dp<rank>``)."""
    assert p.api_port is not None
    if server is None:
        return Endpoint(p.api_port, events)
    rank = p.dp_rank if (p.dp_size or 1) > 1 else None
    return Endpoint(p.api_port, events, dp_rank=rank, bootstrap_port=server.server.port)


def bootstrap_servers(r: K8sRendering) -> dict[str, Bootstrap]:
    """Bootstrap mode: each prefill API server's :class:`~servekit.render.wiring.Bootstrap`
    (read from the Plan's wiring), by its process; empty in other modes.

    Discovery names, for each API server, the bootstrap server of its own process on
    its own pod and the id its instance's :class:`IdRule` gives (with vLLM's DP suffix):
    a group whose rendering says otherwise is refused in one line rather than discovered
    under names its engines do not have."""
    proxy = r.proxy
    if proxy is None or proxy.proxy is None or not proxy.proxy.bootstrap:
        return {}
    by_process = {b.server.process: b for b in proxy.proxy.bootstrap}
    named = dict(zip((a.process for a in proxy.proxy.prefill), proxy.proxy.bootstrap,
                     strict=True))  # fmt: skip
    rules = id_rules(r.plan, r.groups)
    out = {}
    for g in r.groups:
        if g.role != "prefill":
            continue
        rule = rules[g.name]
        if len(rule.ids) != g.replicas:
            bad = next(i for i in range(g.replicas) if len(_instance_ids(g, i)) != 1)
            raise UsageError(
                f"k8s.elastic=on: instance {bad} of {g.name} names "
                f"{len(_instance_ids(g, bad))} engine ids; a bootstrap-mode proxy names one "
                "per instance; render without k8s.elastic"
            )
        for pod in g.pods:
            for p in pod.processes:
                b = named.get(p.name)
                if b is None:
                    if p.name in by_process:
                        raise UsageError(
                            f"k8s.elastic=on: {p.name} on {pod.name} runs the bootstrap server "
                            "of another API server; discovery names each API server's own; "
                            "render without k8s.elastic"
                        )
                    continue
                if b.server.process != p.name:
                    raise UsageError(
                        f"k8s.elastic=on: the proxy names {p.name}'s bootstrap server on "
                        f"{b.server.process}, and discovery names each API server's own; "
                        "render without k8s.elastic"
                    )
                own = kv_engine_id(rule.ids[pod.instance], p.dp_rank, p.dp_size)
                if b.engine_id != own:  # the proxy's name is the rule's
                    raise UsageError(
                        f"k8s.elastic=on: the proxy names {p.name} engine {b.engine_id}, its "
                        f"instance serves {own}; render without k8s.elastic"
                    )
                out[p.name] = b
    return out


def refuse_unfit(r: K8sRendering) -> None:
    """What elastic rendering does not handle, refused in one line before anything."""
    proxy = r.proxy
    if proxy is None or proxy.proxy is None:
        raise UsageError("k8s.elastic=on: this layout has no proxy to discover its engines")
    if r.options.autoscale != "off":
        roles = [g.role for g in r.groups]
        twice = sorted({x for x in roles if roles.count(x) > 1})
        if twice:
            raise UsageError(
                f"k8s.autoscale: role {twice[0]} has several LeaderWorkerSets (instances of "
                "different shapes); the proxy's desired count is per role: drop k8s.autoscale"
            )
    check_alike(r)
    bootstrap_servers(r)


def proxy_command(
    r: K8sRendering, p: ProcessPlan, host_of: HostOf, changes: list[Change]
) -> tuple[Arg, ...]:
    """The proxy's command with discovery in place of the backend lists (the rest as
    the pods' rendering emits it), and the change recorded."""
    wiring = p.proxy
    assert wiring is not None
    bare = wiring.model_copy(
        update={
            "prefill": (),
            "decode": (),
            "replica": (),
            "bootstrap": (),
            "failure_domains": (),
            "kv_events": (),
            "admin": True,
            "admin_key_env": ADMIN_KEY_ENV,
        }
    )
    listen = Word(parts=(Ref(var=POD_IP, value=p.host),))
    callback = p.address() if wiring.metaserver is not None else None
    words = proxy_words(bare, host_of, listen=listen, metaserver=callback)
    added = elastic_words(r, bool(wiring.kv_events))
    gone = len(wiring.backends())
    changes.append(
        Change(p.name, "argv", f"{gone} backends by name",
               " ".join(_text(w) for _, w in added), "elastic")
    )  # fmt: skip
    return tuple(w for _, w in words) + tuple(w for _, w in added)


def _text(arg: Arg) -> str:
    if isinstance(arg, str):
        return arg
    return "".join(p if isinstance(p, str) else "${" + p.var + "}" for p in arg.parts)


def elastic_words(r: K8sRendering, wiring_has_events: bool) -> list[tuple[str, Arg]]:
    """The proxy's words elastic rendering adds (each with its config field)."""
    o = r.options
    out: list[tuple[str, Arg]] = []

    def add(name: str, value: object, when: Ref | None = None) -> None:
        for word in option_words(name, value):
            assert isinstance(word, str | Word), word
            out.append((name, word if when is None else _when(word, when)))

    if wiring_has_events:
        switch = kv_events_switch()
        add("prefill_policy", KV_POLICY, switch)
        add("decode_policy", KV_POLICY, switch)
    add("discovery", "kubernetes")
    spec = Word(parts=(Ref(var="BUNDLE_DIR", value=MOUNT), "/" + SPEC_FILE))
    add("discovery_spec", spec)
    add("drain_grace_s", float(o.drain_grace))
    add("pool_wait_s", float(o.pool_wait))
    for name, var in (("kube_api", KUBE_API_VAR), ("kube_token_file", KUBE_TOKEN_VAR)):
        ref = Ref(var=var, value="")
        add(name, Word(parts=(ref,)), ref)
    if o.autoscale != "off":
        add("autoscale", True)
        add("max_replicas", o.max_replicas)
        if o.scale_timing != DEFAULT_TIMING:
            interval, up_window, up_period, down_window, down_period = o.scale_timing
            add("autoscale_interval_s", float(interval))
            add("scale_up_window_s", float(up_window))
            add("scale_up_period_s", float(up_period))
            add("scale_down_window_s", float(down_window))
            add("scale_down_period_s", float(down_period))
        if o.slo is not None:
            add("slo_ttft_s", o.slo[0])
            add("slo_tpot_s", o.slo[1])
    return out


def _when(word: Arg, when: Ref) -> Arg:
    parts = word.parts if isinstance(word, Word) else (word,)
    return Word(parts=parts, when=when)


def hook_wait(o: K8sSettings) -> int:
    """Seconds the preStop hook waits for the proxies."""
    return o.drain_grace + o.drain_wait


def grace_period(o: K8sSettings) -> int:
    """terminationGracePeriodSeconds: the hook's wait, its own slack (5 s) and the
    engine's shutdown after SIGTERM."""
    return hook_wait(o) + 5 + SHUTDOWN_S


def peers_service(prefix: str) -> str:
    return f"{prefix}-proxy-peers"


def engine_pod(r: K8sRendering, group: Group, template: dict[str, Any]) -> None:
    """An engine pod template's preStop hook, grace period and the env the hook reads."""
    spec = template["spec"]
    spec["terminationGracePeriodSeconds"] = grace_period(r.options)
    container = spec["containers"][0]
    name, key = admin_secret(r.options)
    container["env"] = [
        *container["env"],
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": ADMIN_KEY_ENV, "valueFrom": {"secretKeyRef": {"name": name, "key": key}}},
    ]
    if group.name in incarnation_groups(r):
        container["env"].append(
            {"name": POD_UID_VAR, "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}}
        )
    container["lifecycle"] = {
        "preStop": {"exec": {"command": ["/bin/bash", f"{MOUNT}/pod.sh", group.name, "prestop"]}}
    }


def proxy_pod(r: K8sRendering, template: dict[str, Any]) -> None:
    """The proxy's pod: its ServiceAccount (to list and watch pods) and admin key."""
    spec = template["spec"]
    spec["serviceAccountName"] = service_account(r.options.prefix)
    container = spec["containers"][0]
    name, key = admin_secret(r.options)
    container["env"] = [
        *container["env"],
        {"name": ADMIN_KEY_ENV, "valueFrom": {"secretKeyRef": {"name": name, "key": key}}},
    ]


def admin_secret(o: K8sSettings) -> tuple[str, str]:
    name, key = o.admin_secret
    return (name or f"{o.prefix}-admin", key)


def service_account(prefix: str) -> str:
    return f"{prefix}-proxy"


def objects(r: K8sRendering, proxy_port: int) -> list[dict[str, Any]]:
    """The proxy's ServiceAccount, its Role and RoleBinding (get/list/watch pods), and
    the headless Service the engines' preStop hook resolves to every proxy pod."""
    prefix = r.options.prefix
    labels = r.labels("proxy")
    account = service_account(prefix)
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": account, "labels": labels}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": account, "labels": labels},
         "rules": [{"apiGroups": [""], "resources": ["pods"],
                    "verbs": ["get", "list", "watch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": account, "labels": labels},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": account},
         "subjects": [{"kind": "ServiceAccount", "name": account}]},
        {"apiVersion": "v1", "kind": "Service",
         "metadata": {"name": peers_service(prefix), "labels": labels},
         "spec": {"clusterIP": "None", "selector": labels,
                  "ports": [{"name": "http", "port": proxy_port, "targetPort": proxy_port,
                             "protocol": "TCP"}]}},
    ]  # fmt: skip


def _series(r: K8sRendering, metric: str, role: str) -> str:
    return f'{metric}{{role="{role}",pod=~"{proxy_service(r.options.prefix)}-.*"}}'


def _query(r: K8sRendering, role: str) -> str:
    return f"max({_series(r, 'servekit_desired_replicas', role)})"


def _need_query(r: K8sRendering, role: str) -> str:
    return f"ceil(sum({_series(r, 'servekit_autoscale_need', role)}))"


def _triggers(r: K8sRendering, role: str) -> list[dict[str, Any]]:
    """KEDA's prometheus triggers for one role (its HPA takes the larger count).

    One proxy pod: its desired count (``max``: every worker's series says the pod's).
    Several: each pod's desired count is sized for its own share of the traffic, so
    the pods' needs are added up (``ceil(sum(...))``, additive over pods and workers);
    the pods' desired counts stay as a second trigger, never summed, for what a need
    does not carry: a count held while nothing is measured yet, and one engine more
    than there are while the objective is missed."""
    o = r.options
    queries = [("desired", _query(r, role))]
    if o.proxy_replicas > 1:
        queries.insert(0, ("need", _need_query(r, role)))
    return [
        {"type": "prometheus", **({"name": name} if len(queries) > 1 else {}),
         "metricType": "AverageValue",
         "metadata": {"serverAddress": o.prometheus, "query": query, "threshold": "1"}}
        for name, query in queries
    ]  # fmt: skip


def autoscale_reads(o: K8sSettings) -> str:
    """What the autoscalers read, in words (the rendering's summary)."""
    if o.proxy_replicas == 1 and (o.autoscale == "keda" or o.proxy_workers == 1):
        return "the proxy's servekit_desired_replicas{role}"
    if o.autoscale == "keda":
        return ("the proxy pods' servekit_autoscale_need{role} added up, or the largest "
                "of their servekit_desired_replicas{role} when that is more")  # fmt: skip
    return "every proxy process's servekit_autoscale_need{role} added up"


def _external_metric(o: K8sSettings) -> str:
    """The HPA's external metric: it adds up the value of every series the adapter
    gives it (``AverageValue``), so one proxy process's desired count, or else every
    process's need (a share of the traffic each: their sum is the role's)."""
    single = o.proxy_replicas == 1 and o.proxy_workers == 1
    return "servekit_desired_replicas" if single else "servekit_autoscale_need"


def behavior(o: K8sSettings) -> dict[str, Any]:
    """The HPA's rate limits: the proxy's own (its windows, doubling up, one engine down)."""
    _, up_window, up_period, down_window, down_period = o.scale_timing
    return {
        "scaleUp": {
            "stabilizationWindowSeconds": up_window,
            "policies": [{"type": "Percent", "value": 100, "periodSeconds": up_period}],
        },
        "scaleDown": {
            "stabilizationWindowSeconds": down_window,
            "policies": [{"type": "Pods", "value": 1, "periodSeconds": down_period}],
        },
    }


def autoscalers(r: K8sRendering) -> list[dict[str, Any]]:
    """Per LeaderWorkerSet a KEDA ScaledObject or an HPA on its scale subresource (per
    DisaggregatedSet role: on its DisaggregatedSetRoleScaler), aiming at exactly the
    proxy's desired count (AverageValue 1 per replica)."""
    o = r.options
    out = []
    for g in r.groups:
        target = {"apiVersion": LWS_API, "kind": "LeaderWorkerSet", "name": g.name}
        if o.kind == "disaggregatedset":  # the role scaler LWS v0.10's controller makes
            target = {"apiVersion": DS_API, "kind": "DisaggregatedSetRoleScaler",
                      "name": f"{o.prefix}-{g.name.removeprefix(o.prefix + '-')}"}  # fmt: skip
        meta = {"name": g.name, "labels": r.labels(g.role)}
        if o.autoscale == "keda":
            out.append({
                "apiVersion": KEDA_API, "kind": "ScaledObject", "metadata": meta,
                "spec": {
                    "scaleTargetRef": target,
                    "minReplicaCount": 1, "maxReplicaCount": o.max_replicas,
                    "pollingInterval": o.scale_timing[0],
                    "advanced": {"horizontalPodAutoscalerConfig": {"behavior": behavior(o)}},
                    "triggers": _triggers(r, g.role),
                },
            })  # fmt: skip
        else:
            out.append({
                "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
                "metadata": meta,
                "spec": {
                    "scaleTargetRef": target,
                    "minReplicas": 1, "maxReplicas": o.max_replicas,
                    "behavior": behavior(o),
                    "metrics": [{"type": "External", "external": {
                        "metric": {"name": _external_metric(o),
                                   "selector": {"matchLabels": {"role": g.role}}},
                        "target": {"type": "AverageValue", "averageValue": "1"}}}],
                },
            })  # fmt: skip
    return out
