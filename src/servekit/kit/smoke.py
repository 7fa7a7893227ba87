"""The smoke row: a ``selftest.sh image`` log from the rebuilt image, read back.

``kit verify`` never runs anything from a kit; the smoke test runs where the
image runs (``docker run ... selftest.sh image``, or ``chroot`` into an
unpacked rootfs) and its log is handed to ``kit verify --smoke LOG``. The log
must name this kit's image id, and show L1 (every payload file's sha256 at its
image path), L2 (py_compile of every Python payload file) and one import line
per stamped engine with the stamped version, all ``ok`` and all complete.

The image id is baked into the script, so it proves only which script wrote
the log. Where the log ran is proven by the proof line
(:mod:`servekit.kit.smokeproof`): this run's nonce and the digest of the
rebuilt image's own files, recomputed here from the image ``--base`` rebuilt.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from servekit.kit.checks import CheckResult, counted
from servekit.kit.fsmanifest import FsState
from servekit.kit.jsonsafe import decode_text
from servekit.kit.models import KitManifest
from servekit.kit.smokeproof import expected_proof, redeem_nonce, was_issued, witnesses
from servekit.vocabulary import read_at_most

MAX_LOG = 16 << 20
_HEADER = re.compile(r"selftest kit (\S+) image (sha256:[0-9a-f]{64})")
_COUNT = re.compile(r"(L1 payload sha256|L2 py_compile): (\d+)/(\d+) (ok|FAILED)")
_IMPORT = re.compile(r"L2 import (\S+): (.*) (ok|FAILED) \(stamp (.*)\)")
_PROOF = re.compile(r"selftest proof ([0-9a-f]+) (sha256:[0-9a-f]{64})")


_NOT_ISSUED = (
    "the log answers a nonce kit verify did not issue here, or one a log already"
    " answered: run kit verify --out DIR for a fresh nonce and run selftest.sh again"
)


@dataclass(frozen=True)
class Challenge:
    """What this verify run knows and the log cannot: its nonce and the rebuilt filesystem.

    ``rootfs`` is the image the rebuild row rebuilt and proved (None when it
    did not run or failed); ``base`` is the reference it was rebuilt onto.
    """

    nonce: str | None = None
    rootfs: FsState | None = None
    base: str | None = None


@dataclass
class _Log:
    image: str | None = None
    proof: tuple[str, str] | None = None
    counts: dict[str, tuple[int, int, bool]] = field(default_factory=dict)
    imports: dict[str, tuple[str, bool]] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)


def _parse(text: str) -> _Log:
    log = _Log()
    for line in text.splitlines():
        if match := _HEADER.fullmatch(line):
            log.image = match[2]
        elif match := _PROOF.fullmatch(line):
            log.proof = (match[1], match[2])
        elif match := _COUNT.fullmatch(line):
            log.counts[match[1]] = (int(match[2]), int(match[3]), match[4] == "ok")
        elif match := _IMPORT.fullmatch(line):
            log.imports[match[1]] = (match[2], match[3] == "ok" and match[2] == match[4])
        elif line.startswith(("L1 FAILED", "L2 FAILED")):
            log.failures.append(line)
    return log


def _proof_problem(m: KitManifest, log: _Log, challenge: Challenge) -> str | None:
    """Why the log's proof line does not prove it ran in the rebuilt image (None: it does)."""
    if challenge.nonce is None:
        return (
            "no nonce was issued for this log: run kit verify --out DIR, run"
            " 'sh selftest.sh image NONCE' with DIR/smoke-nonce.txt's nonce, then give"
            " --nonce DIR/smoke-nonce.txt"
        )
    if challenge.rootfs is None:
        return (
            "the proof is recomputed from the rebuilt image: give --base BASE"
            " (and the rebuild row must pass)"
        )
    if log.proof is None:
        return "the log carries no proof line: run 'sh selftest.sh image NONCE' in the image"
    nonce, digest = log.proof
    if nonce != challenge.nonce:
        return f"the log answers nonce {nonce[:32]}, not this run's: a log from an earlier run"
    if not was_issued(nonce):
        return _NOT_ISSUED
    if digest != expected_proof(witnesses(m), challenge.rootfs, nonce):
        return (
            "the proof does not match the rebuilt image's files: the log did not run"
            " inside this image"
        )
    if not redeem_nonce(nonce):
        return _NOT_ISSUED
    return None


def smoke_row(m: KitManifest, path: Path, challenge: Challenge | None = None) -> CheckResult:
    """L1/L2 and the proof from the log, against what this kit and this run must show."""
    challenge = challenge or Challenge()
    what = f"--smoke {path}"
    data = read_at_most(path, MAX_LOG, what, f"larger than {MAX_LOG} bytes; give the selftest log")
    log = _parse(decode_text(data, what))
    problems = list(log.failures)
    if log.image != m.image.image_id:
        problems.insert(0, f"the log is from image {log.image or '(none named)'}, not this kit's")
    proof_problem = _proof_problem(m, log, challenge)
    where = f"ran in {m.image.image_id} (the kit rebuilt onto {challenge.base})"
    if proof_problem is not None:
        problems.insert(0, proof_problem)
    wants = {
        "L1 payload sha256": len(m.payload),
        "L2 py_compile": sum(p.path.endswith(".py") for p in m.payload),
    }
    kept, items = 0, []
    for label, want in wants.items():
        ok, total, good = log.counts.get(label, (0, 0, False))
        if total != want or not good or ok != want:
            problems.append(f"{label}: {ok}/{total} in the log, {want}/{want} expected")
        kept += min(ok, want) if total == want else 0
        items.append(f"{label}: {ok}/{total} ({want} expected)")
    engines = m.code.engines if m.code else {}
    for name, version in sorted(engines.items()):
        module = name.replace("-", "_")
        found, good = log.imports.get(module, ("(no import line)", False))
        if not good:
            problems.append(f"import {module}: {found}, stamp {version}")
        kept += good
        items.append(f"import {module} {found} ({'OK' if good else 'FAILED'}, stamp {version})")
    kept += proof_problem is None
    items.insert(0, f"proof {'OK: ' + where if proof_problem is None else 'FAILED'}")
    total = sum(wants.values()) + len(engines) + 1
    return counted("smoke", kept, total, problems, items, what="; ".join(items))
