"""Response bodies and SSE chunks in the shapes vLLM's OpenAI server sends."""

from __future__ import annotations

import time
from typing import Any

from servekit.sim.openai import ApiError, dumps
from servekit.sim.protocols.base import Admitted
from servekit.sim.shaping import ChatChannels, logprob_entries
from servekit.textcontract import piece_ids


def channels(adm: Admitted, reasoning: bool, tools: bool) -> ChatChannels | None:
    """The chat parsers an answer goes through (None: none, or not a chat answer)."""
    req = adm.request
    reasoning, tools = reasoning and req.thinking, tools and req.tool is not None
    if req.kind != "chat" or not (reasoning or tools):
        return None
    return ChatChannels(reasoning=reasoning, tools=tools, call_id=f"chatcmpl-tool-{adm.request_id}")


def usage(adm: Admitted) -> dict[str, Any]:
    seq = adm.seq
    prompt = seq.prompt_len + adm.usage_skew
    return {
        "prompt_tokens": prompt,
        "total_tokens": prompt + seq.emitted,
        "completion_tokens": seq.emitted,
        "prompt_tokens_details": {"cached_tokens": seq.cached_tokens},
    }


def final_body(adm: Admitted, model: str, parsers: ChatChannels | None = None) -> bytes:
    """The non-streaming answer of a completion, chat or responses request."""
    kind = adm.request.kind
    if kind == "responses":
        return _responses_body(adm, model)
    seq = adm.seq
    text = seq.text
    if kind == "chat":
        message: dict[str, Any] = {"role": "assistant", "content": text, "tool_calls": []}
        finish = seq.finish_reason
        if parsers is not None:
            delta = parsers.delta(seq.output[: seq.emitted])
            message["content"] = delta.get("content", "")
            if "reasoning" in delta:
                message["reasoning"] = delta["reasoning"]
            message["tool_calls"] = delta.get("tool_calls", [])
            finish = "tool_calls" if parsers.called and finish == "stop" else finish
        choice: dict[str, Any] = {
            "index": 0,
            "message": message,
            "logprobs": None,
            "finish_reason": finish,
            "stop_reason": None,
        }
        obj, prefix = "chat.completion", "chatcmpl-"
    else:
        choice = {
            "index": 0,
            "text": text,
            "logprobs": None,
            "finish_reason": seq.finish_reason,
            "stop_reason": None,
            "prompt_logprobs": None,
        }
        obj, prefix = "text_completion", "cmpl-"
        if adm.request.return_token_ids:
            choice["prompt_token_ids"] = adm.request.prompt_ids
    if adm.request.return_token_ids:
        choice["token_ids"] = piece_ids(seq.output[: seq.emitted])
    doc: dict[str, Any] = {
        "id": prefix + adm.request_id,
        "object": obj,
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
        "usage": usage(adm),
    }
    if kind == "chat" and adm.request.return_token_ids:
        doc["prompt_token_ids"] = adm.request.prompt_ids
    doc["kv_transfer_params"] = adm.kv_params
    return dumps(doc)


def _responses_body(adm: Admitted, model: str) -> bytes:
    u = usage(adm)
    return dumps(
        {
            "id": "resp_" + adm.request_id,
            "object": "response",
            "created_at": int(time.time()),
            "model": model,
            "status": "completed" if adm.seq.finish_reason == "stop" else "incomplete",
            "output": [
                {
                    "type": "message",
                    "id": "msg_" + adm.request_id,
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": adm.seq.text, "annotations": []}],
                }
            ],
            "usage": {
                "input_tokens": u["prompt_tokens"],
                "output_tokens": u["completion_tokens"],
                "total_tokens": u["total_tokens"],
                "input_tokens_details": {
                    "cached_tokens": u["prompt_tokens_details"]["cached_tokens"]
                },
            },
            "kv_transfer_params": adm.kv_params,
        }
    )


