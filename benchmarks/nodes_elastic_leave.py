"""A new plain-nodes machine SIGTERMed under load: with its leave, and without (the control).

    .venv/bin/python benchmarks/nodes_elastic_leave.py [--rounds 5]

``a2/deepseekv4-flash/2p2d`` rendered with ``nodes.elastic=on`` runs on the fake nodes
cluster (simulated engines at real time that cut their requests on SIGTERM, as vLLM
does by default). Each round starts ``scale/decode0/run.sh INDEX ADDRESS`` on a spare
loopback address, waits until the proxy admits it, sends nine greedy completions
(six streamed, three not) and SIGTERMs the new machine once two of them run on it
(tests/platforms/nodes_elastic.py). Each round does it twice: with the rendered script
(it leaves the proxy first, then stops its engine) and with the join-only script (its
engine stops under the proxy). Two proxies, one after the other: as rendered, and
with its own rescues off (``--max-attempts 1 --migration-limit 0``: no retry of a
failed decode, no migration of a cut stream), which shows what the leave alone saves.
Per run: requests whose answer is not the undisturbed one (failed, cut or other text),
backend failures the proxy counted, its retries and migrations, and the rounds after
which the proxy still held the engine.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.platforms.nodes_elastic import (  # noqa: E402
    LAYOUT,
    SETS,
    admin,
    clean,
    disturbed,
    join_only,
    metric,
    undisturbed,
)

from servekit.platforms.nodes.fake import nodes_dry_cluster  # noqa: E402
from servekit.platforms.request import Files  # noqa: E402

RESCUES_OFF = "  --admin \\\n  --max-attempts \\\n  1 \\\n  --migration-limit \\\n  0 \\\n"


def no_rescue(files: Files) -> None:
    """The rendered proxy with its retry and its migration off."""
    text = str(files["node0/proxy.sh"])
    files["node0/proxy.sh"] = text.replace("  --admin \\\n", RESCUES_OFF)
    assert files["node0/proxy.sh"] != text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    rows = []
    for label, rewrite in (("as rendered", None), ("rescues off", no_rescue)):
        with nodes_dry_cluster(LAYOUT, sets=SETS, speed=1.0, spare=1, rewrite=rewrite) as c:
            base = undisturbed(c)
            assert all(a.ok for a in base), base
            control = join_only(c)
            for run, entry in (("leave", None), ("join-only", control)):
                wrong = failures = held = 0
                names = ("servekit_proxy_retries", "servekit_proxy_migrations",
                         "servekit_proxy_drain_migrated_streams")  # fmt: skip
                before = {n: metric(c.entry_url, n) for n in names}
                for k in range(args.rounds):
                    index = 1 + 2 * k + (run == "join-only")
                    out = disturbed(c, index, entry=entry)
                    problems = clean(out, base)
                    wrong += sum(p.startswith("request ") for p in problems)
                    failures += int(out.failures)
                    held += out.held
                    if out.held:
                        admin(c, "remove", {"urls": [f"http://{c.spare[0]}:7100"]})
                after = {n: metric(c.entry_url, n) - before[n] for n in before}
                rows.append((label, run, args.rounds * len(base), wrong, failures,
                             int(after["servekit_proxy_retries"]),
                             int(after["servekit_proxy_migrations"]),
                             int(after["servekit_proxy_drain_migrated_streams"]), held))  # fmt: skip
    print(
        "| proxy | new machine | requests | not the undisturbed answer | backend failures "
        "| retries | migrations | of them a drain's | rounds it stayed in the pool |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(str(x) for x in row) + f" of {args.rounds} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
