"""OpenAI-compatible request parsing and response shapes, as vLLM answers them.

Parsing is hand-rolled on plain dicts rather than pydantic because it sits on
the hot path of every request (the simulator must not be what limits a proxy
benchmark); every rejection still names the field, as vLLM's 400s do.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from servekit.sim.textgen import Sampling
from servekit.textcontract import encode, render_chat
from servekit.visioncontract import image_token, png_colour

Kind = Literal["completion", "chat", "responses"]
IMAGE_PARTS = frozenset({"image_url", "input_image"})


class ApiError(Exception):
    """An error answer: HTTP status and an OpenAI-style body."""

    def __init__(self, status: int, message: str, err_type: str = "BadRequestError") -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.err_type = err_type

    def body(self) -> bytes:
        error = {"message": self.message, "type": self.err_type, "param": None, "code": self.status}
        return dumps({"error": error})


@dataclass(frozen=True, slots=True)
class GenRequest:
    """A parsed generation request."""

    kind: Kind
    model: str | None
    prompt_text: str | None
    prompt_ids: list[int]
    question_text: str | None
    max_tokens: int | None
    min_tokens: int
    ignore_eos: bool
    stream: bool
    include_usage: bool
    sampling: Sampling
    kv_transfer_params: dict[str, Any] | None
    stop: tuple[str, ...] = ()
    images: int = 0
    return_token_ids: bool = False
    include_stop: bool = False  # include_stop_str_in_output
    logprobs: int | None = None  # top logprobs per token (chat: top_logprobs when logprobs)
    structured: bool = False  # a JSON schema/object, grammar, regex or choice constrains it
    thinking: bool = False  # the chat template asks the model to think first
    tool: str | None = None  # the function the model calls (chat, tools offered)


def dumps(doc: Any) -> bytes:
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()


def load_json(body: bytes) -> dict[str, Any]:
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(400, f"request body is not valid JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise ApiError(400, "request body must be a JSON object")
    return doc


def parse_generation(kind: Kind, doc: dict[str, Any]) -> GenRequest:
    """Turn a request body into a GenRequest; ApiError(400) naming the bad field."""
    images = 0
    if kind == "completion":
        text, ids, question = _completion_prompt(doc.get("prompt"))
        max_tokens = _opt_int(doc, "max_tokens", 1)
        if max_tokens is None:
            max_tokens = 16  # vLLM's default, a null too (normalize_null_max_tokens)
    elif kind == "chat":
        text, question, images = _chat_prompt(doc.get("messages"))
        ids = encode(text)
        max_tokens = _opt_int(doc, "max_completion_tokens", 1)
        if max_tokens is None:
            max_tokens = _opt_int(doc, "max_tokens", 1)
    else:
        text, question, images = _responses_prompt(doc)
        ids = encode(text)
        max_tokens = _opt_int(doc, "max_output_tokens", 1)
    if doc.get("n", 1) != 1:
        raise ApiError(400, "n: the simulator generates one choice per request; use n=1")
    options = doc.get("stream_options") or {}
    if not isinstance(options, dict):
        raise ApiError(400, "stream_options: expected an object")
    kv = doc.get("kv_transfer_params")
    if kv is not None and not isinstance(kv, dict):
        raise ApiError(400, "kv_transfer_params: expected an object")
    return GenRequest(
        kind=kind,
        model=_opt_str(doc, "model"),
        prompt_text=text,
        prompt_ids=ids,
        question_text=question,
        max_tokens=max_tokens,
        min_tokens=_opt_int(doc, "min_tokens", 0) or 0,
        ignore_eos=bool(doc.get("ignore_eos", False)),
        stream=bool(doc.get("stream", False)),
        include_usage=bool(options.get("include_usage", False)),
        sampling=Sampling(
            temperature=_opt_float(doc, "temperature", 1.0),
            top_p=_opt_float(doc, "top_p", 1.0),
            seed=_opt_int(doc, "seed", None),
            penalty=_opt_float(doc, "frequency_penalty", 0.0)
            + _opt_float(doc, "presence_penalty", 0.0),
            repetition=_opt_float(doc, "repetition_penalty", 1.0),
        ),
        kv_transfer_params=kv or None,
        stop=_stop(doc.get("stop")),
        images=images,
        return_token_ids=doc.get("return_token_ids") is True,
        include_stop=doc.get("include_stop_str_in_output") is True,
        logprobs=_logprobs(kind, doc),
        structured=_structured(doc),
        thinking=kind == "chat" and _thinking(doc.get("chat_template_kwargs")),
        tool=_tool(doc) if kind == "chat" else None,
    )


STRUCTURED_FIELDS = (
    "structured_outputs", "guided_json", "guided_regex", "guided_choice", "guided_grammar",
    "structural_tag",
)  # fmt: skip


def _structured(doc: dict[str, Any]) -> bool:
    """A constraint on the answer's form (vLLM's structured outputs)."""
    fmt = doc.get("response_format")
    if fmt is not None and not isinstance(fmt, dict):
        raise ApiError(400, "response_format: expected an object")
    if isinstance(fmt, dict) and fmt.get("type") not in (None, "text"):
        return True
    return any(doc.get(name) is not None for name in STRUCTURED_FIELDS)


def _logprobs(kind: Kind, doc: dict[str, Any]) -> int | None:
    """How many top logprobs each token carries (None: no logprobs)."""
    if kind == "chat":
        if doc.get("logprobs") is not True:
            return None
        return _opt_int(doc, "top_logprobs", 0) or 0
    return _opt_int(doc, "logprobs", 0)


def _thinking(kwargs: Any) -> bool:
    """DeepSeek's and Qwen's template switches: the model thinks before answering."""
    if kwargs is None:
        return False
    if not isinstance(kwargs, dict):
        raise ApiError(400, "chat_template_kwargs: expected an object")
    return kwargs.get("thinking") is True or kwargs.get("enable_thinking") is True


def _tool(doc: dict[str, Any]) -> str | None:
    """The function the model calls: the named one, else the first offered (tool_choice
    none: no call)."""
    tools = doc.get("tools")
    if not tools:
        return None
    if not isinstance(tools, list):
        raise ApiError(400, "tools: expected a list of {type, function}")
    choice = doc.get("tool_choice", "auto")
    if choice == "none":
        return None
    if isinstance(choice, dict):
        named = (choice.get("function") or {}).get("name")
        if isinstance(named, str) and named:
            return named
    first = tools[0] if isinstance(tools[0], dict) else {}
    name = (first.get("function") or {}).get("name")
    if not isinstance(name, str) or not name:
        raise ApiError(400, "tools: each tool needs function.name")
    return name


def _stop(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ApiError(400, "stop: expected a non-empty string or a list of them")
    return tuple(value)


def parse_tokenize(doc: dict[str, Any]) -> list[int]:
    """Token ids of a /tokenize body: a prompt or chat messages."""
    if "messages" in doc:
        text, _, _ = _chat_prompt(doc["messages"], bool(doc.get("add_generation_prompt", True)))
        return encode(text)
    _, ids, _ = _completion_prompt(doc.get("prompt"))
    return ids


def _completion_prompt(prompt: Any) -> tuple[str | None, list[int], str | None]:
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]
    if isinstance(prompt, str):
        return prompt, encode(prompt), None
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        return None, list(prompt), None
    raise ApiError(400, "prompt: expected one string or one list of token ids")


def _content_text(content: Any) -> tuple[str, int]:
    """A message's text (images become their tokens) and how many images it holds."""
    if content is None:
        return "", 0
    if isinstance(content, str):
        return content, 0
    if not isinstance(content, list):
        raise ApiError(400, "messages: content must be a string or a list of parts")
    parts, images = [], 0
    for part in content:
        if not isinstance(part, dict):
            raise ApiError(400, "messages: content parts must be objects")
        text = part.get("text")
        if isinstance(text, str):
            parts.append(text)
        elif part.get("type") in IMAGE_PARTS:
            images += 1
            parts.append(image_token(png_colour(_image_url(part.get("image_url")))))
        else:
            parts.append(f"<{part.get('type', 'part')}>")
    return "\n".join(parts), images


