"""The defaults table per engine kind, role and layout family, in one place.

Every engine of every layout takes its tunables from exactly its family's row
(its profile's settings for its role, or the generic row of its engine kind)
plus its own overrides; the V4.1 kit's values stay out of the V4 families;
``servekit defaults`` shows the generic rows and every family's rows and
narrows them with --kind, --role and --family.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
import yaml
from rich.console import Console
from tests.helpers.cli import servekit_inproc

from servekit.catalog.families import (
    GENERIC,
    catalog_profiles,
    defaults_rows,
    family_of,
    family_settings,
)
from servekit.catalog.loader import layout_names, load, packaged_catalog
from servekit.defaults import SETTINGS_BY_KEY, format_value
from servekit.render.plan import build_plan
from servekit.render.views import print_defaults

CATALOG = packaged_catalog()
PROFILES = {p.name: p for p in catalog_profiles()}
# The V4.1 TP8 kit's values (layouts/a3/dsv41-tp8): they belong to that layout only.
V41_KIT = {"gpu_memory_utilization": 0.92, "max_num_seqs": 32, "max_num_batched_tokens": 8192}


def _own_overrides(name: str, engine: str) -> dict[str, Any]:
    """The settings an engine writes in its own layout.yaml (not merged from a profile)."""
    raw = yaml.safe_load((CATALOG / name / "layout.yaml").read_text())
    mine: dict[str, Any] = next(e for e in raw["engines"] if e["name"] == engine)
    return dict(mine.get("settings") or {})


@pytest.mark.parametrize("name", layout_names(CATALOG))
def test_every_engine_takes_its_familys_row_plus_its_own_overrides(name: str) -> None:
    layout = load(name).layout
    plan = build_plan(layout)
    for engine in layout.engines:
        row = family_settings(family_of(engine), layout.engine_kind, engine.role, PROFILES)
        # The engine's own values win; its null removes the family's value (profiles.merge_layers).
        merged = {**row, **_own_overrides(name, engine.name)}
        wanted = {k: v for k, v in merged.items() if v is not None}
        expected = {SETTINGS_BY_KEY[k].var: format_value(v) for k, v in wanted.items()}
        # A headless rank serves no API: it takes everything but the decode guard.
        headless = {k: v for k, v in expected.items() if k != SETTINGS_BY_KEY["guard"].var}
        # KV_EVENTS only where the process publishes (a proxy routes to it...): elsewhere
        # the variable would switch nothing (servekit.defaults.kv_events_unfit)
        events = SETTINGS_BY_KEY["kv_events"].var
        for process in plan.processes:
            if process.engine == engine.name:
                want = dict(headless if process.headless else expected)
                if process.kv_events_port is None:
                    want.pop(events, None)
                else:
                    assert want[events] == "1", (name, process.name)
                assert process.settings == want, (name, process.name)


def test_the_v41_kit_values_stay_out_of_the_v4_families_and_the_generic_rows() -> None:
    rows = [r for r in defaults_rows(kind="vllm-ascend") if r.family != "dsv41"]
    assert {r.family for r in rows} == {GENERIC, *PROFILES}
    cells: dict[tuple[str, str], dict[str, str]] = {}
    for r in rows:
        cells.setdefault((r.family, r.role), {})[r.setting.key] = r.value
    for (family, role), row in cells.items():
        if not (family == GENERIC or family.startswith("dsv4")):
            continue  # imported families (<model>-<hw>) hold their own source folders' values
        # 8192 batched tokens is also the V4 prefill source's own value; 0.92 and 32 are not.
        assert row.get("gpu_memory_utilization") != "0.92", (family, role)
        assert row.get("max_num_seqs") != "32", (family, role)
    tp8 = load("a3/dsv41-tp8").layout.engines[0]
    assert family_of(tp8) == GENERIC
    assert {k: tp8.settings[k] for k in V41_KIT} == V41_KIT  # its own overrides, said once


def shown(**filters: Any) -> str:
    console = Console(width=80, file=io.StringIO(), color_system=None)
    print_defaults(filters.pop("role", None), filters.pop("kind", None), console, **filters)
    out: str = console.file.getvalue()  # type: ignore[attr-defined]
    assert all(len(line) <= 80 for line in out.splitlines()), out
    assert "…" not in out
    return out


def test_defaults_shows_the_generic_rows_and_every_familys_rows() -> None:
    out = " ".join(shown().split())
    for family in (GENERIC, *PROFILES):
        assert f"family {family} (" in out
    # The hand-made a3/<topology> names are aliases now (aliases.yaml): the imported
    # layouts use the imported family, and the hand-made families no layout.
    flash = ", ".join(f"a3/deepseekv4-flash/{t}" for t in ("1node", "1p1d", "1p3d", "2nodes"))
    assert f"family deepseekv4-flash-a3 (vllm-ascend), used by {flash}," in out
    assert "family dsv4-flash-a3-pd (vllm-ascend), used by no layout of this catalog" in out
    assert "used by a3/dsv41-ced-pd, a3/dsv41-tp8" in out


@pytest.mark.slow
def test_defaults_narrows_by_family_kind_and_role() -> None:
    out = shown(family="dsv4-flash-a3-pd", role="decode")
    assert "family dsv4-flash-a3-pd (vllm-ascend)" in out and "family generic" not in out
    assert " 60 " in out and " 16 " not in out  # decode's max_num_seqs, not prefill's
    cpu = shown(kind="vllm-cpu")
    assert "family generic (vllm-cpu)" in cpu and "vllm-ascend" not in cpu


def test_an_unknown_family_is_one_line_and_exit_2(tmp_path: Path) -> None:
    result = servekit_inproc("defaults", "--family", "dsv5", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.startswith("error: --family 'dsv5': unknown family; choose one of generic")
    assert result.stderr.count("\n") == 1
