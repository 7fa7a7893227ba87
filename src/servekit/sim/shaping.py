"""What shapes a simulated answer besides its words: thinking, tool calls, JSON, logprobs.

The model's side (:func:`shape`): a request whose chat template asks it to think
(``chat_template_kwargs.thinking``) first writes some reasoning and the
``</think>`` token; offered tools (and no ``tool_choice: none``), it writes one
call in DeepSeek's markers (begin, the function's name, separator, JSON
arguments, end); constrained to a JSON schema or object (structured outputs),
it writes its answer as one JSON object. All pure functions of the prompt, as
the rest of the answer is.

The server's side (:class:`ChatChannels`): an endpoint started with a
reasoning parser (``reasoning_parser``) streams the thinking as
``delta.reasoning`` and swallows ``</think>``; one with a tool-call parser
(``tool_call_parser``) streams the call as ``delta.tool_calls`` (a first delta
with the call's id, type and name, then argument pieces) and swallows the
markers, and ends with ``finish_reason: tool_calls``. Without a parser, and on
/v1/completions, every token is text. That split is what a migration must
keep: a continuation that went through /v1/completions would hand the client
the reasoning again as content, markers and all.

Logprobs (:func:`logprob_entries`) are a function of the token and its place in
the answer, in chat's shape (``content``: token, logprob, bytes, top_logprobs)
or /v1/completions' (tokens, token_logprobs, top_logprobs, text_offset).
"""

from __future__ import annotations

import json
import zlib
from typing import Any

from servekit.textcontract import pieces

THINK_END = "</think>"
TOOL_BEGIN = "<｜tool▁call▁begin｜>"
TOOL_SEP = "<｜tool▁sep｜>"
TOOL_END = "<｜tool▁call▁end｜>"
_THOUGHT = (" Let", " me", " think", " about", " this", " request", " step", " by", " step", ".")
_ALTERNATIVES = (" the", " a", " and", " to", " of", ".", ",", " in")


def shape(
    natural: list[str], *, thinking: bool, tool: str | None, structured: bool, seed: int
) -> list[str]:
    """The answer's tokens around its natural words (``natural``)."""
    text = "".join(natural).strip()
    if tool is not None:
        args = json.dumps({"query": " ".join(text.split()[:4])}, ensure_ascii=False)
        body = [TOOL_BEGIN, *pieces(tool), TOOL_SEP, *pieces(args), TOOL_END]
    elif structured:
        body = pieces(json.dumps({"answer": text, "words": len(text.split())}, ensure_ascii=False))
    else:
        body = natural
    if not thinking:
        return body
    thought = [_THOUGHT[(seed + i) % len(_THOUGHT)] for i in range(6 + seed % 9)]
    return [*thought, THINK_END, *body]


class ChatChannels:
    """A chat stream's parsers: each step's tokens as one delta (content, reasoning,
    tool_calls), as vLLM's reasoning and tool-call parsers split them."""

    def __init__(self, *, reasoning: bool, tools: bool, call_id: str) -> None:
        self.state = "reasoning" if reasoning else "content"
        self.tools = tools
        self.call_id = call_id
        self.index = -1
        self.name: list[str] = []
        self.called = False  # a tool call went out (finish_reason tool_calls)

    def delta(self, step: list[str]) -> dict[str, Any]:
        content: list[str] = []
        reasoning: list[str] = []
        calls: list[dict[str, Any]] = []
        for piece in step:
            if self.state == "reasoning":
                if piece == THINK_END:
                    self.state = "content"
                else:
                    reasoning.append(piece)
            elif self.state in ("name", "args"):
                self._call(piece, calls)
            elif self.tools and piece == TOOL_BEGIN:
                self.state, self.name, self.index, self.called = "name", [], self.index + 1, True
            else:
                content.append(piece)
        out: dict[str, Any] = {}
        if content:
            out["content"] = "".join(content)
        if reasoning:
            out["reasoning"] = "".join(reasoning)
        if calls:
            out["tool_calls"] = calls
        return out

    def _call(self, piece: str, calls: list[dict[str, Any]]) -> None:
        """One token of a tool call: its name until the separator, then its arguments."""
        if self.state == "name":
            if piece != TOOL_SEP:
                self.name.append(piece)
                return
            self.state = "args"
            fn = {"name": "".join(self.name), "arguments": ""}
            calls.append(
                {"id": self.call_id, "type": "function", "index": self.index, "function": fn}
            )
        elif piece == TOOL_END:
            self.state = "content"
        elif calls:
            calls[-1]["function"]["arguments"] += piece
        else:
            calls.append({"index": self.index, "function": {"arguments": piece}})


def _logprob(token: str, position: int, rank: int) -> float:
    return -round((zlib.crc32(f"{position}:{rank}:{token}".encode()) % 4000) / 1000 + rank, 4)


def logprob_entries(
    step: list[str], start: int, offset: int, top: int, chat: bool
) -> dict[str, Any]:
    """Logprobs of one step's tokens (``start``: their place in the answer; ``offset``:
    the answer's text length before them; ``top``: alternatives per token)."""
    if chat:
        content = []
        for i, token in enumerate(step):
            at = start + i
            alts = [token, *(a for a in _ALTERNATIVES if a != token)][:top]
            content.append({
                "token": token, "logprob": _logprob(token, at, 0),
                "bytes": list(token.encode()),
                "top_logprobs": [
                    {"token": a, "logprob": _logprob(a, at, r), "bytes": list(a.encode())}
                    for r, a in enumerate(alts)
                ],
            })  # fmt: skip
        return {"content": content}
    out: dict[str, Any] = {
        "text_offset": [],
        "token_logprobs": [],
        "tokens": [],
        "top_logprobs": [],
    }
    for i, token in enumerate(step):
        at = start + i
        out["text_offset"].append(offset)
        out["token_logprobs"].append(_logprob(token, at, 0))
        out["tokens"].append(token)
        alts = [token, *(a for a in _ALTERNATIVES if a != token)][: max(1, top)]
        out["top_logprobs"].append({a: _logprob(a, at, r) for r, a in enumerate(alts)})
        offset += len(token)
    return out