def _image_url(value: Any) -> str:
    """``image_url`` as chat sends it (``{"url": ...}``) or as Responses does (a string)."""
    url = value.get("url") if isinstance(value, dict) else value
    if not isinstance(url, str):
        raise ApiError(400, "messages: an image part needs image_url with a url")
    return url


def _chat_prompt(messages: Any, add_generation_prompt: bool = True) -> tuple[str, str | None, int]:
    """The rendered prompt, the last user message and the number of images."""
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "messages: expected a non-empty list of {role, content}")
    turns: list[tuple[str, str]] = []
    images = 0
    for m in messages:
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise ApiError(400, "messages: each message needs a string role")
        text, seen = _content_text(m.get("content"))
        turns.append((m["role"], text))
        images += seen
    users = [c for r, c in turns if r == "user"]
    return render_chat(turns, add_generation_prompt), (users[-1] if users else None), images


def _responses_prompt(doc: dict[str, Any]) -> tuple[str, str | None, int]:
    if doc.get("stream"):
        raise ApiError(400, "stream: the simulator's /v1/responses answers non-streaming only")
    given = doc.get("input")
    messages: list[Any] = []
    if isinstance(doc.get("instructions"), str):
        messages.append({"role": "system", "content": doc["instructions"]})
    if isinstance(given, str):
        messages.append({"role": "user", "content": given})
    elif isinstance(given, list):
        messages.extend(given)
    else:
        raise ApiError(400, "input: expected a string or a list of messages")
    return _chat_prompt(messages)


def _opt_int(doc: dict[str, Any], key: str, minimum: int | None) -> int | None:
    value = doc.get(key)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise ApiError(400, f"{key}: expected an integer")
    if minimum is not None and value < minimum:
        raise ApiError(400, f"{key}: must be at least {minimum}")
    return value


def _opt_float(doc: dict[str, Any], key: str, default: float) -> float:
    value = doc.get(key)
    if value is None:
        return default
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise ApiError(400, f"{key}: expected a number")
    return float(value)


def _opt_str(doc: dict[str, Any], key: str) -> str | None:
    value = doc.get(key)
    if value is not None and not isinstance(value, str):
        raise ApiError(400, f"{key}: expected a string")
    return value
