"""``--set k8s.prefix`` and ``k8s.accelerator``: checked at the option, never run by ``pod.sh``.

Before (issue 45): four bad prefixes rendered with exit 0 and 15 object names
Kubernetes refuses (upper case, ``_``, over 63 characters), and a prefix holding
``$(...)`` ran in ``pod.sh``, which wrote it unquoted as a ``case`` pattern. Now
every name the rendering writes, and those Kubernetes derives from them (a
LeaderWorkerSet's headless Service, its pods, its StatefulSets' revision label),
follows Kubernetes' rule for its kind, or the option is refused in one line
(exit 2, nothing written); and ``pod.sh`` quotes each table value, so even a
rendering that bypassed the check runs nothing.

The rules here are Kubernetes' own (apimachinery's validation: DNS-1035 labels
for Services, DNS-1123 subdomains for the other objects, 63-character label
values, a StatefulSet's ``controller-revision-hash: <name>-<10 characters>``),
applied to the rendered objects, not servekit's check read back.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings, strategies as st
from tests.helpers.cli import servekit_inproc
from tests.platforms.rendered import CATALOG, plan

from servekit.errors import UsageError
from servekit.platforms import render_target
from servekit.platforms.k8s.build import render_k8s
from servekit.platforms.k8s.groups import engine_groups
from servekit.platforms.k8s.names import check_names
from servekit.platforms.k8s.settings import parse_settings

DNS1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
HASH = 11  # "-" and the 10-character hash of a StatefulSet's controller-revision-hash label
LAYOUT = "a3/glm5.1/1x2p1x4d"  # two LeaderWorkerSets of size 2 and 4, a proxy
CANARY = Path(tempfile.mkdtemp(prefix="servekit-k8s-canary-"))
HOSTILE_PIECES = [
    f"$(touch {CANARY}/subst)",
    f"`touch {CANARY}/backtick`",
    f"'; touch {CANARY}/quote; '",
    f'"; touch {CANARY}/dquote; "',
    f") touch {CANARY}/paren ;; *)",
    f"\ntouch {CANARY}/newline\n",
    "*",
    "?",
    "[a-z]",
    "-",
    "sk",
    "Prod",
    "a_b",
    "x",
    "9",
]
HYPO = settings(
    max_examples=int(os.environ.get("SERVEKIT_HOSTILE_EXAMPLES", "25")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def _objects(files: dict[str, str | bytes]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for path, text in files.items():
        if path.endswith(".yaml") and path != "kustomization.yaml":
            assert isinstance(text, str)
            out += [o for o in yaml.safe_load_all(text) if o]
    return out


def _kubernetes_refuses(obj: dict[str, Any]) -> list[str]:
    """What Kubernetes (and the LWS controller creating its children) would refuse."""
    meta, kind = obj["metadata"], obj["kind"]
    name = meta["name"]
    bad = []
    if not (SUBDOMAIN.fullmatch(name) and len(name) <= 253):
        bad.append(f"{kind} {name!r}: not a DNS-1123 subdomain")
    if kind in ("Service", "LeaderWorkerSet") and not (DNS1035.fullmatch(name) and len(name) <= 63):
        bad.append(f"{kind} {name!r}: its Service name is not a DNS-1035 label")
    for key, value in meta.get("labels", {}).items():
        if not (LABEL_VALUE.fullmatch(value) and len(value) <= 63):
            bad.append(f"{kind} {name!r}: label {key}={value!r}")
    if kind == "LeaderWorkerSet":
        spec = obj["spec"]
        last_group = spec["replicas"] - 1
        size = spec["leaderWorkerTemplate"]["size"]
        pod = f"{name}-{last_group}" + (f"-{size - 1}" if size > 1 else "")
        statefulset = f"{name}-{last_group}" if size > 1 else name
        if len(pod) > 63:
            bad.append(f"pod {pod!r}: over 63 characters")
        if len(statefulset) + HASH > 63:
            bad.append(f"StatefulSet {statefulset!r}: no room for its revision label")
    return bad


@pytest.mark.parametrize(
    "prefix", ["Prod", "a_b", "a" * 70, f"x$(touch {CANARY}/cli)"], ids=["upper", "_", "70", "$()"]
)
def test_a_bad_prefix_is_refused_in_one_line_before_anything_is_written(
    tmp_path: Path, prefix: str
) -> None:
    out = tmp_path / "k8s"
    done = servekit_inproc(
        "render", LAYOUT, "--target", "k8s", "--out", str(out), "--set", f"k8s.prefix={prefix}"
    )
    assert done.returncode == 2, done.stdout
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("error: --set k8s.prefix="), line
    assert not out.exists() and not any(CANARY.iterdir())


def _unchecked(name: str, prefix: str, kind: str = "leaderworkerset") -> dict[str, str | bytes]:
    """The rendering's files with any prefix: the build step takes what it is given."""
    layout = CATALOG[name]
    settings = dataclasses.replace(parse_settings({"kind": kind}, layout), prefix=prefix)
    return render_k8s(plan(name), layout, settings, {})


