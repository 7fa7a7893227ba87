"""The decode guard rule (servekit.guard) holds exactly, against an independent spec."""

from __future__ import annotations

from hypothesis import given

from servekit.guard import guard_rejects, is_guarded_path

from .guard_spec import METHODS, PATHS, RELAXED, SUFFIXES, bodies, oracle


@RELAXED
@given(METHODS, PATHS, bodies())
def test_rule_matches_the_spec_exactly(method: str, path: str, body: bytes) -> None:
    assert guard_rejects(method, path, body) is oracle(method, path, body)


@given(PATHS)
def test_only_post_to_generation_paths_is_guarded(path: str) -> None:
    stem = path.rstrip("/")
    assert is_guarded_path("POST", path) is stem.endswith(SUFFIXES)
    assert not is_guarded_path("GET", path)
