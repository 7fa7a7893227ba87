"""The proxy's JSON codec accepts and refuses what the standard library does (issue 33)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from servekit.proxy import jsoncodec

_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=20)
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=5),
    max_leaves=20,
)  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(_values)
def test_round_trips_as_the_standard_library(doc: Any) -> None:
    assert jsoncodec.loads(jsoncodec.dumps(doc)) == json.loads(json.dumps(doc))


@pytest.mark.parametrize("raw", [b'{"a": NaN}', b'["\\ud800"]', b"[1e400]"])
def test_what_orjson_refuses_the_standard_library_decides(raw: bytes) -> None:
    assert repr(jsoncodec.loads(raw)) == repr(json.loads(raw))


@given(st.binary(max_size=64))
def test_garbage_is_a_value_error_as_before(raw: bytes) -> None:
    try:
        json.loads(raw)
    except (ValueError, RecursionError):
        with pytest.raises((ValueError, RecursionError)):
            jsoncodec.loads(raw)
    else:
        assert repr(jsoncodec.loads(raw)) == repr(json.loads(raw))
