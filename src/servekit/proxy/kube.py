"""A small Kubernetes API client: list and watch pods by labels, as a service account.

What discovery needs and nothing else, on aiohttp (the zipapp carries no
Kubernetes client): ``GET /api/v1/namespaces/NS/pods?labelSelector=...`` in
pages, then ``?watch=1&resourceVersion=RV`` streaming one JSON event per line.
The service account's token is read from its file at every (re)connection, since
the kubelet rotates projected tokens; the API server's certificate is checked
against the service account's CA.

Everything the server sends is bounded: a page at :data:`MAX_PAGE_BYTES`, one
watch event at :data:`MAX_EVENT_BYTES` (a longer line ends the watch: the caller
lists again), the token at :data:`MAX_TOKEN_BYTES`. A pod is reduced at once to
the few fields discovery reads (:class:`PodView`); any other shape is skipped,
never trusted.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import ssl
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp

from servekit.vocabulary import url_for

MAX_PAGE_BYTES = 32 << 20
MAX_EVENT_BYTES = 4 << 20
MAX_TOKEN_BYTES = 64 << 10
PAGE_SIZE = 500
WATCH_S = 290  # the server ends a watch after this; the client then watches again
WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"
GROUP_INDEX = "leaderworkerset.sigs.k8s.io/group-index"
LWS_NAME = "leaderworkerset.sigs.k8s.io/name"
POD_UID = re.compile(r"[0-9a-f][-0-9a-f]{0,63}")
"""A pod's metadata.uid as the API server writes it (a UUID: lower-case hex and dashes);
``pod.sh`` accepts the same, so both sides name an incarnation alike or not at all."""


class KubeError(Exception):
    """The API could not be read (the caller backs off and lists again)."""


class Expired(KubeError):
    """The watch's resourceVersion is too old (410 Gone): list again."""


@dataclass(frozen=True)
class PodView:
    """What discovery reads of a pod."""

    name: str
    labels: Mapping[str, str]
    ip: str | None  # status.podIP, checked as an IP address
    ready: bool  # condition Ready is True
    deleting: bool  # metadata.deletionTimestamp is set (the pod is terminating)
    uid: str | None = None  # metadata.uid (a fresh one each time a pod is made), checked
    restarted: bool = False  # a container of it restarted in place (same pod, same uid)

    @property
    def worker_index(self) -> int:
        return _index(self.labels.get(WORKER_INDEX)) or 0

    @property
    def group_index(self) -> int | None:
        return _index(self.labels.get(GROUP_INDEX))

    @property
    def group(self) -> tuple[str, int | None]:
        """Which engine instance the pod belongs to (its LeaderWorkerSet group)."""
        return self.labels.get(LWS_NAME, self.name), self.group_index

    def host(self) -> str | None:
        """The IP as a URL's host (an IPv6 one bracketed)."""
        if self.ip is None:
            return None
        return f"[{self.ip}]" if ":" in self.ip else self.ip


def _index(value: str | None) -> int | None:
    """A LeaderWorkerSet index label as LWS writes it (decimal, no leading zero), else None
    (``pod.sh`` refuses the same labels, so both read one index or none)."""
    if value is None or not value.isascii() or not value.isdigit() or len(value) > 9:
        return None
    if len(value) > 1 and value.startswith("0"):
        return None
    return int(value)


def pod_view(obj: Any) -> PodView | None:
    """The fields discovery reads of a pod object, or None when it is not one."""
    if not isinstance(obj, dict):
        return None
    meta, status = obj.get("metadata"), obj.get("status") or {}
    if not isinstance(meta, dict) or not isinstance(status, dict):
        return None
    name, labels = meta.get("name"), meta.get("labels") or {}
    if not isinstance(name, str) or not name or not isinstance(labels, dict):
        return None
    labels = {k: v for k, v in labels.items() if isinstance(k, str) and isinstance(v, str)}
    ip = status.get("podIP")
    try:
        ip = str(ipaddress.ip_address(ip)) if isinstance(ip, str) and ip else None
    except ValueError:
        ip = None
    conditions = status.get("conditions") or []
    ready = isinstance(conditions, list) and any(
        isinstance(c, dict) and c.get("type") == "Ready" and c.get("status") == "True"
        for c in conditions
    )
    uid = meta.get("uid")
    uid = uid if isinstance(uid, str) and POD_UID.fullmatch(uid) else None
    deleting = meta.get("deletionTimestamp") is not None
    return PodView(name, labels, ip, ready, deleting, uid, _restarted(status))


def _restarted(status: dict[str, Any]) -> bool:
    """Whether a container of the pod restarted in place (``restartCount`` above 0), as
    LeaderWorkerSet's RecreateGroupOnPodRestart reads it before it makes the group again."""
    found = False
    for key in ("containerStatuses", "initContainerStatuses"):
        items = status.get(key)
        if isinstance(items, list):
            found = found or any(
                isinstance(c, dict) and isinstance(c.get("restartCount"), int)
                and not isinstance(c.get("restartCount"), bool) and c["restartCount"] > 0
                for c in items[:64]
            )  # fmt: skip
    return found


def in_cluster_api() -> str | None:
    """The API server's URL from the variables the kubelet sets in every pod."""
    host, port = (
        os.environ.get("KUBERNETES_SERVICE_HOST"),
        os.environ.get("KUBERNETES_SERVICE_PORT"),
    )
    if not host or not port:
        return None
    return url_for(host, port, scheme="https")


