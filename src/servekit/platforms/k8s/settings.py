"""``--set k8s.KEY=VALUE``: every option of a Kubernetes rendering, declared once.

:data:`SETTINGS` is the one table: each option's name, default, help and parser.
The platform table (``platforms/table.py``) takes its keys from it, ``docs/kubernetes.md``
holds the table :func:`settings_table` writes (a test compares them), and
:func:`parse_settings` turns the strings an operator gave into :class:`K8sSettings`,
refusing a bad value with one line that names the option and the fix.

The per-pod resources come from :data:`NODE_SHARES`: what the field's own manifests
ask for a whole node of each accelerator, scaled to the devices a pod holds, so that
engine pods are Guaranteed (requests equal limits) unless an operator says otherwise.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Literal

from servekit.catalog import Layout
from servekit.errors import UsageError
from servekit.platforms.platform import SettingSpec

ACCELERATORS: dict[str, str | None] = {
    "ascend-a3": "huawei.com/ascend-1980",
    "ascend-a2": "huawei.com/Ascend910",
    "nvidia": "nvidia.com/gpu",
    "cpu": None,
}
"""Device-plugin resource per hardware: Huawei CCE names A3 NPUs ``ascend-1980``,
MindCluster ``Ascend910``; clusters differ, so ``--set k8s.accelerator=NAME`` overrides."""

DEFAULT_PROMETHEUS = "http://prometheus-operated.monitoring.svc:9090"
"""Where KEDA's prometheus trigger asks (the Prometheus Operator's Service in ``monitoring``)."""
DEFAULT_TIMING = (5, 15, 30, 300, 60)
"""The autoscaler's interval, scale-up window and period, scale-down window and period
(s): the proxy's own defaults."""
K8sKind = Literal["leaderworkerset", "disaggregatedset"]
KINDS: tuple[K8sKind, ...] = ("leaderworkerset", "disaggregatedset")
WORKDIR = "/workspace"
"""The container's working folder when the layout's model path is relative (a mount
path must be absolute, so a relative model path is mounted under it)."""
ASCEND_HOST_FILES: tuple[tuple[str, str, str], ...] = (
    ("hccn-conf", "/etc/hccn.conf", "File"),
    ("driver-tools", "/usr/local/Ascend/driver/tools", "Directory"),
)
"""What vllm-ascend's own manifests mount from an Ascend host: the NPUs' RoCE
addresses HCCL reads (Kthena's PD guide) and the driver's tools (the nightly LWS)."""


@dataclass(frozen=True)
class NodeShare:
    """What a whole node's pod asks, and where the figure comes from."""

    cpu: int
    memory_gi: int
    ephemeral_gi: int
    shm_gi: int
    source: str


NODE_SHARES: dict[str, NodeShare] = {
    "ascend-a3": NodeShare(
        125,
        512,
        100,
        512,
        "vllm-ascend tests/e2e/nightly/multi_node/scripts/lws_560t.yaml.jinja2 "
        "(A3, 16 NPUs a node)",
    ),
    "ascend-a2": NodeShare(
        125,
        512,
        100,
        15,
        "vllm-ascend tests/e2e/nightly/multi_node/scripts/lws-a2.yaml.jinja2 (A2, 8 NPUs a node)",
    ),
    "nvidia": NodeShare(
        32,
        512,
        64,
        2,
        "llm-d guides/wide-ep-lws/manifests/modelserver/base/decode.yaml (8 GPUs a node; "
        "shm 2Gi for NCCL)",
    ),
    "cpu": NodeShare(
        2,
        8,
        10,
        1,
        "servekit's own: a real vLLM CPU engine with the tiny model (docs/local.md) in one pod",
    ),
}
PROXY_DEFAULTS = {"cpu": "2", "memory": "4Gi", "ephemeral-storage": "1Gi"}