LONGEST = 20  # the longest prefix k8s.prefix takes (platforms/k8s/settings.py)


@pytest.mark.parametrize("kind", ["leaderworkerset", "disaggregatedset"])
def test_the_longest_prefix_the_option_takes_renders_names_kubernetes_takes(kind: str) -> None:
    render_target(LAYOUT, "k8s", ["k8s.prefix=" + "p" * LONGEST], extra={"kind": kind})
    with pytest.raises(UsageError, match=r"k8s\.prefix"):
        render_target(LAYOUT, "k8s", ["k8s.prefix=" + "p" * (LONGEST + 1)], extra={"kind": kind})
    objects = _objects(_unchecked(LAYOUT, "p" * LONGEST, kind))
    assert [bad for o in objects for bad in _kubernetes_refuses(o)] == []


@pytest.mark.slow  # every catalog layout, both kinds (about 5 s here)
def test_every_layout_at_the_longest_prefix_makes_names_kubernetes_takes() -> None:
    from tests.platforms.rendered import LAYOUTS, PD_LAYOUTS

    refused = {}
    for name in LAYOUTS:
        for kind in ("leaderworkerset", *(("disaggregatedset",) if name in PD_LAYOUTS else ())):
            objects = _objects(_unchecked(name, "p" * LONGEST, kind))
            bad = [b for o in objects for b in _kubernetes_refuses(o)]
            if bad:
                refused[(name, kind)] = bad[:3]
    assert refused == {}


@pytest.mark.parametrize("kind", ["leaderworkerset", "disaggregatedset"])
def test_a_derived_name_over_its_bound_is_refused_naming_the_longest_prefix(kind: str) -> None:
    """The derived-name check itself (past the option's own cap): a prefix that leaves a
    LeaderWorkerSet no room for its revision hash is refused, and the longest prefix it
    names makes names Kubernetes takes."""
    groups = engine_groups(plan(LAYOUT), "p" * 45)
    with pytest.raises(UsageError, match=r"at most (\d+) characters") as refused:
        check_names(groups, "p" * 45, kind)
    longest = int(re.search(r"at most (\d+)", str(refused.value)).group(1))  # type: ignore[union-attr]
    fits = "p" * longest
    check_names(engine_groups(plan(LAYOUT), fits), fits, kind)
    assert [
        bad for o in _objects(_unchecked(LAYOUT, fits, kind)) for bad in _kubernetes_refuses(o)
    ] == []
    with pytest.raises(UsageError):
        check_names(engine_groups(plan(LAYOUT), fits + "p"), fits + "p", kind)


def test_kubernetes_refuses_what_the_issue_rendered() -> None:
    """The rule above is not vacuous: the objects rendered without the check (the build
    step takes any prefix) are refused, 15 names and more for these four values."""
    refused = 0
    for prefix in ("Prod", "a_b", "a" * 70, "x$(id)"):
        refused += sum(len(_kubernetes_refuses(o)) for o in _objects(_unchecked(LAYOUT, prefix)))
    assert refused >= 15


