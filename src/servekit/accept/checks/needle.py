"""The long-context needle matrix, per context: 11 checks as the seed defines them.

short x1, needle A-D x4, stream x1 (needle D), multi-turn x3 (D, then A, then
B, each answer appended), prefix x2 (the same needle prompt cold then hot).
Each answer goes through the judge. A context larger than the model's
max_model_len, or a model that does not declare retrieval, is skipped with the
reason, never passed.
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable
from typing import Any

from servekit.accept.calibrate import Calibration, calibrate, tolerance
from servekit.accept.check import Check
from servekit.accept.checks.common import tokenize_count
from servekit.accept.context import context_label
from servekit.accept.corpus import filler
from servekit.accept.env import Probe
from servekit.accept.judge import judge_answer
from servekit.accept.needles import (
    ANSWER_LINE,
    NEEDLE_NAMES,
    SYSTEM_PROMPT,
    Needle,
    ask,
    embed,
    instruction_phrases,
    make_codes,
    make_needles,
    question,
    short_instruction,
)
from servekit.accept.outcome import Outcome, failed, passed, skipped
from servekit.accept.replies import answer_text, cached_tokens, read_stream, usage
from servekit.accept.wire import Exchange

TURNS = ("D", "A", "B")
TURN_ROOM = 48  # tokens per turn for the question, the answer line and the template


def needles_for(probe: Probe, ctx: int) -> tuple[Needle, ...]:
    return make_needles(f"{probe.options.seed}:{ctx}", probe.options.needle_depths)


def gate(probe: Probe, ctx: int) -> Outcome | None:
    if "retrieval" not in probe.env.deployment.capabilities:
        return skipped("the model does not declare the retrieval capability")
    limit = probe.env.max_model_len
    if limit is not None and ctx > limit:
        return skipped(f"context {context_label(ctx)} exceeds the model's max_model_len {limit}")
    return None


def needle_messages(document: str, name: str) -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": ask(document, name)},
    ]


async def _count(probe: Probe, messages: list[dict[str, Any]]) -> int | None:
    """Tokens of a chat prompt; falls back to the joined text without a template."""
    url = f"{probe.env.tokenize_base}/tokenize"
    model = probe.env.model
    ex = await probe.env.wire.post(url, {"model": model, "messages": messages})
    count = tokenize_count(ex.json_body()) if ex.ok else None
    if count is None:
        joined = "\n".join(str(m["content"]) for m in messages)
        ex = await probe.env.wire.post(url, {"model": model, "prompt": joined})
        count = tokenize_count(ex.json_body()) if ex.ok else None
    return count


async def calibrated(
    probe: Probe, ctx: int, needles: tuple[Needle, ...], reserve: int
) -> Calibration | str:
    """Filler size for a prompt of ``ctx - reserve`` tokens, shared by the run."""
    key = f"calibration:{ctx}:{len(needles)}:{reserve}"
    if key in probe.env.state:
        found: Calibration | str = probe.env.state[key]
        return found
    target = ctx - reserve - tolerance(ctx)

    async def count(chars: int) -> int | None:
        return await _count(probe, needle_messages(embed(filler(chars), needles), needles[-1].name))

    cal = await calibrate(target, count)
    result: Calibration | str
    if cal is None:
        result = "/tokenize failed while calibrating the prompt"
    elif not cal.within:
        result = f"calibration missed {target} tokens: {cal.tokens} after {cal.iterations} tries ({cal.trail()})"
    else:
        result = cal
    probe.env.state[key] = result
    return result


def judged(
    probe: Probe,
    ex: Exchange,
    text: str | None,
    *,
    expected: str,
    phrases: tuple[str, ...],
    cal: Calibration | None,
) -> Outcome:
    """Judge ``text`` (the answer of ``ex``) and keep what was measured."""
    if text is None:
        return failed(f"request failed: {ex.describe()}")
    codes = tuple(n.code for n in _all_codes(probe))
    verdict = judge_answer(text, expected, instructions=phrases, other_codes=codes)
    measures: dict[str, str | int | float | bool] = {
        "answer": text[:200],
        "answer_chars": verdict.answer_chars,
        "replacement_chars": verdict.replacement_chars,
        "elapsed_s": ex.elapsed_s,
    }
    if cal is not None:
        measures.update(
            prompt_tokens=cal.tokens,
            target_tokens=cal.target,
            iterations=cal.iterations,
            calibration=cal.trail(),
        )
    return (
        passed(verdict.reason, **measures) if verdict.passed else failed(verdict.reason, **measures)
    )


def judged_needle(
    probe: Probe, ex: Exchange, text: str | None, needle: Needle, cal: Calibration | None
) -> Outcome:
    """:func:`judged` for a needle's answer: its code, asked with its instruction phrases."""
    return judged(
        probe, ex, text, expected=needle.code, phrases=instruction_phrases(needle.name), cal=cal
    )


