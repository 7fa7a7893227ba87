"""Bounded reads (issue 25): at most N bytes, else one line naming the input and the fix."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from servekit.errors import UsageError
from servekit.kit.errors import KitRefused
from servekit.vocabulary import read_at_most


@settings(deadline=None)
@given(st.integers(min_value=0, max_value=64), st.integers(min_value=0, max_value=64))
def test_a_file_is_kept_exactly_when_it_fits(size: int, limit: int) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "f"
        path.write_bytes(b"x" * size)
        try:
            data = read_at_most(path, limit, "--in f", "too large; give a smaller file")
        except UsageError as exc:
            assert size > limit and str(exc) == "--in f: too large; give a smaller file"
        else:
            assert size <= limit and data == b"x" * size


def test_an_unreadable_path_is_one_line_with_the_hint(tmp_path: Path) -> None:
    with pytest.raises(UsageError) as err:
        read_at_most(tmp_path / "missing", 10, "--plan p", "big", hint="; render it again")
    assert str(err.value).startswith("--plan p: cannot read (")
    assert str(err.value).endswith("; render it again") and "\n" not in str(err.value)


def test_a_caller_chooses_its_error(tmp_path: Path) -> None:
    (tmp_path / "m.json").write_bytes(b"{}" * 10)
    with pytest.raises(KitRefused, match=re.escape("kit k: m.json is larger than 4 bytes")):
        read_at_most(
            tmp_path / "m.json", 4, "kit k", "m.json is larger than 4 bytes", error=KitRefused
        )