def read_small(path: str, limit: int) -> str | None:
    """A small file's text (a token, a namespace), stripped; None when it cannot be read."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(limit + 1)
    except OSError:
        return None
    if len(data) > limit:
        return None
    return data.decode("utf-8", "replace").strip() or None


class KubeApi:
    """Pods of one namespace through the API, as the pod's service account."""

    def __init__(self, base: str, token_file: str, ca_file: str) -> None:
        self.base = base.rstrip("/")
        self.token_file = token_file
        ctx: ssl.SSLContext | bool = True  # the system's CAs (https only: http ignores it)
        if Path(ca_file).is_file():
            ctx = ssl.create_default_context(cafile=ca_file)
        self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx))

    async def close(self) -> None:
        await self.session.close()

    def _headers(self) -> dict[str, str]:
        token = read_small(self.token_file, MAX_TOKEN_BYTES)
        headers = {"Accept": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        return headers

    def _url(self, namespace: str, selector: str, **query: str) -> str:
        params = {"labelSelector": selector, **query}
        qs = "&".join(f"{k}={quote(v, safe='')}" for k, v in params.items())
        return f"{self.base}/api/v1/namespaces/{quote(namespace, safe='')}/pods?{qs}"

    async def list_pods(self, namespace: str, selector: str) -> tuple[list[PodView], str]:
        """Every pod the selector matches, and the resourceVersion to watch from."""
        pods: list[PodView] = []
        token = ""
        timeout = aiohttp.ClientTimeout(total=60)
        while True:
            query = {"limit": str(PAGE_SIZE), **({"continue": token} if token else {})}
            try:
                async with self.session.get(
                    self._url(namespace, selector, **query), headers=self._headers(),
                    timeout=timeout,
                ) as resp:  # fmt: skip
                    body = await _bounded(resp, MAX_PAGE_BYTES)
                    if resp.status == 410:
                        raise Expired("the list's continue token expired")
                    if resp.status != 200:
                        raise KubeError(f"listing pods: HTTP {resp.status} {_reason(body)}")
            except (aiohttp.ClientError, TimeoutError) as exc:
                raise KubeError(f"listing pods: {exc.__class__.__name__}") from None
            doc = _json(body)
            items = doc.get("items")
            meta = doc.get("metadata")
            meta = meta if isinstance(meta, dict) else {}
            if not isinstance(items, list):
                raise KubeError("listing pods: the answer has no items")
            pods += [v for v in map(pod_view, items) if v is not None]
            token = meta.get("continue") or ""
            if not token:
                version = meta.get("resourceVersion")
                if not isinstance(version, str) or not version:
                    raise KubeError("listing pods: the answer has no resourceVersion")
                return pods, version
            if not isinstance(token, str):
                raise KubeError("listing pods: a bad continue token")

    async def watch_pods(
        self, namespace: str, selector: str, version: str
    ) -> AsyncIterator[tuple[str, PodView | None, str]]:
        """(event type, pod, resourceVersion) from ``version`` on; Expired on 410.

        Types: ADDED, MODIFIED, DELETED (with the pod) and BOOKMARK (pod None).
        Ends when the server ends the watch.
        """
        url = self._url(namespace, selector, watch="1", resourceVersion=version,
                        allowWatchBookmarks="true", timeoutSeconds=str(WATCH_S))  # fmt: skip
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=WATCH_S + 30)
        try:
            async with self.session.get(url, headers=self._headers(), timeout=timeout) as resp:
                if resp.status == 410:
                    raise Expired("watch: resourceVersion too old")
                if resp.status != 200:
                    raise KubeError(f"watching pods: HTTP {resp.status} "
                                    f"{_reason(await _bounded(resp, 65536))}")  # fmt: skip
                async for line in _lines(resp, MAX_EVENT_BYTES):
                    event = _event(line)
                    if event is not None:
                        yield event
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise KubeError(f"watching pods: {exc.__class__.__name__}") from None


def _event(line: bytes) -> tuple[str, PodView | None, str] | None:
    doc = _json(line)
    kind, obj = doc.get("type"), doc.get("object")
    if kind == "ERROR":
        code = obj.get("code") if isinstance(obj, dict) else None
        if code == 410:
            raise Expired("watch: resourceVersion too old")
        raise KubeError(f"watch error: {_reason(line)}")
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    version = meta.get("resourceVersion") if isinstance(meta, dict) else None
    if not isinstance(version, str):
        return None
    if kind == "BOOKMARK":
        return kind, None, version
    if kind not in ("ADDED", "MODIFIED", "DELETED"):
        return None
    pod = pod_view(obj)
    return None if pod is None else (kind, pod, version)


async def _bounded(resp: aiohttp.ClientResponse, limit: int) -> bytes:
    chunks, held = [], 0
    async for chunk in resp.content.iter_any():
        held += len(chunk)
        if held > limit:
            raise KubeError(f"an answer of the API passed {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


async def _lines(resp: aiohttp.ClientResponse, limit: int) -> AsyncIterator[bytes]:
    """Newline-ended lines, each at most ``limit`` bytes (a longer one: KubeError)."""
    buf = b""
    async for chunk in resp.content.iter_any():
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            if line.strip():
                yield line
        if len(buf) > limit:
            raise KubeError(f"a watch event passed {limit} bytes")
    if buf.strip():
        yield buf


def _json(raw: bytes) -> dict[str, Any]:
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError):
        raise KubeError("the API answered something that is not JSON") from None
    if not isinstance(doc, dict):
        raise KubeError("the API answered JSON that is not an object")
    return doc


def _reason(body: bytes) -> str:
    """The ``message`` of a Kubernetes Status, shortened (printable only)."""
    try:
        doc = json.loads(body)
        text = str(doc.get("message", "")) if isinstance(doc, dict) else ""
    except (ValueError, RecursionError):
        text = ""
    return "".join(c for c in text[:200] if c.isprintable())