def _all_codes(probe: Probe) -> tuple[Needle, ...]:
    return tuple(n for ctx in probe.options.contexts for n in needles_for(probe, ctx))


async def short(probe: Probe, ctx: int) -> Outcome:
    """A short prompt with a code; the code comes back."""
    if (closed := gate(probe, ctx)) is not None:
        return closed
    code = make_codes(f"{probe.options.seed}:{ctx}:short", 1)[0]
    messages = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": f"{short_instruction(code)}\n{ANSWER_LINE}"},
    ]
    ex = await probe.post(f"{probe.env.entry}/v1/chat/completions", probe.chat(messages))
    phrases = (*instruction_phrases(), short_instruction(code))
    return judged(probe, ex, answer_text(ex), expected=code, phrases=phrases, cal=None)


async def single(probe: Probe, ctx: int, name: str) -> Outcome:
    """One needle in the middle of a calibrated document; its code comes back."""
    if (closed := gate(probe, ctx)) is not None:
        return closed
    needles = needles_for(probe, ctx)
    needle = next(n for n in needles if n.name == name)
    cal = await calibrated(probe, ctx, (needle,), probe.options.max_tokens)
    if isinstance(cal, str):
        return failed(cal)
    body = probe.chat(needle_messages(embed(filler(cal.chars), (needle,)), name))
    ex = await probe.post(f"{probe.env.entry}/v1/chat/completions", body)
    return judged_needle(probe, ex, answer_text(ex), needle, cal)


async def stream(probe: Probe, ctx: int) -> Outcome:
    """Needle D over SSE: judged, with TTFT and finish_reason recorded."""
    if (closed := gate(probe, ctx)) is not None:
        return closed
    needle = needles_for(probe, ctx)[3]
    cal = await calibrated(probe, ctx, (needle,), probe.options.max_tokens)
    if isinstance(cal, str):
        return failed(cal)
    body = probe.chat(
        needle_messages(embed(filler(cal.chars), (needle,)), needle.name),
        stream=True,
        stream_options={"include_usage": True},
    )
    ex = await probe.stream(f"{probe.env.entry}/v1/chat/completions", body)
    reading = read_stream(ex)
    if not ex.ok or reading.problems:
        why = reading.problems[0] if ex.ok else ex.describe()
        return failed(f"stream failed: {why}")
    outcome = judged_needle(probe, ex, reading.text, needle, cal)
    extra = {"ttft_s": ex.ttft_s or 0.0, "finish_reason": reading.finish_reason or ""}
    return outcome.model_copy(update={"measurements": {**outcome.measurements, **extra}})


async def _conversation(
    probe: Probe, ctx: int, upto: int
) -> list[tuple[Exchange, str | None]] | str:
    """Run the multi-turn conversation up to turn ``upto`` (1-based), once per run."""
    turns: list[tuple[Exchange, str | None]] = probe.env.state.setdefault(f"conversation:{ctx}", [])
    needles = needles_for(probe, ctx)
    reserve = len(TURNS) * (probe.options.max_tokens + TURN_ROOM)
    cal = await calibrated(probe, ctx, needles, reserve)
    if isinstance(cal, str):
        return cal
    probe.env.state[f"conversation-cal:{ctx}"] = cal
    messages = needle_messages(embed(filler(cal.chars), needles), TURNS[0])
    for i, (_, answer) in enumerate(turns[: len(TURNS) - 1]):
        messages += _next_turn(answer or "", TURNS[i + 1])
    while len(turns) < upto and (not turns or turns[-1][1] is not None):
        ex = await probe.post(f"{probe.env.entry}/v1/chat/completions", probe.chat(list(messages)))
        answer = answer_text(ex)
        turns.append((ex, answer))
        if answer is not None and len(turns) < len(TURNS):
            messages += _next_turn(answer, TURNS[len(turns)])
    return turns


