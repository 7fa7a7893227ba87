"""The decode guard, checked the way the seed's release did it.

The incident: a plain request sent straight to a decode instance killed the
whole engine. With the guard, that exact request gets 400, the instance's
/health is still 200 right after, and the same request through the proxy works.
"""

from __future__ import annotations

from servekit.accept.check import Check
from servekit.accept.env import Probe, base_url
from servekit.accept.outcome import Outcome, failed, passed, skipped
from servekit.accept.replies import answer_text
from servekit.guard import GUARD_ERROR_CODE


def _error_code(doc: object) -> str | None:
    if isinstance(doc, dict) and isinstance(doc.get("error"), dict):
        code = doc["error"].get("code")
        return code if isinstance(code, str) else None
    return None


async def decode_direct(probe: Probe) -> Outcome:
    """Incident-shaped request: 400 at each decode instance, health 200 after, ok via proxy."""
    decoders = probe.env.deployment.by_role("decode")
    if not decoders:
        return skipped("the deployment has no decode endpoint")
    if not probe.env.deployment.direct:
        return skipped(
            f"the {len(decoders)} decode instances are reached only through the proxy "
            "(attached without --nodes): the guard on each decode instance needs direct "
            "access; pass --nodes IP,... (the nodes' addresses in rank order)"
        )
    body = probe.chat([{"role": "user", "content": "What is 8*9?"}], max_tokens=16)
    codes: list[str] = []
    for decoder in decoders:
        url = base_url(decoder.url)
        refused = await probe.post(f"{url}/v1/chat/completions", body)
        health = await probe.get(f"{url}/health")
        problems = []
        if refused.status != 400:
            problems.append(f"plain request answered {refused.describe()}, not 400")
        if health.status != 200:
            problems.append(f"/health right after: {health.describe()}")
        if problems:
            return failed(f"{decoder.name}: {'; '.join(problems)}")
        codes.append(_error_code(refused.json_body()) or "")
    routed = await probe.post(f"{probe.env.entry}/v1/chat/completions", body)
    if answer_text(routed) is None:
        return failed(f"the same request through the entry failed: {routed.describe()}")
    coded = sum(c == GUARD_ERROR_CODE for c in codes)
    return passed(
        f"{len(decoders)} decode instance(s) refused with 400 and stayed healthy; proxy answered",
        decoders=len(decoders),
        guard_code_present=coded,
    )


CHECKS = (
    Check("guard.decode_direct", "guard", "incident request refused at decode", decode_direct),
)
