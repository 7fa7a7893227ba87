"""Response bodies and SSE chunks in the shapes vLLM's OpenAI server sends."""

from __future__ import annotations

import time
from typing import Any

from servekit.sim.openai import ApiError, dumps
from servekit.sim.protocols.base import Admitted
from servekit.textcontract import piece_ids


def usage(adm: Admitted) -> dict[str, Any]:
    seq = adm.seq
    prompt = seq.prompt_len + adm.usage_skew
    return {
        "prompt_tokens": prompt,
        "total_tokens": prompt + seq.emitted,
        "completion_tokens": seq.emitted,
        "prompt_tokens_details": {"cached_tokens": seq.cached_tokens},
    }


def final_body(adm: Admitted, model: str) -> bytes:
    """The non-streaming answer of a completion, chat or responses request."""
    kind = adm.request.kind
    if kind == "responses":
        return _responses_body(adm, model)
    seq = adm.seq
    text = seq.text
    if kind == "chat":
        choice: dict[str, Any] = {
            "index": 0,
            "message": {"role": "assistant", "content": text, "tool_calls": []},
            "logprobs": None,
            "finish_reason": seq.finish_reason,
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
    """SSE events of one streamed answer."""

    def __init__(
        self, adm: Admitted, model: str, *, mismatch: bool = False, done: bool = True
    ) -> None:
        self.adm = adm
        self._mismatch = mismatch
        self._done = done
        chat = adm.request.kind == "chat"
        self._chat = chat
        self._ids = adm.request.return_token_ids
        self._prompt_ids_sent = False
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

    def text(self, text: str, finish: str | None, ids: list[int] | None = None) -> bytes:
        """One step's text; with ``return_token_ids``, its token ids as vLLM sends them
        (``token_ids`` in the choice; ``prompt_token_ids`` once, in the first chunk:
        in the choice for completions, at the top for chat)."""
        if self._mismatch and finish is not None:
            text = text[:-1] + "~"
        if self._chat:
            choice: dict[str, Any] = {"index": 0, "delta": {"content": text}, "logprobs": None}
        else:
            choice = {"index": 0, "text": text, "logprobs": None}
        choice["finish_reason"] = finish
        choice["stop_reason"] = None
        if not self._ids:
            return self._event([choice])
        first = not self._prompt_ids_sent
        self._prompt_ids_sent = True
        prompt = self.adm.request.prompt_ids
        if first and not self._chat:
            choice["prompt_token_ids"] = prompt
        choice["token_ids"] = ids or []
        extra = {"prompt_token_ids": prompt} if first and self._chat else {}
        return self._event([choice], extra)

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
