"""JSON over HTTP to a running engine, and the decode guard's refusal as one assertion."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from servekit.guard import GUARD_ERROR_CODE


def post_json(url: str, body: dict[str, Any], timeout_s: float) -> tuple[int, bytes]:
    """(status, body) of a JSON POST; an HTTP error status is an answer, not an exception."""
    req = urllib.request.Request(
        url, json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def guard_refuses(url: str, body: dict[str, Any], timeout_s: float = 60) -> None:
    """The decode engine at ``url`` refuses ``body`` with the guard's 400 and stays healthy."""
    status, raw = post_json(f"{url}/v1/completions", body, timeout_s)
    assert status == 400, (status, raw)
    assert json.loads(raw)["error"]["code"] == GUARD_ERROR_CODE, raw
    with urllib.request.urlopen(f"{url}/health", timeout=timeout_s) as resp:
        assert resp.status == 200
