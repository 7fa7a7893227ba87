"""The checks that moved into the options models: one line naming the flag, before any work.

``servekit deployment`` and ``servekit up`` used to check ``--engine``,
``--speed``, ``--logs``, ``--entry`` and ``--out`` in their run functions; the
models check them now, so every caller (the CLI, verify's runner, a test) gets
the same refusal. The kit models turn ``--max-size``/``--max-ratio`` into the
stream bounds in one place.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from servekit.cliopts import build_options
from servekit.errors import UsageError
from servekit.kit.options import KitBuildOptions, KitRebuildOptions, KitVerifyOptions
from servekit.local.options import UpOptions
from servekit.verify.options import DeploymentOptions


def _deployment(tmp_path: Path, **given: object) -> DeploymentOptions:
    base = {"name": "a3/1p1d", "nodes": "a,b", "out": tmp_path / "d.json"}
    return build_options(DeploymentOptions, {**base, **given}, arguments=("name",))


@given(st.text(min_size=1, max_size=20).filter(lambda s: s not in ("vllm", "sim")))
def test_deployment_refuses_any_other_engine_naming_the_flag(engine: str) -> None:
    with pytest.raises(UsageError) as err:
        _deployment(Path("/nonexistent-folder"), engine=engine)
    assert str(err.value).startswith("--engine ") and "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ({"speed": 2.0}, "--speed: only simulated engines have a speed; add --engine sim"),
        ({"logs": Path("/nonexistent")}, "--logs /nonexistent: no such folder"),
        ({"entry": "ftp://x"}, "--entry ftp://x:"),
    ],
)
def test_deployment_flags_are_checked_by_the_model(
    tmp_path: Path, given: dict[str, object], says: str
) -> None:
    with pytest.raises(UsageError, match=says):
        _deployment(tmp_path, **given)


def test_deployment_out_is_never_another_file_nor_a_folder(tmp_path: Path) -> None:
    precious = tmp_path / "notes.json"
    precious.write_text('{"mine": true}')
    with pytest.raises(UsageError, match=r"is not a deployment\.json"):
        _deployment(tmp_path, out=precious)
    with pytest.raises(UsageError, match="is a folder"):
        _deployment(tmp_path, out=tmp_path)
    ok = _deployment(tmp_path, engine="sim", speed=5.0, logs=tmp_path)
    assert ok.logs == tmp_path.resolve() and ok.speed == 5.0


@given(st.floats(min_value=0.001, max_value=10000))
def test_up_refuses_a_speed_for_real_engines(speed: float) -> None:
    with pytest.raises(UsageError, match=r"--speed .*--engine sim"):
        build_options(UpOptions, {"name": "local/1p1d", "speed": speed}, arguments=("name",))
    sim = build_options(UpOptions, {"name": "local/1p1d", "engine": "sim", "speed": speed})
    assert sim.speed == speed


@given(st.integers(min_value=1, max_value=1 << 40), st.integers(min_value=1, max_value=10**6))
def test_the_size_flags_are_the_stream_bounds(size: int, ratio: int) -> None:
    bounds = {"max_size": size, "max_ratio": ratio}
    for opts in (
        KitBuildOptions(base="b", out=Path("k.tar.zst"), **bounds),
        KitVerifyOptions(archive=Path("k.tar.zst"), **bounds),
        KitRebuildOptions(kit=Path("k"), base="b", out=Path("o"), **bounds),
    ):
        assert (opts.limits.max_total, opts.limits.max_ratio) == (size, ratio)
