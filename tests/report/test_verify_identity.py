"""verify against a server that lies about being vLLM: the run is recorded unconfirmed.

The lying front (tests/helpers/liar.py) hides a real simulator behind vLLM's
``/version`` answer; acceptance and the benchmarks pass through it, so the
run passes, and the ledger line says ``unconfirmed`` with the reason, never
``vllm``; the layout is not verified by it. The same run straight against the
simulator is recorded ``sim`` (the positive control of the same path).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.helpers.liar import lying_front

from servekit.catalog.ledger import NOT_OBSERVED, verification_status
from servekit.catalog.loader import load
from servekit.deployment import Deployment, Endpoint
from servekit.sim.testing import running_sim
from servekit.verify.run import VerifyOptions, verify

from .support import SimRunner, components, sim_spec

LAYOUT = "local/single"


def attached(catalog: Path, tmp_path: Path, url: str, name: str) -> VerifyOptions:
    served = load(LAYOUT, catalog).layout.model.served_name
    dep = Deployment(
        layout=LAYOUT,
        model=served,
        entry_url=url,
        endpoints=(Endpoint(name="engine", role="mixed", url=url),),
    )
    path = tmp_path / f"{name}.json"
    path.write_text(dep.model_dump_json())
    return VerifyOptions(
        name=LAYOUT, target=str(path), out=tmp_path / name, catalog=str(catalog), quick=True
    )


@pytest.mark.slow
def test_a_server_lying_about_being_vllm_is_recorded_unconfirmed(
    catalog: Path, tmp_path: Path, runner: SimRunner
) -> None:
    served = load(LAYOUT, catalog).layout.model.served_name
    with running_sim(sim_spec(served)) as sim:
        with lying_front(sim.url) as liar:
            lied = verify(attached(catalog, tmp_path, liar, "liar"), components(runner))
        honest = verify(attached(catalog, tmp_path, sim.url, "sim"), components(runner))
    assert lied.exit_code == 0, [s for s in lied.run.steps if s.status != "ok"]
    assert lied.record is not None and lied.record.engine == "unconfirmed"
    assert lied.record.observed is not None
    assert "says 0.32.0 but Server header" in lied.record.observed["engine"]
    assert lied.record.image == NOT_OBSERVED and lied.record.versions == {}
    assert lied.report_md.read_text().startswith(
        f"# Verification of {LAYOUT}: PASS (unconfirmed engines)"
    )
    assert honest.record is not None and honest.record.engine == "sim"
    status = verification_status(load(LAYOUT, catalog))
    assert status.state == "simulated-only" and not status.verified
    assert "unconfirmed engines" in status.reason or "simulated run only" in status.reason
