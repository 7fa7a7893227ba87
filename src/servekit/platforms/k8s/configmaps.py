"""Files as ConfigMaps that ``kubectl apply`` takes: each object under the annotation cap.

Client-side apply (``kubectl apply -k``) stores every object it creates in the
``kubectl.kubernetes.io/last-applied-configuration`` annotation, and the API server
refuses an object whose annotations total more than 262,144 bytes (key and value
lengths, ``ValidateAnnotationsSize``). kubectl writes that value with Go's
``encoding/json`` over the object as read (``GetModifiedConfiguration``: the object
without the annotation, keys sorted, no spaces, ``<``, ``>`` and ``&`` escaped as
``\\u003c``..., a newline at the end); :func:`last_applied_bytes` computes the same
bytes (a test compares them with real kubectl's). A ConfigMap's data is also capped at
1 MiB by the API server, and every object by etcd's request limit; the cap here is
the tighter of them.

:func:`pack` fills ConfigMaps up to :data:`BUDGET`, leaving :data:`OVERLAY_MARGIN` for
what an overlay adds (a namespace, labels, annotations); a file larger than one
ConfigMap is cut into parts (``NAME.part000``, ...) that ``pod.sh`` joins, checked
against its digest, before anything starts.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass
from typing import Any

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
ANNOTATION_CAP = 262_144
CONFIGMAP_CAP = 1 << 20
OVERLAY_MARGIN = 8_192
BUDGET = ANNOTATION_CAP - len(LAST_APPLIED) - OVERLAY_MARGIN
PART = ".part"

_GO_ESCAPES = str.maketrans(
    {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
)


def go_json(obj: Any) -> bytes:
    """``json.NewEncoder(w).Encode(obj)`` of an unstructured object, as kubectl writes it."""
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return text.translate(_GO_ESCAPES).encode("utf-8") + b"\n"


def last_applied_bytes(obj: dict[str, Any]) -> int:
    """The bytes the object's annotations take once ``kubectl apply`` has written its own."""
    meta = dict(obj.get("metadata", {}))
    annotations = dict(meta.get("annotations") or {})
    annotations.pop(LAST_APPLIED, None)
    meta["annotations"] = annotations  # kubectl writes an empty map when there is none
    stripped = {**obj, "metadata": meta}
    others = sum(len(k) + len(v.encode()) for k, v in annotations.items())
    return len(LAST_APPLIED) + len(go_json(stripped)) + others


def data_bytes(obj: dict[str, Any]) -> int:
    """A ConfigMap's size as the API server counts it against its 1 MiB (keys and values)."""
    text = sum(len(k) + len(v.encode()) for k, v in obj.get("data", {}).items())
    blobs = sum(len(k) + len(base64.b64decode(v)) for k, v in obj.get("binaryData", {}).items())
    return text + blobs


@dataclass(frozen=True)
class Split:
    """A file cut into parts because no ConfigMap holds it whole."""

    name: str
    parts: int
    sha256: str


def _entry(key: str, content: bytes) -> tuple[str, str, bool]:
    try:
        return key, content.decode("utf-8"), False
    except UnicodeDecodeError:
        return key, base64.b64encode(content).decode("ascii"), True


def _cost(key: str, value: str) -> int:
    return len(go_json(key)) + len(go_json(value))  # each carries a newline: the ':' and ','


def _configmap(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": labels}}


def pack(
    base: str, files: dict[str, bytes], labels: dict[str, str], budget: int = BUDGET
) -> tuple[list[dict[str, Any]], list[Split]]:
    """``files`` in ConfigMaps ``base``, ``base-1``, ... each under ``budget``; and the files
    that had to be cut into parts (their parts are ordinary entries)."""
    room = budget - last_applied_bytes(_configmap(f"{base}-99", labels)) - 64
    entries: list[tuple[str, str, bool]] = []
    splits: list[Split] = []
    for key, content in sorted(files.items()):
        entry = _entry(key, content)
        if _cost(entry[0], entry[1]) <= room:
            entries.append(entry)
            continue
        chunk = max(1, (room - 64) * 3 // 4 - 3)
        pieces = [content[i : i + chunk] for i in range(0, len(content), chunk)]
        splits.append(Split(key, len(pieces), hashlib.sha256(content).hexdigest()))
        for i, piece in enumerate(pieces):
            part = f"{key}{PART}{i:03d}"
            entries.append((part, base64.b64encode(piece).decode("ascii"), True))
    bins: list[list[tuple[str, str, bool]]] = []
    used: list[int] = []
    for entry in sorted(entries, key=lambda e: -_cost(e[0], e[1])):
        cost = _cost(entry[0], entry[1])
        for i, size in enumerate(used):
            if size + cost <= room:
                bins[i].append(entry)
                used[i] += cost
                break
        else:
            bins.append([entry])
            used.append(cost)
    out = []
    for i, chosen in enumerate(bins):
        obj = _configmap(base if i == 0 else f"{base}-{i}", labels)
        text = {k: v for k, v, binary in sorted(chosen) if not binary}
        blobs = {k: v for k, v, binary in sorted(chosen) if binary}
        if text:
            obj["data"] = text
        if blobs:
            obj["binaryData"] = blobs
        size = last_applied_bytes(obj)
        if size > budget or data_bytes(obj) > CONFIGMAP_CAP:
            raise ValueError(f"ConfigMap {obj['metadata']['name']}: {size} bytes over {budget}")
        out.append(obj)
    return out, splits


def content_hash(configmaps: list[dict[str, Any]]) -> str:
    """A digest of what the ConfigMaps hold (names and contents), for a pod template."""
    digest = hashlib.sha256()
    for obj in sorted(configmaps, key=lambda o: str(o["metadata"]["name"])):
        digest.update(go_json({k: obj.get(k, {}) for k in ("data", "binaryData")}))
        digest.update(str(obj["metadata"]["name"]).encode())
    return digest.hexdigest()[:16]
