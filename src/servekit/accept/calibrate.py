"""Calibrating a long prompt to a token count with the engine's own /tokenize.

Characters per token differ by tokenizer and by text, so the filler length is
found by asking the engine: start from a guess, scale by target/measured, stop
within max(128, N/200) tokens, at most 6 tries (the seed's method).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from servekit.vocabulary import StrictModel

MAX_ITERATIONS = 6
FIRST_GUESS_CHARS_PER_TOKEN = 4.0

Counter = Callable[[int], Awaitable[int | None]]


class Calibration(StrictModel):
    """Where calibration landed: filler characters, tokens measured, tries."""

    target: int
    tolerance: int
    chars: int
    tokens: int
    iterations: int
    tries: tuple[tuple[int, int], ...] = ()
    """Every (filler characters, tokens measured) asked of /tokenize, in order."""

    def trail(self) -> str:
        """The tries as evidence: ``16000 chars -> 4102 tok; 15604 -> 4000``."""
        return "; ".join(f"{c} chars -> {t} tok" for c, t in self.tries)

    @property
    def within(self) -> bool:
        return abs(self.tokens - self.target) <= self.tolerance


def tolerance(target: int) -> int:
    """The seed's tolerance: max(128, N/200) tokens."""
    return max(128, target // 200)


async def calibrate(target: int, count: Counter, tol: int | None = None) -> Calibration | None:
    """Find a filler size whose prompt measures ``target`` tokens within ``tol``.

    ``count(chars)`` builds the prompt with that much filler and returns its
    token count, or None when /tokenize failed (then this returns None).
    """
    tol = tolerance(target) if tol is None else tol
    chars = max(int(target * FIRST_GUESS_CHARS_PER_TOKEN), 1)
    best: Calibration | None = None
    tries: list[tuple[int, int]] = []
    for i in range(1, MAX_ITERATIONS + 1):
        tokens = await count(chars)
        if tokens is None:
            return None
        tries.append((chars, tokens))
        found = Calibration(
            target=target,
            tolerance=tol,
            chars=chars,
            tokens=tokens,
            iterations=i,
            tries=tuple(tries),
        )
        if best is None or abs(tokens - target) < abs(best.tokens - target):
            best = found
        if found.within:
            return found
        chars = max(int(chars * target / max(tokens, 1)), 1)
    return best.model_copy(update={"tries": tuple(tries)}) if best else None
