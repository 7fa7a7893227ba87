"""``layouts drift`` bounded in time, not only bytes (issue 36, item 10).

One unclosed quote made the reader re-split the whole open value at every line
(40 KB took 14 s, 131 KB 80 s): the cost is counted here as the characters the
reader hands to :func:`shlex.split`, which must stay proportional to the file.
The quote state now carried from line to line must agree with shlex's own
reading (hypothesis, against the whole-value re-split it replaced). A FIFO
given as ``--upstream`` is refused at once instead of waited on.
"""

from __future__ import annotations

import os
import shlex
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from servekit.errors import UsageError
from servekit.layouttools import drift as drift_mod
from servekit.layouttools.drift import MAX_LINE, parse_upstream


def _unclosed(size: int) -> str:
    return "vllm serve m --x '\n" + "ab\n" * (size // 3)


def test_one_unclosed_quote_costs_time_in_proportion_to_the_file(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    split = shlex.split
    read = [0]

    def counting(text: str, comments: bool = False, posix: bool = True) -> list[str]:
        read[0] += len(text)
        return split(text, comments, posix)

    monkeypatch.setattr(shlex, "split", counting)
    text = _unclosed(8 * 1024)
    parse_upstream(text)
    # Before: every line re-split the open value, about 11 million characters here.
    assert read[0] <= 2 * len(text), read[0]


def _whole_value_open(text: str) -> bool:
    """The reading this replaced: the whole value re-split, open when shlex finds no close."""
    try:
        shlex.split(text, comments=True)
    except ValueError:
        return len(text) < MAX_LINE
    return False


def _logical_by_resplit(block: list[tuple[int, str]]) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = []
    start, acc = 0, ""
    for no, line in block:
        if line.lstrip().startswith("#") and not acc:
            continue
        if not acc:
            start = no
        if line.rstrip().endswith("\\"):
            acc += line.rstrip()[:-1] + " "
            continue
        acc += line
        if _whole_value_open(acc):
            acc += "\n"
            continue
        out.append((start, acc))
        acc = ""
    if acc:
        out.append((start, acc))
    return out


LINES = st.lists(
    st.text(alphabet="ab '\"\\#\t", max_size=12) | st.sampled_from(["--x '{\"a\": 1}'", "# c"]),
    max_size=12,
)


@settings(max_examples=400, deadline=None)
@given(LINES)
def test_the_carried_quote_state_joins_lines_as_shlex_reads_them(lines: list[str]) -> None:
    block = list(enumerate(lines, 1))
    assert drift_mod._logical(block) == _logical_by_resplit(block)


def test_a_fifo_upstream_is_refused_not_waited_on(tmp_path: Path) -> None:
    fifo = tmp_path / "tutorial.md"
    os.mkfifo(fifo)
    got: list[BaseException | None] = []

    def read() -> None:
        try:
            drift_mod._read(fifo)
        except UsageError as exc:
            got.append(exc)
        else:
            got.append(None)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout=30)
    if reader.is_alive():  # before: blocked in open(); a writer lets it go
        os.close(os.open(fifo, os.O_WRONLY))
        reader.join(timeout=30)
        pytest.fail("--upstream FIFO: the reader waited on the FIFO")
    assert (
        got and str(got[0]) == f"--upstream {fifo}: not a regular file (a FIFO, device or folder)"
    )
