"""How many tokens a request may have, and which of them it gets.

Pure functions of the request and the endpoint's voice: the natural answer
(see textgen), stretched by ``ignore_eos``/``min_tokens``, cut by ``stop``
strings and ``max_tokens``, with vLLM's finish reason.
"""

from __future__ import annotations

from servekit.sim.openai import ApiError, GenRequest
from servekit.sim.textgen import Voice, answer_pieces, continuation


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
    want = limit if req.ignore_eos else min(max(req.min_tokens, len(out)), limit)
    if len(out) < want:
        out.extend(continuation(digest, req.sampling, voice, want - len(out)))
    cut = stop_cut(out, req.stop)
    if cut is not None and cut < limit:
        return out[:cut], "stop"
    if len(out) >= limit:
        return out[:limit], "length"
    return out, "stop"


def stop_cut(out: list[str], stops: tuple[str, ...]) -> int | None:
    """Index of the piece where the first stop string starts (the output ends before it)."""
    if not stops:
        return None
    text = "".join(out)
    found = [i for i in (text.find(s) for s in stops) if i >= 0]
    if not found:
        return None
    at, end = min(found), 0
    for index, piece in enumerate(out):
        end += len(piece)
        if end > at:
            return index
    return None