@pytest.mark.slow  # 25 renderings (about 0.25 s each here)
@HYPO
@given(
    prefix=st.one_of(
        st.lists(st.sampled_from(HOSTILE_PIECES), min_size=1, max_size=4).map("".join),
        st.from_regex(r"[a-z][a-z0-9-]{0,60}", fullmatch=True),
    ),
    kind=st.sampled_from(["leaderworkerset", "disaggregatedset"]),
)
def test_any_prefix_renders_names_kubernetes_takes_or_is_refused_in_one_line(
    prefix: str, kind: str
) -> None:
    try:
        _, files = render_target(LAYOUT, "k8s", [f"k8s.prefix={prefix}"], extra={"kind": kind})
    except UsageError as exc:
        assert str(exc).startswith("--set k8s.prefix=") and "\n" not in str(exc)
        return
    assert [bad for o in _objects(files) for bad in _kubernetes_refuses(o)] == []


@pytest.mark.parametrize(
    ("value", "good"),
    [
        ("huawei.com/ascend-1980", True),
        ("nvidia.com/gpu", True),
        ("example.com/npu", True),
        ("", True),
        ("Huawei.com/npu", False),
        ("a b/npu", False),
        ("x.io/$(touch /tmp/x)", False),
        ("x.io/" + "n" * 64, False),
    ],
)
def test_the_accelerator_is_a_resource_name(tmp_path: Path, value: str, good: bool) -> None:
    sets = [f"k8s.accelerator={value}"]
    if good:
        render_target(LAYOUT, "k8s", sets)
    else:
        with pytest.raises(UsageError, match=r"k8s\.accelerator"):
            render_target(LAYOUT, "k8s", sets)


def _pod_run(folder: Path, group: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(folder / "pod.sh"), group],
        env={"PATH": os.environ["PATH"], "DRY_RUN": "1", **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _prove_pod_sh(prefix: str) -> None:
    """``pod.sh`` of a rendering built past the check (``render_k8s`` takes any prefix):
    a worker pod started under bash as LWS starts it (``DRY_RUN=1``) prints its own
    process and nothing it was given runs; a group it does not know is refused."""
    files = _unchecked(LAYOUT, prefix)
    maps = {o["metadata"]["name"]: o for o in yaml.safe_load_all(files["configmaps.yaml"]) if o}
    group = f"{prefix}-prefill"
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for cm in (maps[f"{group}-scripts"], maps[f"{prefix}-bundle"]):
            for key, text in cm.get("data", {}).items():
                (folder / key).write_text(text)
        env = {
            "POD_IP": "10.0.0.3",
            "SERVEKIT_GROUP_INDEX": "0",
            "LWS_WORKER_INDEX": "1",
            "LWS_GROUP_SIZE": "2",
            "LWS_LEADER_ADDRESS": "10.0.0.2",
            "NODE_NIC": "eth0",
        }
        done = _pod_run(folder, group, env)
        assert done.returncode == 0, done.stderr
        assert done.stdout.count("\n# ") == 1 and "# prefill0.dp1\n" in done.stdout
        stranger = _pod_run(folder, "*", {"POD_IP": "10.0.0.3"})
        assert stranger.returncode == 2 and "has nothing to run" in stranger.stderr
    assert not any(CANARY.iterdir()), sorted(CANARY.iterdir())


def test_pod_sh_runs_no_value_even_of_an_unchecked_rendering() -> None:
    _prove_pod_sh("".join(HOSTILE_PIECES[:6]))


@pytest.mark.slow  # 25 renderings, each pod started under bash (about 0.5 s each here)
@HYPO
@given(prefix=st.lists(st.sampled_from(HOSTILE_PIECES), min_size=1, max_size=4).map("".join))
def test_pod_sh_runs_no_value_of_any_unchecked_prefix(prefix: str) -> None:
    _prove_pod_sh(prefix)


def teardown_module() -> None:
    shutil.rmtree(CANARY, ignore_errors=True)