# Kubernetes' own formats (apimachinery validation), bounded.
_QUANTITY = re.compile(
    r"^\+?(?:[0-9]{1,12}(?:\.[0-9]{0,9})?|\.[0-9]{1,9})(?:[KMGTPE]i|[numkMGTPE]|[eE]\+?[0-9]{1,2})?$"
)
_DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]{0,30}[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_LABEL_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_LABEL_KEY = re.compile(rf"^(?:[a-z0-9]([-a-z0-9.]{{0,251}}[a-z0-9])?/)?{_LABEL_NAME}$")
_LABEL_VALUE = re.compile(rf"^(?:{_LABEL_NAME})?$")
_RESOURCE = re.compile(
    r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
_HF_REPO = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}(/[A-Za-z0-9][A-Za-z0-9._-]{0,95})?$")
_REVISION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$")
_ENDPOINT = re.compile(r"^https?://[A-Za-z0-9.-]{1,253}(:[0-9]{1,5})?(/[A-Za-z0-9._~/-]{0,200})?$")
_HOST_PATH = re.compile(r"^(/[A-Za-z0-9._+@-]{1,255}){1,32}/?$")
_SUB_PATH = re.compile(r"^[A-Za-z0-9._+@-]{1,255}(/[A-Za-z0-9._+@-]{1,255}){0,31}$")
_IMAGE = re.compile(r"^[a-z0-9]([a-z0-9._/:-]{0,250}[a-z0-9])?(@sha256:[0-9a-f]{64})?$")
_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
MAX_VALUE = 4096


@dataclass(frozen=True)
class ModelSource:
    """Where the weights come from; always mounted at the layout's model path."""

    kind: Literal["host", "pvc", "hf"]
    path: str = ""  # host: the node's folder ("" = the mount path)
    claim: str = ""  # pvc
    sub_path: str = ""  # pvc: a folder inside the claim
    repo: str = ""  # hf: the Hugging Face repository
    revision: str = ""  # hf: a branch, tag or commit ("" = the default branch)

    def describe(self, mount: str) -> str:
        if self.kind == "host":
            return f"the node's folder {self.path or mount} (hostPath) at {mount}"
        if self.kind == "pvc":
            sub = f" folder {self.sub_path}" if self.sub_path else ""
            return f"PersistentVolumeClaim {self.claim}{sub} at {mount}"
        rev = f"@{self.revision}" if self.revision else ""
        return f"hf:{self.repo}{rev} downloaded before the engines start, at {mount}"


@dataclass(frozen=True)
class Toleration:
    key: str
    value: str
    effect: str

    def as_k8s(self) -> dict[str, str]:
        out = {"key": self.key, "operator": "Equal" if self.value else "Exists"}
        if self.value:
            out["value"] = self.value
        if self.effect:
            out["effect"] = self.effect
        return out


@dataclass(frozen=True)
class K8sSettings:
    """A Kubernetes rendering's options, parsed and checked (``auto`` values resolved)."""

    accelerator: str | None
    kind: K8sKind = "leaderworkerset"
    prefix: str = "sk"
    image: str = ""
    model: ModelSource = ModelSource("host")
    model_cache: ModelSource | None = None  # hf: a PVC to download into (None: an emptyDir)
    model_size: str = "1Ti"
    model_secret: tuple[str, str] | None = None
    model_endpoint: str = ""
    network: Literal["pod", "host"] = "pod"
    host_files: bool = False
    rdma: tuple[str, int] | None = None
    cpu: str | None = None
    memory: str | None = None
    ephemeral_storage: str | None = None
    shm: str | None = None
    proxy_cpu: str = PROXY_DEFAULTS["cpu"]
    proxy_memory: str = PROXY_DEFAULTS["memory"]
    proxy_replicas: int = 1
    proxy_workers: int = 1
    gang: Literal["none", "volcano"] = "none"
    volcano_queue: str = ""
    exclusive_topology: str = ""
    node_selector: tuple[tuple[str, str], ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    image_pull_secrets: tuple[str, ...] = ()
    podmonitor: bool = False
    elastic: bool = False
    drain_grace: int = 30
    drain_wait: int = 120
    pool_wait: int = 60
    autoscale: Literal["off", "keda", "hpa"] = "off"
    max_replicas: int = 16
    scale_timing: tuple[int, int, int, int, int] = DEFAULT_TIMING
    slo: tuple[float, float] | None = None
    prometheus: str = DEFAULT_PROMETHEUS
    admin_secret: tuple[str, str] = ("", "key")
    given: frozenset[str] = field(default_factory=frozenset)
    """The options the operator set (the rest are defaults), for the summary."""
    preflight: bool = True
    """Each engine pod's preflight initContainer (``render --no-preflight``: none)."""


BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL: dict[str, Fraction] = {
    "m": Fraction(1, 1000),
    **{suffix: Fraction(1000**i) for i, suffix in enumerate("kMGTPE", start=1)},
}


def quantity_value(text: str) -> Fraction:
    """A Kubernetes quantity as a number (``500m`` -> 1/2, ``2Gi`` -> 2147483648)."""
    for suffix, factor in BINARY.items():
        if text.endswith(suffix):
            return Fraction(text[: -len(suffix)]) * factor
    exp = re.search(r"[eE]([+-]?[0-9]+)$", text)
    if exp is not None:
        power = int(exp.group(1))
        scale = Fraction(10) ** power
        return Fraction(text[: exp.start()]) * scale
    if text[-1:] in _DECIMAL:
        return Fraction(text[:-1]) * _DECIMAL[text[-1]]
    return Fraction(text)


def _refuse(name: str, value: str, why: str) -> UsageError:
    shown = value if len(value) <= 80 else value[:77] + "..."
    return UsageError(f"--set k8s.{name}={shown!r}: {why}")


def _quantity(name: str, value: str) -> str:
    if not _QUANTITY.match(value) or not any(
        c in "123456789" for c in value.split("e", maxsplit=1)[0]
    ):
        raise _refuse(name, value, "give a Kubernetes quantity above zero, e.g. 64, 500m, 512Gi")
    return value


def _choice(name: str, value: str, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise _refuse(name, value, f"choose one of {', '.join(choices)}")
    return value


def _pvc(name: str, value: str) -> ModelSource:
    claim, _, sub = value.partition("/")
    if not _DNS_SUBDOMAIN.match(claim) or (sub and not _sub_path_ok(sub)):
        raise _refuse(
            name, value, "give pvc:CLAIM or pvc:CLAIM/SUB/PATH (a claim name, a relative folder)"
        )
    return ModelSource("pvc", claim=claim, sub_path=sub.rstrip("/"))


def _sub_path_ok(sub: str) -> bool:
    parts = sub.rstrip("/").split("/")
    return bool(_SUB_PATH.match(sub.rstrip("/"))) and not any(p in (".", "..") for p in parts)


def parse_model(value: str) -> ModelSource:
    """``host``, ``host:/PATH``, ``pvc:CLAIM[/SUB]`` or ``hf:REPO[@REVISION]``."""
    head, sep, rest = value.partition(":")
    if value == "host":
        return ModelSource("host")
    if head == "host" and sep:
        if not _HOST_PATH.match(rest) or "/../" in rest + "/" or "/./" in rest + "/":
            raise _refuse("model", value, "give host:/ABSOLUTE/PATH (the folder on each node)")
        return ModelSource("host", path=rest.rstrip("/") or "/")
    if head == "pvc" and sep:
        return _pvc("model", rest)
    if head == "hf" and sep:
        repo, _, revision = rest.partition("@")
        if not _HF_REPO.match(repo) or (revision and not _REVISION.match(revision)):
            raise _refuse("model", value, "give hf:ORG/NAME or hf:ORG/NAME@REVISION")
        return ModelSource("hf", repo=repo, revision=revision)
    raise _refuse("model", value, "choose host, host:/PATH, pvc:CLAIM[/SUB] or hf:REPO[@REVISION]")


def _pairs(name: str, value: str, *, sep: str) -> tuple[tuple[str, str], ...]:
    out = []
    for item in (i.strip() for i in value.split(",") if i.strip()):
        key, found, val = item.partition(sep)
        if not found or not _LABEL_KEY.match(key) or not _LABEL_VALUE.match(val):
            raise _refuse(name, value, f"give KEY{sep}VALUE,... (node label keys and values)")
        out.append((key, val))
    return tuple(out)


def _tolerations(value: str) -> tuple[Toleration, ...]:
    out = []
    for item in (i.strip() for i in value.split(",") if i.strip()):
        head, _, effect = item.partition(":")
        key, _, val = head.partition("=")
        if (
            not _LABEL_KEY.match(key)
            or not _LABEL_VALUE.match(val)
            or (effect and effect not in _EFFECTS)
        ):
            raise _refuse(
                "tolerations",
                value,
                f"give KEY[=VALUE][:EFFECT],... (EFFECT one of {', '.join(_EFFECTS)})",
            )
        out.append(Toleration(key, val, effect))
    return tuple(out)


def _names(name: str, value: str) -> tuple[str, ...]:
    out = tuple(n.strip() for n in value.split(",") if n.strip())
    if not all(_DNS_SUBDOMAIN.match(n) for n in out):
        raise _refuse(
            name, value, "give Secret names (lowercase, digits, '-', '.'), comma-separated"
        )
    return out


SETTINGS: tuple[SettingSpec, ...] = (
    SettingSpec(
        "accelerator",
        "per hardware",
        "device-plugin resource of the accelerator (A3 huawei.com/ascend-1980, A2 "
        "huawei.com/Ascend910, GPU nvidia.com/gpu); none for no accelerator",
    ),
    SettingSpec("kind", "leaderworkerset", "leaderworkerset or disaggregatedset (as --k8s-kind)"),
    SettingSpec("prefix", "sk", "prefix of every object and pod name"),
    SettingSpec(
        "image",
        "the layout's",
        "the engine image every pod runs (REGISTRY/NAME:TAG or NAME@sha256:DIGEST); "
        "kustomization.yaml maps the name servekit-engine to it",
    ),
    SettingSpec(
        "model",
        "host",
        "where the weights come from, mounted at the layout's model path: host (the node's "
        "folder at the model path, as vllm-ascend's LWS), host:/PATH, pvc:CLAIM[/SUB], or "
        "hf:REPO[@REVISION] (downloaded by an init container before the engines start)",
    ),
    SettingSpec(
        "model_cache",
        "emptydir",
        "hf: download into each pod's emptyDir, or pvc:CLAIM[/SUB] (one download shared by "
        "every pod; a ReadWriteMany claim)",
    ),
    SettingSpec(
        "model_size",
        "1Ti",
        "hf with emptydir: the volume's size (added to the pod's ephemeral storage)",
    ),
    SettingSpec(
        "model_secret",
        "none",
        "hf: the Secret holding the Hugging Face token, NAME or NAME:KEY (key HF_TOKEN by default)",
    ),
    SettingSpec(
        "model_endpoint", "none", "hf: a Hugging Face mirror (HF_ENDPOINT), http(s)://HOST[/PATH]"
    ),
    SettingSpec(
        "network",
        "pod",
        "pod: every pod on the pod network (HCCL and the KV connectors on the pod's IP and "
        "NIC); host: hostNetwork for the groups whose HCCL or KV traffic crosses pods",
    ),
    SettingSpec(
        "host_files",
        "on for Ascend",
        "on/off: mount the host's /etc/hccn.conf and /usr/local/Ascend/driver/tools into "
        "Ascend engine pods, as vllm-ascend's manifests do",
    ),
    SettingSpec(
        "rdma",
        "rdma/ib for GPU layouts with a KV connector",
        "RESOURCE[=COUNT] or none: the RDMA device resource (and IPC_LOCK) of GPU engine "
        "pods that move KV between pods",
    ),
    SettingSpec("cpu", "per accelerator", "cpu of each engine pod (requests = limits)"),
    SettingSpec("memory", "per accelerator", "memory of each engine pod (requests = limits)"),
    SettingSpec("ephemeral_storage", "per accelerator", "ephemeral storage of each engine pod"),
    SettingSpec("shm", "per accelerator", "size of each engine pod's /dev/shm (a memory emptyDir)"),
    SettingSpec("proxy_cpu", PROXY_DEFAULTS["cpu"], "cpu of the proxy pod (requests = limits)"),
    SettingSpec(
        "proxy_memory", PROXY_DEFAULTS["memory"], "memory of the proxy pod (requests = limits)"
    ),
    SettingSpec(
        "proxy_replicas",
        "1",
        "proxy pods (the Deployment's replicas, 1 to 64): each routes, migrates and (elastic) "
        "discovers and drains on its own, so a lost one costs only its own connections; "
        "autoscaling then adds up the pods' servekit_autoscale_need",
    ),
    SettingSpec(
        "proxy_workers",
        "1",
        "proxy processes in each proxy pod (the proxy's --workers, one port through "
        "SO_REUSEPORT), 1 to 64: each is one event loop on one core, so more than "
        "k8s.proxy_cpu's whole cores is refused (they would only share its CPU quota)",
    ),
    SettingSpec(
        "gang",
        "none",
        "volcano: engine pods use schedulerName volcano and LWS makes a PodGroup per group "
        "(LWS's gangSchedulingManagement.schedulerProvider: volcano)",
    ),
    SettingSpec(
        "volcano_queue", "none", "gang volcano: the Volcano queue of the groups' PodGroups"
    ),
    SettingSpec(
        "exclusive_topology",
        "none",
        "a node label key (e.g. kubernetes.io/hostname): one group per topology domain "
        "(LWS exclusive-topology annotation)",
    ),
    SettingSpec("node_selector", "none", "KEY=VALUE,...: the engine pods' nodeSelector"),
    SettingSpec("tolerations", "none", "KEY[=VALUE][:EFFECT],...: the engine pods' tolerations"),
    SettingSpec("image_pull_secrets", "none", "NAME,...: imagePullSecrets of every pod"),
    SettingSpec(
        "podmonitor", "off", "on: a PodMonitor (Prometheus Operator) for the engines and the proxy"
    ),
    SettingSpec(
        "elastic",
        "off",
        "on: any group index runs (kubectl scale lws/NAME works), the proxy discovers the "
        "engine pods through the API and drains a pod that leaves (preStop hook)",
    ),
    SettingSpec(
        "drain_grace",
        "30",
        "elastic: seconds a leaving engine's streams run on it before they migrate "
        "(the proxy's --drain-grace)",
    ),
    SettingSpec(
        "drain_wait",
        "120",
        "elastic: seconds the preStop hook waits for the proxies beyond the grace (unstreamed "
        "answers, KV not yet pulled); terminationGracePeriodSeconds is grace + wait + 35",
    ),
    SettingSpec(
        "pool_wait",
        "60",
        "elastic: seconds a request waits for a role with no ready engine (its only pod "
        "replaced, a new one not ready yet) before 503 (the proxy's --pool-wait)",
    ),
    SettingSpec(
        "admin_secret",
        "PREFIX-admin:key",
        "elastic: the Secret (NAME[:KEY]) holding the proxy's admin key, read by the proxy "
        "and the engines' preStop hook",
    ),
    SettingSpec(
        "autoscale",
        "off",
        "elastic: keda (a ScaledObject per LeaderWorkerSet) or hpa (an autoscaling/v2 HPA, "
        "external metric) scaling each role to the proxy's servekit_desired_replicas",
    ),
    SettingSpec("max_replicas", "16", "autoscale: most instances of a role"),
    SettingSpec(
        "scale_timing",
        "5,15,30,300,60",
        "autoscale: seconds between the proxy's computations, the scale-up window and period, "
        "the scale-down window and period (the proxy's flags and the HPA's behavior alike)",
    ),
    SettingSpec(
        "slo",
        "the proxy's (2,0.1)",
        "autoscale: TTFT,TPOT objectives in seconds the roles are sized for",
    ),
    SettingSpec(
        "prometheus", DEFAULT_PROMETHEUS, "autoscale keda: the Prometheus the trigger queries"
    ),
)
NAMES: tuple[str, ...] = tuple(s.name for s in SETTINGS)


def _bounded(raw: Mapping[str, str]) -> None:
    for key, value in raw.items():
        if key not in NAMES:
            raise UsageError(
                f"--set k8s.{key}: not a k8s setting (its settings: {', '.join(NAMES)})"
            )
        if len(value) > MAX_VALUE or any(ord(c) < 32 for c in value):
            raise _refuse(key, value, f"give a value of at most {MAX_VALUE} printable characters")


def _has_kv(layout: Layout) -> bool:
    return any(e.kv_connector is not None for e in layout.engines)


Getter = Callable[[str, str], str]
Fields = dict[str, Any]


def _identity(get: Getter, layout: Layout) -> Fields:
    accel = get("accelerator", ACCELERATORS[layout.hardware.accelerator] or "none")
    if accel not in ("", "none") and not _RESOURCE.match(accel):
        raise _refuse("accelerator", accel, "give a resource name such as huawei.com/ascend-1980")
    prefix = get("prefix", "sk")
    if not _DNS_LABEL.match(prefix) or len(prefix) > 20:
        raise _refuse(
            "prefix", prefix, "give a short DNS label: a-z first, then a-z, 0-9, '-' (20 at most)"
        )
    image = get("image", "")
    if image and not _IMAGE.match(image):
        raise _refuse(
            "image", image, "give an image reference, REGISTRY/NAME:TAG or NAME@sha256:DIGEST"
        )
    return {
        "accelerator": None if accel in ("", "none") else accel,
        "kind": _choice("kind", get("kind", "leaderworkerset"), KINDS),
        "prefix": prefix,
        "image": image,
    }


def _secret(
    text: str, option: str = "model_secret", default_key: str = "HF_TOKEN"
) -> tuple[str, str] | None:
    if not text:
        return None
    name, _, key = text.partition(":")
    if not _DNS_SUBDOMAIN.match(name) or (key and not re.match(r"^[-._A-Za-z0-9]{1,253}$", key)):
        raise _refuse(option, text, "give NAME or NAME:KEY of a Secret in the namespace")
    return name, key or default_key


def _weights(get: Getter, raw: Mapping[str, str]) -> Fields:
    model = parse_model(get("model", "host"))
    hf_only = ("model_cache", "model_size", "model_secret", "model_endpoint")
    if model.kind != "hf" and any(k in raw for k in hf_only):
        given = next(k for k in hf_only if k in raw)
        raise _refuse(given, raw[given], "is for k8s.model=hf:REPO; drop it or download the model")
    cache_text = get("model_cache", "emptydir")
    cache = None
    if cache_text != "emptydir":
        head, sep, rest = cache_text.partition(":")
        if head != "pvc" or not sep:
            raise _refuse("model_cache", cache_text, "choose emptydir or pvc:CLAIM[/SUB]")
        cache = _pvc("model_cache", rest)
    endpoint = get("model_endpoint", "")
    if endpoint and not _ENDPOINT.match(endpoint):
        raise _refuse("model_endpoint", endpoint, "give http(s)://HOST[:PORT][/PATH]")
    return {
        "model": model,
        "model_cache": cache,
        "model_size": _quantity("model_size", get("model_size", "1Ti")),
        "model_secret": _secret(get("model_secret", "")),
        "model_endpoint": endpoint,
    }


def _rdma(text: str, nvidia: bool) -> tuple[str, int] | None:
    if text == "none":
        return None
    if not nvidia:
        raise _refuse(
            "rdma",
            text,
            "is for GPU layouts (Ascend NPUs reach RoCE through their own device plugin)",
        )
    resource, _, count = text.partition("=")
    if not _RESOURCE.match(resource) or (count and not re.match(r"^[1-9][0-9]{0,2}$", count)):
        raise _refuse("rdma", text, "give RESOURCE[=COUNT] (e.g. rdma/ib or rdma/ib=1) or none")
    return resource, int(count or "1")


def _network(get: Getter, layout: Layout) -> Fields:
    ascend = layout.hardware.is_ascend
    nvidia = layout.hardware.accelerator == "nvidia"
    host_files = _choice("host_files", get("host_files", "on" if ascend else "off"), ("on", "off"))
    if host_files == "on" and not ascend:
        raise _refuse(
            "host_files", "on", "the host files are an Ascend host's; this layout is not Ascend"
        )
    return {
        "network": _choice("network", get("network", "pod"), ("pod", "host")),
        "host_files": host_files == "on",
        "rdma": _rdma(get("rdma", "rdma/ib" if nvidia and _has_kv(layout) else "none"), nvidia),
    }


def _count(name: str, value: str, high: int) -> int:
    if not re.match(r"^[0-9]{1,4}$", value) or not 1 <= int(value) <= high:
        raise _refuse(name, value, f"give a count from 1 to {high}")
    return int(value)


MAX_PROXIES = 64
"""Most proxy pods and most processes per pod (the proxy's own ``--workers`` bound)."""


def _proxies(get: Getter, cpu: str) -> Fields:
    """How many proxy pods, and processes in each: one per whole core of the pod."""
    workers = _count("proxy_workers", get("proxy_workers", "1"), MAX_PROXIES)
    whole = int(quantity_value(cpu))
    if workers > max(1, whole):
        raise _refuse(
            "proxy_workers",
            str(workers),
            f"each worker is one event loop on a core of its own and k8s.proxy_cpu={cpu} "
            f"gives {whole} whole core{'' if whole == 1 else 's'}; give at most "
            f"{max(1, whole)} or raise k8s.proxy_cpu",
        )
    return {
        "proxy_replicas": _count("proxy_replicas", get("proxy_replicas", "1"), MAX_PROXIES),
        "proxy_workers": workers,
    }


def _resources(get: Getter) -> Fields:
    def quantity_or_auto(key: str) -> str | None:
        value = get(key, "")
        return _quantity(key, value) if value else None

    proxy_cpu = _quantity("proxy_cpu", get("proxy_cpu", PROXY_DEFAULTS["cpu"]))
    return {
        **_proxies(get, proxy_cpu),
        "cpu": quantity_or_auto("cpu"),
        "memory": quantity_or_auto("memory"),
        "ephemeral_storage": quantity_or_auto("ephemeral_storage"),
        "shm": quantity_or_auto("shm"),
        "proxy_cpu": proxy_cpu,
        "proxy_memory": _quantity("proxy_memory", get("proxy_memory", PROXY_DEFAULTS["memory"])),
    }


def _placement(get: Getter, kind: str) -> Fields:
    gang = _choice("gang", get("gang", "none"), ("none", "volcano"))
    queue = get("volcano_queue", "")
    if queue and (gang != "volcano" or not _DNS_SUBDOMAIN.match(queue)):
        raise _refuse("volcano_queue", queue, "give a queue name, with k8s.gang=volcano")
    topology = get("exclusive_topology", "")
    if topology and not _LABEL_KEY.match(topology):
        raise _refuse(
            "exclusive_topology", topology, "give a node label key such as kubernetes.io/hostname"
        )
    if kind == "disaggregatedset" and (topology or queue):
        which = "exclusive_topology" if topology else "volcano_queue"
        raise _refuse(
            which, topology or queue, "annotates a LeaderWorkerSet; render as leaderworkerset"
        )
    return {
        "gang": gang,
        "volcano_queue": queue,
        "exclusive_topology": topology,
        "node_selector": _pairs("node_selector", get("node_selector", ""), sep="="),
        "tolerations": _tolerations(get("tolerations", "")),
        "image_pull_secrets": _names("image_pull_secrets", get("image_pull_secrets", "")),
        "podmonitor": _choice("podmonitor", get("podmonitor", "off"), ("on", "off")) == "on",
    }


_URL = re.compile(r"^https?://[A-Za-z0-9.-]{1,253}(:[0-9]{1,5})?(/[-A-Za-z0-9._~/]{0,200})?$")


def _seconds(name: str, value: str, low: int, high: int) -> int:
    if not re.match(r"^[0-9]{1,6}$", value) or not low <= int(value) <= high:
        raise _refuse(name, value, f"give whole seconds from {low} to {high}")
    return int(value)


def _elastic(get: Getter, raw: Mapping[str, str], identity: Fields) -> Fields:
    elastic = _choice("elastic", get("elastic", "off"), ("on", "off")) == "on"
    needs = ("drain_grace", "drain_wait", "pool_wait", "admin_secret", "autoscale",
             "max_replicas", "prometheus", "scale_timing", "slo")  # fmt: skip
    given = next((k for k in needs if k in raw), None)
    if given is not None and not elastic:
        raise _refuse(given, raw[given], "is for k8s.elastic=on; add it or drop this option")
    autoscale = _choice("autoscale", get("autoscale", "off"), ("off", "keda", "hpa"))
    text = get("max_replicas", "16")
    if not re.match(r"^[0-9]{1,4}$", text) or not 1 <= int(text) <= 1000:
        raise _refuse("max_replicas", text, "give a count from 1 to 1000")
    prometheus = get("prometheus", DEFAULT_PROMETHEUS)
    if not _URL.match(prometheus):
        raise _refuse("prometheus", prometheus, "give http(s)://HOST[:PORT][/PATH]")
    for key in ("scale_timing", "slo"):
        if key in raw and autoscale == "off":
            raise _refuse(key, raw[key], "is for k8s.autoscale=keda|hpa; add it or drop this")
    timing_text = get("scale_timing", ",".join(map(str, DEFAULT_TIMING)))
    parts = timing_text.split(",")
    if len(parts) != 5 or not all(re.match(r"^[0-9]{1,5}$", x) for x in parts):
        raise _refuse("scale_timing", timing_text, "give five whole seconds: "
                      "INTERVAL,UP_WINDOW,UP_PERIOD,DOWN_WINDOW,DOWN_PERIOD")  # fmt: skip
    timing = tuple(int(x) for x in parts)
    if timing[0] < 1 or timing[2] < 1 or timing[4] < 1 or max(timing) > 3600:
        raise _refuse("scale_timing", timing_text, "interval and periods from 1 s, all to 3600")
    slo = None
    if "slo" in raw:
        ttft, sep, tpot = get("slo", "").partition(",")
        number = r"^[0-9]{1,4}(\.[0-9]{1,4})?$"
        if (
            not sep
            or not re.match(number, ttft)
            or not re.match(number, tpot)
            or not (float(ttft) > 0 and float(tpot) > 0)
        ):
            raise _refuse("slo", get("slo", ""), "give TTFT,TPOT in seconds, e.g. 2,0.1")
        slo = (float(ttft), float(tpot))
    if "prometheus" in raw and autoscale != "keda":
        raise _refuse("prometheus", prometheus, "is KEDA's; add k8s.autoscale=keda or drop it")
    secret = _secret(get("admin_secret", f"{identity['prefix']}-admin:key"), "admin_secret", "key")
    return {
        "elastic": elastic,
        "drain_grace": _seconds("drain_grace", get("drain_grace", "30"), 0, 3600),
        "drain_wait": _seconds("drain_wait", get("drain_wait", "120"), 0, 3600),
        "pool_wait": _seconds("pool_wait", get("pool_wait", "60"), 0, 3600),
        "admin_secret": secret if secret is not None else ("", "key"),
        "autoscale": autoscale,
        "max_replicas": int(text),
        "scale_timing": timing,
        "slo": slo,
        "prometheus": prometheus,
    }


def parse_settings(raw: Mapping[str, str], layout: Layout) -> K8sSettings:
    """The operator's ``k8s.*`` strings as :class:`K8sSettings`, defaults resolved for the layout."""
    _bounded(raw)

    def get(key: str, default: str) -> str:
        return raw.get(key, default).strip()

    identity = _identity(get, layout)
    return K8sSettings(
        **identity,
        **_weights(get, raw),
        **_network(get, layout),
        **_resources(get),
        **_placement(get, identity["kind"]),
        **_elastic(get, raw, identity),
        given=frozenset(raw),
    )


def _gi(value: Fraction) -> str:
    mi = int(value * 1024)
    return f"{mi // 1024}Gi" if mi % 1024 == 0 else f"{mi}Mi"


def _cores(value: Fraction) -> str:
    milli = int(value * 1000)
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"


def pod_resources(
    settings: K8sSettings, hardware: str, devices: int, devices_per_node: int
) -> dict[str, str]:
    """cpu, memory, ephemeral-storage and shm of one engine pod: the node's share
    (:data:`NODE_SHARES`) for the devices it holds, or what the operator set."""
    share = NODE_SHARES[hardware]
    part = Fraction(devices, devices_per_node) if devices and devices_per_node else Fraction(1)
    part = min(part, Fraction(1))
    return {
        "cpu": settings.cpu or _cores(share.cpu * part),
        "memory": settings.memory or _gi(share.memory_gi * part),
        "ephemeral-storage": settings.ephemeral_storage or _gi(share.ephemeral_gi * part),
        "shm": settings.shm or _gi(max(Fraction(1, 4), share.shm_gi * part)),
    }


def settings_table() -> str:
    """The Markdown table of every option (docs/kubernetes.md holds it; a test compares)."""
    lines = ["| option | default | what |", "|---|---|---|"]
    lines += [f"| `k8s.{s.name}` | {s.default} | {s.help} |" for s in SETTINGS]
    return "\n".join(lines) + "\n"


def resources_table() -> str:
    """The per-accelerator node shares as a Markdown table (docs/kubernetes.md)."""
    lines = [
        "| hardware | cpu | memory | ephemeral-storage | /dev/shm | from |",
        "|---|---|---|---|---|---|",
    ]
    for hw, s in NODE_SHARES.items():
        lines.append(
            f"| {hw} | {s.cpu} | {s.memory_gi}Gi | {s.ephemeral_gi}Gi | {s.shm_gi}Gi | {s.source} |"
        )
    return "\n".join(lines) + "\n"
