"""The Pod Security Standards (Kubernetes 1.34) and the QoS class, applied to pod templates.

Written from the standard's own tables (kubernetes.io/docs/concepts/security/
pod-security-standards), independently of the renderer: each ``baseline`` and
``restricted`` control is a check returning what it refuses. :func:`level` is the
strictest level whose controls all pass, the level a namespace's
``pod-security.kubernetes.io/enforce`` label must allow. :func:`qos` is the kubelet's
QoS class rule (every container, init containers included, has cpu and memory
requests equal to its limits: Guaranteed).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

BASELINE_CAPABILITIES = {
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
}
SAFE_SYSCTLS = {
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
}
RESTRICTED_VOLUMES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}
Spec = dict[str, Any]


def _containers(spec: Spec) -> Iterator[dict[str, Any]]:
    for key in ("containers", "initContainers", "ephemeralContainers"):
        yield from spec.get(key, [])


def _security(c: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = c.get("securityContext") or {}
    return out


def host_namespaces(spec: Spec) -> list[str]:
    return [f for f in ("hostNetwork", "hostPID", "hostIPC") if spec.get(f)]


def privileged(spec: Spec) -> list[str]:
    return [c["name"] for c in _containers(spec) if _security(c).get("privileged")]


def capabilities(spec: Spec) -> list[str]:
    added = {
        a for c in _containers(spec) for a in _security(c).get("capabilities", {}).get("add", [])
    }
    return sorted(added - BASELINE_CAPABILITIES)


def host_path_volumes(spec: Spec) -> list[str]:
    return [v["name"] for v in spec.get("volumes", []) if "hostPath" in v]


def host_ports(spec: Spec) -> list[str]:
    # the API server defaults hostPort to containerPort for hostNetwork pods
    found = []
    for c in _containers(spec):
        for p in c.get("ports", []):
            if p.get("hostPort") or spec.get("hostNetwork"):
                found.append(f"{c['name']}:{p['containerPort']}")
    return found


def seccomp_unconfined(spec: Spec) -> list[str]:
    profiles = [spec.get("securityContext", {}).get("seccompProfile", {})]
    profiles += [_security(c).get("seccompProfile", {}) for c in _containers(spec)]
    return ["Unconfined" for p in profiles if p.get("type") == "Unconfined"]


def proc_mount(spec: Spec) -> list[str]:
    return [
        c["name"]
        for c in _containers(spec)
        if _security(c).get("procMount", "Default") != "Default"
    ]


def sysctls(spec: Spec) -> list[str]:
    return [
        s["name"]
        for s in spec.get("securityContext", {}).get("sysctls", [])
        if s["name"] not in SAFE_SYSCTLS
    ]


def windows_host_process(spec: Spec) -> list[str]:
    contexts = [spec.get("securityContext", {})] + [_security(c) for c in _containers(spec)]
    return ["hostProcess" for s in contexts if s.get("windowsOptions", {}).get("hostProcess")]


BASELINE: dict[str, Callable[[Spec], list[str]]] = {
    "host namespaces": host_namespaces,
    "privileged containers": privileged,
    "capabilities": capabilities,
    "hostPath volumes": host_path_volumes,
    "host ports": host_ports,
    "seccomp": seccomp_unconfined,
    "/proc mount type": proc_mount,
    "sysctls": sysctls,
    "HostProcess": windows_host_process,
}


def volume_types(spec: Spec) -> list[str]:
    return [
        v["name"] for v in spec.get("volumes", []) if not (set(v) - {"name"}) <= RESTRICTED_VOLUMES
    ]


def privilege_escalation(spec: Spec) -> list[str]:
    return [
        c["name"]
        for c in _containers(spec)
        if _security(c).get("allowPrivilegeEscalation") is not False
    ]


def non_root(spec: Spec) -> list[str]:
    pod = spec.get("securityContext", {}).get("runAsNonRoot")
    return [
        c["name"] for c in _containers(spec) if _security(c).get("runAsNonRoot", pod) is not True
    ]


def root_user(spec: Spec) -> list[str]:
    pod = spec.get("securityContext", {}).get("runAsUser")
    return [c["name"] for c in _containers(spec) if _security(c).get("runAsUser", pod) == 0]


def seccomp_required(spec: Spec) -> list[str]:
    pod = spec.get("securityContext", {}).get("seccompProfile", {}).get("type")
    return [
        c["name"]
        for c in _containers(spec)
        if _security(c).get("seccompProfile", {}).get("type", pod)
        not in ("RuntimeDefault", "Localhost")
    ]


def drop_all(spec: Spec) -> list[str]:
    found = []
    for c in _containers(spec):
        caps = _security(c).get("capabilities", {})
        if "ALL" not in caps.get("drop", []) or set(caps.get("add", [])) - {"NET_BIND_SERVICE"}:
            found.append(c["name"])
    return found


RESTRICTED: dict[str, Callable[[Spec], list[str]]] = {
    "volume types": volume_types,
    "privilege escalation": privilege_escalation,
    "running as non-root": non_root,
    "running as non-root user": root_user,
    "seccomp (restricted)": seccomp_required,
    "capabilities (restricted)": drop_all,
}


def violations(
    spec: Spec, controls: dict[str, Callable[[Spec], list[str]]]
) -> dict[str, list[str]]:
    return {name: found for name, check in controls.items() if (found := check(spec))}


def level(spec: Spec) -> str:
    """The strictest Pod Security Standards level this pod spec meets."""
    if violations(spec, BASELINE):
        return "privileged"
    if violations(spec, RESTRICTED):
        return "baseline"
    return "restricted"


LEVELS = ("restricted", "baseline", "privileged")


def least(levels: list[str]) -> str:
    """The level a namespace holding pods of these levels must allow."""
    return max(levels, key=LEVELS.index) if levels else "restricted"


def qos(spec: Spec) -> str:
    """The QoS class of a pod with this spec (Guaranteed, Burstable or BestEffort)."""
    every = [*spec.get("containers", []), *spec.get("initContainers", [])]
    resources = [c.get("resources", {}) for c in every]
    if not any(r.get("requests") or r.get("limits") for r in resources):
        return "BestEffort"
    for r in resources:
        req, lim = r.get("requests", {}), r.get("limits", {})
        for kind in ("cpu", "memory"):
            if kind not in lim or req.get(kind, lim[kind]) != lim[kind]:
                return "Burstable"
    return "Guaranteed"


def pod_specs(obj: dict[str, Any]) -> Iterator[tuple[str, Spec]]:
    """(where, pod spec) of every pod template an object holds."""
    kind = obj["kind"]
    if kind == "Deployment":
        yield f"{obj['metadata']['name']}", obj["spec"]["template"]["spec"]
    specs: list[tuple[str, dict[str, Any]]] = []
    if kind == "LeaderWorkerSet":
        specs = [(obj["metadata"]["name"], obj["spec"])]
    elif kind == "DisaggregatedSet":
        specs = [(r["name"], r["spec"]) for r in obj["spec"]["roles"]]
    for name, spec in specs:
        tmpl = spec["leaderWorkerTemplate"]
        for key in ("leaderTemplate", "workerTemplate"):
            if key in tmpl:
                yield f"{name}.{key}", tmpl[key]["spec"]
