"""How many tokens a request may have, and which of them it gets.

Pure functions of the request and the endpoint's voice: the natural answer
(see textgen), stretched by ``ignore_eos``/``min_tokens``, cut by ``stop``
strings and ``max_tokens``, with vLLM's finish reason.
"""

from __future__ import annotations

from servekit.sim.openai import ApiError, GenRequest
from servekit.sim.shaping import shape
from servekit.sim.textgen import Voice, answer_pieces, continuation, stable_seed


def token_budget(max_tokens: int | None, prompt_len: int, max_model_len: int) -> int:
    """``max_tokens`` or what fits; vLLM's 400 when the request cannot fit."""
    room = max_model_len - prompt_len
    limit = max_tokens if max_tokens is not None else room
    if limit > room or room < 1:
        raise ApiError(
            400,
            f"This model's maximum context length is {max_model_len} tokens. "
            f"However, you requested {prompt_len + max(limit, 1)} tokens "
            f"({prompt_len} in the messages, {limit} in the completion). "
            "Please reduce the length of the messages or completion.",
        )
    return limit


def plan_output(
    req: GenRequest, digest: int, limit: int, voice: Voice, natural: tuple[int, int]
) -> tuple[list[str], str]:
    """The pieces the engine will emit and the finish reason (``stop`` or ``length``)."""
    out = answer_pieces(
        req.prompt_text,
        req.question_text,
        digest,
        sampling=req.sampling,
        voice=voice,
        natural=natural,
    )
    if req.thinking or req.tool is not None or req.structured:
        seed = stable_seed(digest, "shape")
        out = shape(out, thinking=req.thinking, tool=req.tool, structured=req.structured, seed=seed)
    want = limit if req.ignore_eos else min(max(req.min_tokens, len(out)), limit)
    if len(out) < want:
        out.extend(continuation(digest, req.sampling, voice, want - len(out)))
    stopped = apply_stop(out, req.stop, req.include_stop)
    if stopped is not None and len(stopped) <= limit:
        return stopped, "stop"
    if len(out) >= limit:
        return out[:limit], "length"
    return out, "stop"


def apply_stop(out: list[str], stops: tuple[str, ...], include: bool = False) -> list[str] | None:
    """The tokens up to the one that completes the first stop string, text cut before it.

    As in vLLM: the text ends exactly where the stop string starts (inside a token
    if need be) and the usage counts every token generated until the stop string
    was complete. None when no stop string occurs.
    """
    if not stops:
        return None
    text = "".join(out)
    found = [(at, stop) for stop in stops if (at := text.find(stop)) >= 0]
    if not found:
        return None
    at, stop = min(found)
    end = at + len(stop)
    if include:  # include_stop_str_in_output: the text ends after the stop string
        at = end
    result: list[str] = []
    pos = 0
    for piece in out:
        start, pos = pos, pos + len(piece)
        result.append(piece if pos <= at else piece[: max(0, at - start)])
        if pos >= end:
            break
    return result
