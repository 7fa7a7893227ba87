"""What a migration may carry over, and how: the rules, as one table.

A stream whose decoder failed mid-answer is carried on one of two ways
(:mod:`servekit.proxy.migration` does it):

- **prefix**: the prompt's token ids and the answer's so far go to
  ``/v1/completions`` as a token-id prompt, with the fields of
  :data:`CARRIED` and the client's limits less what was generated. Cheap (one
  prefill of what the client has), and the same tokens only where every field
  that shaped the answer acts on the new leg as it did on the first: fields
  that read the tokens generated so far (structured output's grammar state,
  frequency and presence penalties, multi-token bad words), that format what
  /v1/completions formats otherwise (chat logprobs) or that only chat's
  parsers act on (reasoning, tool calls) do not.
- **replay**: the client's own request again, same route, same body, on a new
  prefill/decode pair; the proxy drops what the client already has, checking
  it token by token and character by character, and sends the rest. The same
  answer wherever the answer is a function of the request: greedy sampling,
  or a ``seed`` (the engine's per-request generator starts again from it). A
  replay that parts from what was sent ends the stream with an error event.

Nothing generated yet is always a replay (any sample is the answer then).
Where neither way gives the answer the client would have had (a sampled,
unseeded stream that needs a replay), the stream is not carried on: an error
event names the field. Nothing is carried on after the first leg sent a
``finish_reason``: the answer is whole, the proxy ends the stream itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

COMPLETIONS = "/v1/completions"
CHAT = "/v1/chat/completions"
ROUTES = (COMPLETIONS, CHAT)
GREEDY_BELOW = 1e-5  # vLLM's _SAMPLING_EPS: a lower temperature samples greedily

# Carried to a prefix continuation as they are: what changes the tokens sampled
# or where they stop, and acts on a token-id prompt as on the first leg (the
# repetition penalty reads prompt and output tokens alike).
CARRIED = (
    "model", "temperature", "top_p", "top_k", "min_p", "seed", "repetition_penalty",
    "stop", "stop_token_ids", "ignore_eos", "skip_special_tokens",
    "spaces_between_special_tokens", "include_stop_str_in_output", "logit_bias",
    "allowed_token_ids", "user", "priority", "stream_options", "cache_salt",
)  # fmt: skip
# Set by the proxy on a prefix continuation: the limits less what was generated,
# the prompt as token ids, streaming with ids.
ADJUSTED = (
    "max_tokens", "max_completion_tokens", "min_tokens", "prompt", "stream",
    "return_token_ids", "kv_transfer_params", "n",
)  # fmt: skip
# Shaped the prompt only, which its token ids now are.
PROMPT_ONLY = (
    "messages", "chat_template", "chat_template_kwargs", "add_generation_prompt",
    "continue_final_message", "add_special_tokens", "documents", "mm_processor_kwargs",
    "media_io_kwargs", "truncate_prompt_tokens", "request_id", "parallel_tool_calls",
    "include_reasoning", "return_tokens_as_token_ids", "tool_choice",
)  # fmt: skip


def _unset(value: Any, body: dict[str, Any]) -> bool:
    return value is None


def _off(value: Any, body: dict[str, Any]) -> bool:
    return value is None or value is False or value in (0, [])


def _plain_text(value: Any, body: dict[str, Any]) -> bool:
    return value is None or (isinstance(value, dict) and value.get("type") == "text")


def _no_tools(value: Any, body: dict[str, Any]) -> bool:
    return not value or body.get("tool_choice") == "none"


def _without_logprobs(value: Any, body: dict[str, Any]) -> bool:
    return value is None or not body.get("logprobs")


# Fields that shape the answer in ways a prefix continuation cannot reproduce,
# with the values that shape nothing (a body holding another value is replayed).
JUDGED: dict[str, Callable[[Any, dict[str, Any]], bool]] = {
    "response_format": _plain_text,  # json_schema/json_object: the grammar restarts
    "structured_outputs": _unset,
    "guided_json": _unset,
    "guided_regex": _unset,
    "guided_choice": _unset,
    "guided_grammar": _unset,
    "structural_tag": _unset,
    "guided_decoding_backend": _unset,
    "guided_whitespace_pattern": _unset,
    "logprobs": _off,  # chat's format differs from /v1/completions'; entries to skip
    "top_logprobs": _without_logprobs,
    "prompt_logprobs": _unset,
    "echo": _off,
    "frequency_penalty": _off,  # counts the output tokens, which become prompt tokens
    "presence_penalty": _off,
    "bad_words": _off,  # a multi-token bad word is matched against the output only
    "tools": _no_tools,  # chat's tool parser turns the text into tool_calls
    "use_beam_search": _off,
    "best_of": lambda v, b: v is None or v == 1,
}


def prefix_blockers(route: str, body: dict[str, Any]) -> list[str]:
    """The client's fields a prefix continuation cannot carry (unknown fields too)."""
    known = {*CARRIED, *ADJUSTED, *PROMPT_ONLY}
    out = []
    for key, value in body.items():
        if key in known:
            continue
        harmless = JUDGED.get(key)
        if harmless is None or not harmless(value, body):
            out.append(key if key.isprintable() and len(key) <= 64 else "an unknown field")
    if route == COMPLETIONS and body.get("logprobs") is not None and "logprobs" not in out:
        out.append("logprobs")  # completions: logprobs 0 still asks for one per token
    return out


def reproducible(body: dict[str, Any]) -> bool:
    """A second run of the request gives the same tokens: greedy, or seeded."""
    temperature = body.get("temperature")
    greedy = isinstance(temperature, int | float) and temperature < GREEDY_BELOW
    seed = body.get("seed")
    return greedy or (isinstance(seed, int) and not isinstance(seed, bool))


def stop_lag(body: dict[str, Any]) -> int:
    """Characters vLLM holds back from a stream while a stop string may be starting
    (``max(len(stop)) - 1``, unless the stop string is included in the output)."""
    stop = body.get("stop")
    stops = [stop] if isinstance(stop, str) else stop if isinstance(stop, list) else []
    lengths = [len(s) for s in stops if isinstance(s, str) and s]
    if not lengths or body.get("include_stop_str_in_output") is True:
        return 0
    return max(lengths) - 1


def token_limit(
    route: str, body: dict[str, Any], prompt_len: int, model_len: int | None
) -> int | None:
    """The answer's limit in tokens as vLLM sets it, or None when the proxy cannot know it.

    Completions: ``max_tokens``, 16 when absent or null. Chat: ``max_completion_tokens``
    or ``max_tokens``, else what fits in the model's length after the prompt (vLLM's
    ``get_max_tokens``; a generation config's ``max_new_tokens`` would lower it, which
    the proxy cannot see).
    """
    if route == COMPLETIONS:
        value = body.get("max_tokens")
        return 16 if value is None else value if isinstance(value, int) else None
    value = body.get("max_completion_tokens")
    if value is None:
        value = body.get("max_tokens")
    if value is None:
        return None if model_len is None else model_len - prompt_len
    return value if isinstance(value, int) else None
