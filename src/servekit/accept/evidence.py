"""Evidence files: every request a check sends and every response it judged.

A verdict is only as good as what it was judged on, so each exchange is written
beside the result (``evidence/<check>/<n>-request.json`` and ``-response.json``)
and named in the check's result with its sha256. The report links to them.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

from servekit.accept.models import EvidenceFile
from servekit.accept.wire import Exchange
from servekit.vocabulary import atomic_write_bytes

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


class EvidenceStore:
    """Writes exchanges under ``root/evidence`` and returns their records."""

    def __init__(self, root: Path, sim_speed: float | None = None) -> None:
        self.root = root
        self.sim_speed = sim_speed
        self._counters: dict[str, int] = {}

    def record(self, check_id: str, exchange: Exchange) -> tuple[EvidenceFile, ...]:
        """Write the request (when there is a body) and the response of ``exchange``."""
        n = self._counters.get(check_id, 0) + 1
        self._counters[check_id] = n
        folder = Path("evidence") / _UNSAFE.sub("_", check_id)
        request = {
            "method": exchange.method,
            "url": exchange.url,
            "json": exchange.request,
            "sha256_of_bytes_sent": exchange.request_sha256 or None,
        }
        response: dict[str, Any] = {
            "status": exchange.status,
            "error": exchange.error,
            "elapsed_s": exchange.elapsed_s,
            "ttft_s": exchange.ttft_s,
            "body": exchange.body if not exchange.frames else None,
            "frames": list(exchange.frames),
        }
        if self.sim_speed is not None:  # wall times of a simulation run this much faster
            response["sim_speed"] = self.sim_speed
        return (
            self._write(folder / f"{n:02d}-request.json", request, "request"),
            self._write(folder / f"{n:02d}-response.json", response, "response"),
        )

    def _write(self, rel: Path, doc: dict[str, Any], kind: str) -> EvidenceFile:
        data = (json.dumps(doc, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
        atomic_write_bytes(self.root / rel, data)
        return EvidenceFile(
            path=rel.as_posix(),
            sha256=hashlib.sha256(data).hexdigest(),
            kind="request" if kind == "request" else "response",
        )
