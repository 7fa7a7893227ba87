"""The real schemas a Kubernetes rendering must pass, validators built once per process.

Core kinds (ConfigMap, Service, Deployment, and every LeaderWorkerSet pod template
as a core PodTemplate) against the OpenAPI schemas ``kubernetes-validate`` bundles,
its strict variant (unknown fields refused), pinned to Kubernetes 1.34 (the
``kubernetes_validate.validate`` rule, with the validator cached: that function
re-reads the schema files on every call). LeaderWorkerSet and DisaggregatedSet
against their CRD's ``openAPIV3Schema`` (kubernetes-sigs/lws v0.9.0, in
tests/fixtures/k8s), made strict the way the API server prunes (an object with
``properties`` and no ``additionalProperties`` or ``x-kubernetes-preserve-unknown-fields``
takes no other field), plus the rules LWS's webhook enforces beyond the schema.
LeaderWorkerSet and DisaggregatedSet are checked against both v0.9.0's and v0.10.0's
CRDs (a cluster may run either); PodMonitor (Prometheus Operator), Volcano's
PodGroup and KEDA's ScaledObject (v2.20.2) against theirs (/work/shared/reference/k8s, copied here).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import referencing
from kubernetes_validate.utils import schema_contents

KUBERNETES = "1.34.0"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "k8s"
CRDS: dict[str, tuple[str, ...]] = {
    "LeaderWorkerSet": ("leaderworkerset-v1.schema.json", "leaderworkerset-v0.10.schema.json"),
    "DisaggregatedSet": ("disaggregatedset-v1.schema.json", "disaggregatedset-v0.10.schema.json"),
    "PodMonitor": ("prometheus-podmonitor.schema.json",),
    "PodGroup": ("volcano-podgroup.schema.json",),
    "ScaledObject": ("keda-scaledobject.schema.json",),
}
"""Kind -> its CRD schemas (LWS: v0.9.0's, named v1, and v0.10.0's); an object passes all."""

Problem = tuple[str, str]
"""(where, what): the path of the refused field and the validator's message."""


@functools.cache
def core_validator(kind: str, api_version: str) -> jsonschema.protocols.Validator:
    folder = f"kubernetes-json-schema/v{KUBERNETES}-local-strict"
    group = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    schema = schema_contents(f"{folder}/{kind.lower()}-{group}.json", KUBERNETES)
    defs = schema_contents(f"{folder}/_definitions.json", KUBERNETES)
    registry: referencing.Registry[Any] = referencing.Resource.from_contents(defs) @ (
        referencing.Resource.from_contents(schema) @ referencing.Registry()
    )
    return jsonschema.Draft202012Validator(schema, registry=registry)


def _strict(node: Any) -> Any:
    if isinstance(node, dict):
        out = {k: _strict(v) for k, v in node.items()}
        if (
            "properties" in out
            and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")
        ):
            out["additionalProperties"] = False
        return out
    if isinstance(node, list):
        return [_strict(v) for v in node]
    return node


@functools.cache
def crd_validator(file: str) -> jsonschema.protocols.Validator:
    schema = json.loads((FIXTURES / file).read_text())["openAPIV3Schema"]
    return jsonschema.Draft202012Validator(_strict(schema))


def _errors(validator: jsonschema.protocols.Validator, obj: Any, at: str) -> list[Problem]:
    found = []
    for e in validator.iter_errors(obj):
        path = "".join(f".{p}" if isinstance(p, str) else f"[{p}]" for p in e.absolute_path)
        found.append(((at + path).removeprefix("."), e.message))
    return found


def _lws_specs(obj: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    if obj["kind"] == "LeaderWorkerSet":
        yield "spec", obj["spec"]
    else:
        for i, role in enumerate(obj["spec"]["roles"]):
            yield f"spec.roles[{i}].spec", role["spec"]


def webhook_problems(obj: dict[str, Any]) -> list[Problem]:
    """What LWS's admission webhook refuses that the schema lets through."""
    found: list[Problem] = []
    for at, spec in _lws_specs(obj):
        tmpl = spec.get("leaderWorkerTemplate", {})
        size = tmpl.get("size", 1)
        if not isinstance(size, int):
            continue  # the schema refuses it already
        if size < 1:
            found.append((f"{at}.leaderWorkerTemplate.size", f"size {size} is below 1"))
        sub = tmpl.get("subGroupPolicy", {}).get("subGroupSize")
        if sub is not None and not (sub >= 1 and (size % sub == 0 or (size - 1) % sub == 0)):
            found.append(
                (
                    f"{at}.leaderWorkerTemplate.subGroupPolicy.subGroupSize",
                    f"{sub} does not divide size {size}",
                )
            )
    return found


def pod_templates(obj: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for at, spec in _lws_specs(obj):
        tmpl = spec["leaderWorkerTemplate"]
        for key in ("leaderTemplate", "workerTemplate"):
            if key in tmpl:
                yield f"{at}.leaderWorkerTemplate.{key}", tmpl[key]


def problems(obj: dict[str, Any]) -> list[Problem]:
    """Every refusal of one rendered object (empty: it passes)."""
    kind = obj.get("kind", "")
    if kind in ("PodMonitor", "PodGroup", "ScaledObject"):
        return [p for file in CRDS[kind] for p in _errors(crd_validator(file), obj, "")]
    if kind in CRDS:
        found = [
            (at, f"{file}: {what}")
            for file in CRDS[kind]
            for at, what in _errors(crd_validator(file), obj, "")
        ]
        found += webhook_problems(obj)
        for at, template in pod_templates(obj):
            wrapped = {
                "apiVersion": "v1",
                "kind": "PodTemplate",
                "metadata": {"name": "template"},
                "template": template,
            }
            found += [
                (at + where.removeprefix("template"), what)
                for where, what in _errors(core_validator("PodTemplate", "v1"), wrapped, "")
            ]
        return found
    return _errors(core_validator(kind, obj["apiVersion"]), obj, "")
