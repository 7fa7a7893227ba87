"""``--workers N`` (issue 41 item 6): one proxy in several processes, none a single point.

The proxy runs as users run it (``python -m servekit.proxy --workers 2``) in
front of the simulator. Streams run through both workers; one worker is killed
mid-answer: only its own clients lose their streams, the other worker's stream
on to ``[DONE]``; the parent starts the dead worker again, which takes new
requests and knows the admin changes made before it started.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import aiohttp
import pytest

from servekit.local.ports import free_ports
from servekit.sim.testing import RunningSim, running_sim

SLOW = {"name": "slow", "decode_step_s": [[1, 0.04]]}
BODY = {"model": "sim-model", "prompt": "tell me about workers", "max_tokens": 30,
        "ignore_eos": True, "temperature": 0, "stream": True}  # fmt: skip


@contextmanager
def proxy_process(sim: RunningSim, *extra: str) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    port = free_ports(1)[0]
    u = sim.urls
    decoders = [v for k, v in u.items() if k.startswith("d")]
    proc = subprocess.Popen(
        [sys.executable, "-m", "servekit.proxy", "--workers", "2", "--port", str(port),
         "--prefill", u["p0"], "--decode", *decoders, "--admin", "--health-interval", "0.2",
         "--migration-limit", "0", *extra],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        yield proc, f"http://127.0.0.1:{port}"
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            assert proc.wait(20) == 0  # the parent stops its workers and exits cleanly
        finally:
            if proc.poll() is None:
                proc.kill()


async def metrics(c: aiohttp.ClientSession, url: str) -> list[tuple[dict[str, str], str, float]]:
    """(labels, name, value) of every sample of the merged page."""
    async with c.get(url + "/metrics") as r:
        text = await r.text()
    out = []
    for line in text.splitlines():
        if line.startswith("#") or not line:
            continue
        head, value = line.rsplit(" ", 1)
        name, _, rest = head.partition("{")
        labels = dict(kv.split("=", 1) for kv in rest.rstrip("}").split(",") if kv)
        out.append(({k: v.strip('"') for k, v in labels.items()}, name, float(value)))
    return out


async def until_healthy(c: aiohttp.ClientSession, url: str) -> None:
    for _ in range(300):
        try:
            async with c.get(url + "/health") as r:
                if r.status == 200:
                    return
        except aiohttp.ClientError:
            pass
        await asyncio.sleep(0.05)
    raise AssertionError("the proxy never became healthy")


async def stream(url: str, tokens: int = 30) -> bytes | BaseException:
    """One stream on its own connection (so the kernel may hand it to either worker)."""
    body = {**BODY, "max_tokens": tokens}
    try:
        async with aiohttp.ClientSession() as s, s.post(url + "/v1/completions", json=body) as r:
            return await r.read()
    except (TimeoutError, aiohttp.ClientError) as exc:
        return exc


@pytest.mark.slow
def test_a_worker_killed_mid_stream_costs_only_its_own_streams() -> None:
    eps = [{"name": "p0", "port": 0, "role": "prefill"}]
    eps += [{"name": f"d{i}", "port": 0, "role": "decode", "profile": SLOW} for i in range(3)]
    with running_sim({"endpoints": eps}) as sim, proxy_process(sim) as (proc, url):

        async def scenario() -> None:
            async with aiohttp.ClientSession() as c:
                await until_healthy(c, url)
                for _ in range(300):  # both workers up (the first answers before the second)
                    pids = [
                        v for _, n, v in await metrics(c, url) if n == "servekit_proxy_worker_pid"
                    ]
                    if len(pids) == 2:
                        break
                    await asyncio.sleep(0.05)
                spare = sim.urls["d2"]
                async with c.post(url + "/admin/instances/remove", json={"urls": [spare]}) as r:
                    doc = await r.json()
                    assert r.status == 200 and doc["workers"] == {"answered": 1, "of": 1}
                running: list[asyncio.Future[bytes | BaseException]] = []
                per_worker: dict[str, float] = {}
                for _ in range(6):  # both workers hold streams (the kernel's hash decides)
                    running += [asyncio.ensure_future(stream(url)) for _ in range(4)]
                    await asyncio.sleep(0.3)
                    per_worker = {}
                    for labels, name, value in await metrics(c, url):
                        if (
                            name == "servekit_proxy_inflight_requests"
                            and labels["role"] == "decode"
                        ):
                            w = labels["proxy_worker"]
                            per_worker[w] = per_worker.get(w, 0) + value
                    if len(per_worker) == 2 and min(per_worker.values()) >= 1:
                        break
                assert len(per_worker) == 2 and min(per_worker.values()) >= 1, per_worker
                pids = {labels["proxy_worker"]: int(value) for labels, name, value
                        in await metrics(c, url) if name == "servekit_proxy_worker_pid"}  # fmt: skip
                victim = "0"
                os.kill(pids[victim], signal.SIGKILL)
                answers = await asyncio.gather(*running)
                whole = [a for a in answers if isinstance(a, bytes) and a.endswith(b"[DONE]\n\n")]
                cut = len(answers) - len(whole)
                assert len(whole) >= per_worker["1"]  # the other worker's streams all ended well
                assert 1 <= cut <= len(answers) - per_worker["1"]  # only the victim's were lost
                for _ in range(200):  # the parent starts it again
                    found = {labels["proxy_worker"]: int(value) for labels, name, value
                             in await metrics(c, url) if name == "servekit_proxy_worker_pid"}  # fmt: skip
                    if found.get(victim) not in (None, pids[victim]):
                        break
                    await asyncio.sleep(0.1)
                assert found[victim] != pids[victim] and proc.poll() is None
                seen = {labels["instance"] for labels, name, _ in await metrics(c, url)
                        if name == "servekit_proxy_instance_healthy"
                        and labels["proxy_worker"] == victim}  # fmt: skip
                assert seen == {"prefill-0", "decode-0", "decode-1"}  # caught up: d2 stays out
                after = await asyncio.gather(*(stream(url, tokens=4) for _ in range(8)))
                assert all(isinstance(a, bytes) and a.endswith(b"[DONE]\n\n") for a in after)

        asyncio.run(scenario())


def test_a_layerwise_proxy_refuses_several_workers() -> None:
    """A layerwise decoder calls the proxy back at /v1/metaserver: the kernel would hand
    that call to any worker, not the one waiting for it. Control: one worker starts."""
    from servekit.errors import UsageError
    from servekit.proxy.config import parse_args

    argv = ["--mode", "layerwise", "--prefill", "http://127.0.0.1:9000",
            "--decode", "http://127.0.0.1:9001", "--host", "127.0.0.1"]  # fmt: skip
    with pytest.raises(UsageError, match=r"^--workers: 2: in layerwise mode") as caught:
        parse_args([*argv, "--workers", "2"], read_keys=False)
    assert "\n" not in str(caught.value)
    assert parse_args(argv, read_keys=False).workers == 1


def test_the_workers_port_is_taken_again_while_old_connections_are_in_time_wait() -> None:
    """A proxy started again on its address (a restarted container keeps the pod's
    network) binds its port though the old connections linger in TIME_WAIT, as a
    single-process proxy (asyncio's SO_REUSEADDR) does. Control: SO_REUSEPORT alone
    is refused there, so the TIME_WAIT was made."""
    import socket
    import time

    from servekit.proxy.workers import reserve_port

    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    accepted, _ = server.accept()
    accepted.close()  # the server's side closes first: its end waits in TIME_WAIT
    time.sleep(0.05)
    client.close()
    server.close()
    bare = socket.socket()
    bare.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    with pytest.raises(OSError):
        bare.bind(("127.0.0.1", port))
    bare.close()
    reserve_port("127.0.0.1", port).close()
