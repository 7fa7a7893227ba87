"""Service checks: the deployment is up, serves its model, and its logs stay clean.

The error counters run last, after every other check's traffic, because the
seed's incident showed up as an ``EngineDeadError`` in a log while the client
only saw a timeout.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from servekit.accept.check import Check
from servekit.accept.env import Probe, base_url
from servekit.accept.outcome import Outcome, failed, passed, skipped
from servekit.deployment import Deployment
from servekit.logscan import log_lines

ERROR_PATTERN = re.compile(r"\b(AssertionError|EngineDeadError|RuntimeError)\b")


async def health(probe: Probe) -> Outcome:
    """Every endpoint (or the entry alone) answers /health with 200.

    Engines reached only through the proxy cannot be asked: then the entry
    answers, and service.proxy_health counts the engines the proxy sees healthy.
    """
    dep = probe.env.deployment
    if not dep.direct:
        ex = await probe.get(f"{probe.env.entry}/health")
        if ex.status != 200:
            return failed(f"the entry is unhealthy: {ex.describe()}")
        return passed(
            "the entry answers /health 200; its engines are reached only through the proxy "
            "(no --nodes), so service.proxy_health counts the healthy ones",
            endpoints=1,
        )
    endpoints = dep.endpoints
    urls = [base_url(e.url) for e in endpoints] or [probe.env.entry]
    bad: list[str] = []
    for url in urls:
        ex = await probe.get(f"{url}/health")
        if ex.status != 200:
            bad.append(ex.describe())
    if bad:
        return failed(f"{len(bad)}/{len(urls)} endpoints unhealthy: {bad[0]}")
    return passed(f"{len(urls)} endpoints answer /health 200", endpoints=len(urls))


async def models(probe: Probe) -> Outcome:
    """/v1/models lists the served model."""
    ex = await probe.get(f"{probe.env.entry}/v1/models")
    doc = ex.json_body()
    if ex.status != 200 or not isinstance(doc, dict) or not isinstance(doc.get("data"), list):
        return failed(f"/v1/models unusable: {ex.describe()}")
    ids = [m.get("id") for m in doc["data"] if isinstance(m, dict)]
    want = probe.env.deployment.model or probe.env.model
    if want is None:
        return failed("no served model name: the deployment names none and /v1/models is empty")
    if want not in ids:
        return failed(f"/v1/models lists {ids}, not the served model {want!r}")
    return passed(f"/v1/models lists {want!r}", models=len(ids))


def expected_counts(dep: Deployment) -> dict[str, int]:
    """The instance counts a proxy in front of ``dep`` reports, by its health keys."""
    counts: dict[str, int] = {}
    if dep.by_role("prefill") or dep.by_role("decode"):
        counts["prefill_instances"] = len(dep.by_role("prefill"))
        counts["decode_instances"] = len(dep.by_role("decode"))
    if dep.by_role("mixed"):
        counts["replica_instances"] = len(dep.by_role("mixed"))
    return counts


async def proxy_health(probe: Probe) -> Outcome:
    """The proxy's health payload counts the instances the deployment has."""
    proxies = probe.env.deployment.by_role("proxy")
    if not proxies:
        return skipped("the deployment has no proxy endpoint")
    ex = await probe.get(f"{base_url(proxies[0].url)}/health")
    doc = ex.json_body()
    if ex.status != 200 or not isinstance(doc, dict):
        return failed(f"proxy health is not a JSON 200: {ex.describe()}")
    want = expected_counts(probe.env.deployment)
    got = {k: doc.get(k) for k in want}
    if got != want:
        return failed(f"proxy health reports {got}, the deployment has {want}")
    return passed(f"proxy reports {want}", **want)


def count_errors(path: Path) -> Counter[str]:
    """Lines naming AssertionError / EngineDeadError / RuntimeError, by name."""
    counts: Counter[str] = Counter()
    for line in log_lines(path):
        for name in set(ERROR_PATTERN.findall(line)):
            counts[name] += 1
    return counts


NO_LOGS = (
    "the deployment names no log files: its processes log on their own nodes; pass "
    "--logs DIR to verify (or to 'servekit deployment'), the folder of one PROCESS.log "
    "per process that run.sh writes with LOG_DIR"
)


async def error_logs(probe: Probe) -> Outcome:
    """After all traffic, the engines' logs hold no engine error lines."""
    logs = sorted(probe.env.deployment.log_files().items())
    if not logs:
        return skipped(NO_LOGS)
    totals: Counter[str] = Counter()
    worst: list[str] = []
    for name, log in logs:
        try:
            found = count_errors(log)
        except OSError as exc:
            return failed(f"log of {name} not readable at {log} ({exc})")
        totals.update(found)
        if found:
            worst.append(f"{name}: {dict(found)}")
    measures = {k: totals.get(k, 0) for k in ("AssertionError", "EngineDeadError", "RuntimeError")}
    if worst:
        return failed(f"engine errors in logs: {'; '.join(worst)}", **measures)
    return passed(f"0 engine errors in {len(logs)} logs", logs=len(logs), **measures)


CHECKS = (
    Check("service.health", "service", "every endpoint answers /health 200", health),
    Check("service.models", "service", "/v1/models lists the served model", models),
    Check("service.proxy_health", "service", "proxy health counts the instances", proxy_health),
)
FINAL_CHECKS = (
    Check("service.error_logs", "service", "no engine error lines in the logs", error_logs),
)