class ChunkWriter:
    """SSE events of one streamed answer, as vLLM's OpenAI server writes them."""

    def __init__(
        self, adm: Admitted, model: str, *, mismatch: bool = False, done: bool = True,
        parsers: ChatChannels | None = None,
    ) -> None:  # fmt: skip
        self.adm = adm
        self._mismatch = mismatch
        self._done = done
        req = adm.request
        chat = req.kind == "chat"
        self._chat = chat
        self._ids = req.return_token_ids
        self._prompt_ids_sent = False
        self._parsers = parsers
        # vLLM holds back what may be the start of a stop string (its detokenizer's
        # stop buffer); not modelled under a parser
        stops = [len(s) for s in req.stop]
        self._lag = max(stops) - 1 if stops and not req.include_stop and parsers is None else 0
        self._held = ""
        self._made = 0  # tokens written so far
        self._offset = 0  # their text's length (completions' text_offset)
        self._head = {
            "id": ("chatcmpl-" if chat else "cmpl-") + adm.request_id,
            "object": "chat.completion.chunk" if chat else "text_completion",
            "created": int(time.time()),
            "model": model,
        }

    def opening(self) -> bytes:
        """Chat streams open with the assistant role (vLLM does the same)."""
        if not self._chat:
            return b""
        choice = {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None}
        return self._event([{**choice, "finish_reason": None}])

    def step(self, step: list[str], finish: str | None) -> bytes:
        """One engine step's tokens (``finish``: the answer's finish reason when it ends
        here); with ``return_token_ids``, their ids as vLLM sends them (``token_ids`` in
        the choice; ``prompt_token_ids`` once, in the first event: in the choice for
        completions, at the top for chat)."""
        req = self.adm.request
        text = "".join(step)
        logprobs = None
        if req.logprobs is not None:
            logprobs = logprob_entries(step, self._made, self._offset, req.logprobs, self._chat)
        self._made += len(step)
        self._offset += len(text)
        if self._lag:
            text, self._held = self._release(self._held + text, finish is not None)
        if self._mismatch and finish is not None:
            text = text[:-1] + "~"
        if self._parsers is not None:
            delta = self._parsers.delta(step)
            if finish == "stop" and self._parsers.called:
                finish = "tool_calls"
            if not delta and finish is None and logprobs is None and not self._ids:
                return b""  # vLLM sends nothing for tokens a parser swallowed
            choice: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": logprobs}
        elif self._chat:
            choice = {"index": 0, "delta": {"content": text}, "logprobs": logprobs}
        else:
            choice = {"index": 0, "text": text, "logprobs": logprobs}
        choice["finish_reason"] = finish
        if finish is not None or not self._chat:  # vLLM's chat chunks: at the end only
            choice["stop_reason"] = None
        if not self._ids:
            return self._event([choice])
        first = not self._prompt_ids_sent
        self._prompt_ids_sent = True
        prompt = req.prompt_ids
        if first and not self._chat:
            choice["prompt_token_ids"] = prompt
        choice["token_ids"] = piece_ids(step)
        extra = {"prompt_token_ids": prompt} if first and self._chat else {}
        return self._event([choice], extra)

    def _release(self, text: str, finished: bool) -> tuple[str, str]:
        """What goes out of ``text`` now, and what is held back for a stop string."""
        if finished or len(text) <= self._lag:
            return (text, "") if finished else ("", text)
        return text[: -self._lag], text[-self._lag :]

    def closing(self) -> bytes:
        out = b""
        if self.adm.request.include_usage:
            out += b"data: " + dumps({**self._head, "choices": [], "usage": usage(self.adm)})
            out += b"\n\n"
        return out + b"data: [DONE]\n\n" if self._done else out

    def error(self, status: int, message: str, err_type: str) -> bytes:
        return b"data: " + ApiError(status, message, err_type).body() + b"\n\ndata: [DONE]\n\n"

    def _event(self, choices: list[dict[str, Any]], extra: dict[str, Any] | None = None) -> bytes:
        return b"data: " + dumps({**self._head, "choices": choices, **(extra or {})}) + b"\n\n"