def _next_turn(answer: str, name: str) -> list[dict[str, Any]]:
    return [
        {"role": "assistant", "content": answer},
        {"role": "user", "content": f"{question(name)}\n{ANSWER_LINE}"},
    ]


async def multi_turn(probe: Probe, ctx: int, turn: int) -> Outcome:
    """Turn ``turn`` of the conversation (asks D, then A, then B) is judged."""
    if (closed := gate(probe, ctx)) is not None:
        return closed
    turns = await _conversation(probe, ctx, turn)
    if isinstance(turns, str):
        return failed(turns)
    if len(turns) < turn:
        return failed(f"turn {len(turns)} failed, so turn {turn} was never asked")
    ex, answer = turns[turn - 1]
    name = TURNS[turn - 1]
    needle = next(n for n in needles_for(probe, ctx) if n.name == name)
    cal = probe.env.state.get(f"conversation-cal:{ctx}")
    return judged_needle(probe, ex, answer, needle, cal)


async def _prefix_prompt(
    probe: Probe, ctx: int
) -> tuple[dict[str, Any], Needle, Calibration] | str:
    needle = needles_for(probe, ctx)[2]
    cal = await calibrated(probe, ctx, (needle,), probe.options.max_tokens)
    if isinstance(cal, str):
        return cal
    nonce = probe.env.state.setdefault(f"prefix-nonce:{ctx}", secrets.token_hex(6))
    document = f"Reading session {nonce}.\n\n{embed(filler(cal.chars), (needle,))}"
    return probe.chat(needle_messages(document, needle.name)), needle, cal


async def prefix(probe: Probe, ctx: int, hot: bool) -> Outcome:
    """The same needle prompt twice: both judged, hot byte-identical to cold, cache hit recorded."""
    if (closed := gate(probe, ctx)) is not None:
        return closed
    built = await _prefix_prompt(probe, ctx)
    if isinstance(built, str):
        return failed(built)
    body, needle, cal = built
    url = f"{probe.env.entry}/v1/chat/completions"
    key = f"prefix-cold:{ctx}"
    if key not in probe.env.state:
        probe.env.state[key] = await probe.post(url, body)
    cold: Exchange = probe.env.state[key]
    ex = await probe.post(url, body) if hot else cold
    outcome = judged_needle(probe, ex, answer_text(ex), needle, cal)
    cached = cached_tokens(usage(ex))
    measures = {**outcome.measurements, "cached_tokens": cached if cached is not None else -1}
    if hot and outcome.verdict == "pass" and answer_text(ex) != answer_text(cold):
        return failed("hot answer is not byte-identical to the cold one", **measures)
    return outcome.model_copy(update={"measurements": measures})


def bind_context(
    fn: Callable[..., Awaitable[Outcome]], *args: object
) -> Callable[[Probe], Awaitable[Outcome]]:
    """A check function with its context (and needle or turn) bound."""

    async def run(probe: Probe) -> Outcome:
        return await fn(probe, *args)

    return run


def checks_for(contexts: tuple[int, ...]) -> tuple[Check, ...]:
    """The 11 needle checks of each context, in the seed's order."""
    rows: list[tuple[str, str, Callable[..., Awaitable[Outcome]], tuple[object, ...]]] = [
        ("short", "short code echo", short, ()),
        *((name, f"needle {name}", single, (name,)) for name in NEEDLE_NAMES),
        ("stream", "needle D streamed", stream, ()),
        *(
            (f"turn{turn}", f"multi-turn {turn} asks {TURNS[turn - 1]}", multi_turn, (turn,))
            for turn in range(1, len(TURNS) + 1)
        ),
        ("prefix_cold", "prefix cold", prefix, (False,)),
        ("prefix_hot", "prefix hot", prefix, (True,)),
    ]
    return tuple(
        Check(
            f"needle.{context_label(ctx)}.{suffix}",
            "needle",
            f"{context_label(ctx)}: {title}",
            bind_context(fn, ctx, *args),
        )
        for ctx in contexts
        for suffix, title, fn, args in rows
    )
