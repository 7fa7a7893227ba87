"""Engines leave under load and nothing is lost: the drain campaign on the simulator.

    .venv/bin/python benchmarks/drain_campaign.py [--requests 200] [--concurrency 32] \\
        [--grace 0.5] [--rounds 3] [--json out.json]

A 2P3D deployment of simulated engines (decoders a token every 40 ms) behind
servekit's proxy. Each round replays the same requests twice, greedy, streamed,
each with its own ``X-Request-Id``: once undisturbed (the reference), then again
while, one after the other, a decoder and then a prefill leave the way a pod
does: ``POST /admin/instances/leave`` (what the preStop hook calls) waits for the
drain, then the engine is killed; the next round the engine is back (restarted
and added again). Per round: requests, failed (status not 200), cut (no
``[DONE]``, or an error event), changed (bytes differ from the reference,
``created`` and cache counts aside), streams migrated at the grace end, and how
long each drain took. Simulated engines on a shared host; no timing here is a
claim about real engines.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import time
from pathlib import Path
from typing import Any

import aiohttp

from servekit.proxy.config import ProxyConfig
from servekit.proxy.server import start_proxy
from servekit.sim.server import serve
from servekit.sim.spec import spec_from_mapping

CREATED = re.compile(rb'"(created|cached_tokens)":\d+')
SLOW = {"name": "slow", "decode_step_s": [[1, 0.04]]}


def body(n: int) -> dict[str, Any]:
    return {"model": "sim-model", "prompt": f"request {n}: what does a drain keep?",
            "max_tokens": 16 + n % 32, "ignore_eos": True, "temperature": 0,
            "stream": True}  # fmt: skip


async def replay(c: aiohttp.ClientSession, url: str, n: int, conc: int) -> list[tuple[int, bytes]]:
    gate = asyncio.Semaphore(conc)

    async def one(i: int) -> tuple[int, bytes]:
        async with gate:
            try:
                async with c.post(url + "/v1/completions", json=body(i),
                                  headers={"X-Request-Id": f"r{i}"}) as r:  # fmt: skip
                    return r.status, CREATED.sub(rb'"\1":0', await r.read())
            except aiohttp.ClientError as exc:
                return 0, str(exc).encode()

    return list(await asyncio.gather(*(one(i) for i in range(n))))


async def leave_and_kill(c: aiohttp.ClientSession, url: str, sim: Any, name: str,
                         after_s: float) -> dict[str, Any]:  # fmt: skip
    await asyncio.sleep(after_s)
    ep = sim.endpoints[name]
    t0 = time.monotonic()
    async with c.post(url + "/admin/instances/leave", json={"urls": [ep.url], "wait_s": 60}) as r:
        doc = await r.json()
    ep.kill("its pod ended after the preStop hook returned")
    drain = doc["drains"][0] if doc.get("drains") else {}
    return {"engine": name, "drained": doc.get("drained"), "seconds": time.monotonic() - t0,
            "migrated": drain.get("migrated", 0)}  # fmt: skip


async def campaign(args: argparse.Namespace) -> dict[str, Any]:
    eps = [{"name": f"p{i}", "port": 0, "role": "prefill"} for i in range(2)]
    eps += [{"name": f"d{i}", "port": 0, "role": "decode", "profile": SLOW} for i in range(3)]
    sim = await serve(spec_from_mapping({"endpoints": eps}))
    urls = {n: ep.url for n, ep in sim.endpoints.items()}
    config = ProxyConfig(
        prefill=(urls["p0"], urls["p1"]), decode=(urls["d0"], urls["d1"], urls["d2"]), port=0,
        admin=True, drain_grace_s=args.grace, health_interval_s=0.2, max_connections=4096,
    )  # fmt: skip
    proxy = await start_proxy(config)
    rounds = []
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as c:
            await asyncio.sleep(1.0)
            for k in range(args.rounds):
                reference = await replay(c, proxy.url, args.requests, args.concurrency)
                run = asyncio.ensure_future(replay(c, proxy.url, args.requests, args.concurrency))
                decoder, prefill = f"d{k % 3}", f"p{k % 2}"
                left = [await leave_and_kill(c, proxy.url, sim, decoder, 1.0),
                        await leave_and_kill(c, proxy.url, sim, prefill, 0.5)]  # fmt: skip
                answers = await run
                rounds.append({
                    "requests": len(answers),
                    "failed": sum(s != 200 for s, _ in answers),
                    "cut": sum(s == 200 and (not a.endswith(b"data: [DONE]\n\n") or b'"error"' in a)
                               for s, a in answers),
                    "changed": sum(a != b for (_, a), (_, b) in zip(answers, reference, strict=True)),
                    "left": left,
                })  # fmt: skip
                print(json.dumps(rounds[-1]), flush=True)
                for name in (decoder, prefill):  # back for the next round, as a new pod would be
                    sim.endpoints[name].restart()
                    role = "decode" if name[0] == "d" else "prefill"
                    doc = {"role": role, "urls": [urls[name]]}
                    async with c.post(proxy.url + "/admin/instances/add", json=doc) as r:
                        assert r.status == 200
                await asyncio.sleep(1.0)
    finally:
        await proxy.stop()
        await sim.stop()
    return {"rounds": rounds}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=200)
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--grace", type=float, default=0.5, help="the proxy's --drain-grace")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    print(f"# cpus={os.cpu_count()} load={os.getloadavg()[0]:.2f}")
    out = asyncio.run(campaign(args))
    total = {k: sum(r[k] for r in out["rounds"]) for k in ("requests", "failed", "cut", "changed")}
    migrated = sum(e["migrated"] for r in out["rounds"] for e in r["left"])
    print(f"# total: {json.dumps(total)}, streams migrated at the grace end: {migrated}; "
          f"load after {os.getloadavg()[0]:.2f}")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
