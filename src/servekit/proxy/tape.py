"""The tape of a stream that may migrate: what the client has of the answer, read as relayed.

A stream whose decoder fails mid-answer is carried on elsewhere
(:mod:`servekit.proxy.migration` starts the new leg); this is what it reads.
The decode leg asks vLLM for token ids (``return_token_ids: true``, vLLM >= 0.10.2):
``prompt_token_ids`` once, in the first event, and ``token_ids`` per event.
:class:`Tape` reads the stream event by event as it is relayed
(:mod:`servekit.proxy.sse`) and keeps what the client has of the answer
(:class:`Sent`): the token ids, the text (completions) or the content, the
reasoning and each tool call's name and arguments (chat), the logprob entries,
whether a ``finish_reason`` went out. It removes the ids from what the client
gets unless the client asked for them, and notices a stream that breaks, ends
without ``[DONE]`` or ends with an error event.

Then :meth:`Tape.carry` says how the stream goes on (the rules are
:mod:`servekit.proxy.carry`'s): ``prefix`` (the prompt's and the answer's ids as
a token-id prompt to ``/v1/completions``, the limits less what was generated),
``replay`` (the client's request again, what the client has dropped),
``finished`` (the answer was whole: the stream is ended, never continued) or
``refused`` (an error event names the field that cannot be carried). Each new
leg's events are merged into the answer: the part of a piece the client has
must match what it has (else the stream ends with an error event: never a
changed answer), the rest goes out in the first leg's shape, with its ``id``,
``created``, ``model`` and ``object``.

A prefix cut is made where the text is whole. vLLM holds back a token whose bytes
end inside a character (byte-level tokenizers: CJK, emoji, a random model's
output), and a token-id prompt that ends inside one makes its detokenizer start
the new leg's text with the whole prompt (vLLM 0.32, seen in CI). And with stop
strings vLLM holds back the last ``max(len(stop)) - 1`` characters of a stream
(a stop string may be starting there). So the answer keeps *settle points*: the
token count after an event that carried one token and some text (its text ends
on a character boundary there), with the answer's text length through that
token (what was sent plus what is held back). The new leg starts from the last
point whose text the client has, regenerates what follows, and the text and ids
the client has of it are dropped from its output. The new leg checks the stop
strings over all the text it regenerated, so a stop string that began before
the cut is found as it would have been.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, NamedTuple, TypeVar

from servekit.proxy.carry import (
    CARRIED,
    COMPLETIONS,
    prefix_blockers,
    reproducible,
    stop_lag,
    token_limit,
)
from servekit.proxy.sse import Event, Splitter, read_event

__all__ = ["Carry", "Continuation", "Sent", "Tape", "dumps"]

S = TypeVar("S", str, list[int])
REASONING_KEYS = ("reasoning", "reasoning_content")
FIRST, PREFIX, REPLAY = "first", "prefix", "replay"


def dumps(doc: Any) -> bytes:
    """Compact JSON as vLLM (pydantic) and the simulator write it."""
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()


class Carry(NamedTuple):
    """How a failed stream goes on: ``prefix``, ``replay``, ``finished`` or ``refused``."""

    how: str
    reason: str = ""  # why not prefix (replay), or why not at all (refused)


class Continuation(NamedTuple):
    """The request that carries a stream on."""

    route: str
    body: dict[str, Any]
    prompt: bytes | None  # prefix: the token ids' JSON text, spliced in as ``prompt``
    prompt_tokens: int


@dataclass
class Sent:
    """What the client has of the answer (its first choice), whichever legs it came from."""

    ids: list[int] = field(default_factory=list)
    text: str = ""  # completions' text, chat's content
    reasoning: str = ""
    tools: dict[int, list[str]] = field(default_factory=dict)  # index -> [name, arguments]
    logprobs: int = 0  # per-token logprob entries
    finish: str | None = None
    role: bool = False
    prompt_sent: bool = False  # prompt_token_ids went out (the client asked for ids)
    usage: bool = False
    settles: list[tuple[int, int]] = field(default_factory=lambda: [(0, 0)])

    @property
    def empty(self) -> bool:
        """Nothing of the answer went out (a role alone is not an answer)."""
        return not (self.ids or self.text or self.reasoning or self.tools or self.logprobs)


@dataclass
class Leg:
    """One decoder's stream: where it starts in the answer and how far it got."""

    how: str
    route: str
    base_ids: int = 0
    base_text: int = 0
    ids: int = 0
    text: int = 0
    reasoning: int = 0
    tools: dict[int, int] = field(default_factory=dict)  # index -> arguments length
    logprobs: int = 0


class Diverged(Exception):
    """A new leg's answer parted from what the client has."""


@dataclass
class Tape:
    """What a relayed stream has carried so far, read one SSE event at a time."""

    route: str
    body: dict[str, Any]
    max_event_bytes: int = 64 * 1024 * 1024  # the proxy passes --max-answer-bytes
    sent: Sent = field(default_factory=Sent)
    prompt: bytes | None = None  # the prompt's token ids (JSON text between the brackets)
    head: dict[str, Any] | None = None  # id, object, created, model of the first leg
    leg: Leg | None = None
    legs: int = 0
    done: bool = False  # [DONE] went out
    failed: bool = False  # the current leg broke off (error event, oversized event)
    oversized: bool = False  # one event outgrew max_event_bytes: the stream is given up
    diverged: str = ""  # why a new leg's answer was refused (empty: it was not)
    ids_hidden: bool = False  # the engine sent a choice without the ids asked for
    swallowed: bool = False  # a chat event carried ids and no delta: a parser held text
    channels: set[str] = field(default_factory=set)  # reasoning, tool_calls seen
    splitter: Splitter = field(default_factory=Splitter)

    def __post_init__(self) -> None:
        self.leg = Leg(FIRST, self.route)
        self.lag = stop_lag(self.body)

    @property
    def keep_ids(self) -> bool:
        return self.body.get("return_token_ids") is True

    @property
    def stopped(self) -> bool:
        return self.done or self.failed

    # -- reading a leg -----------------------------------------------------

    def split(self, chunk: bytes) -> list[bytes]:
        """The complete events ``chunk`` ends; an event that never ends fails the stream."""
        events = self.splitter.feed(chunk)
        if self.splitter.held > self.max_event_bytes:
            # held whole it would grow without end: the stream fails once the events
            # before it are relayed (the engine's fault) and is not carried on
            self.splitter.drop()
            self.oversized = True
        return events

    def chunk_done(self) -> None:
        """After the events of a chunk: an oversized event fails the stream now."""
        if self.oversized:
            self.failed = True

    def feed(self, chunk: bytes) -> bytes:
        """The complete events of ``chunk`` as the client gets them, each read here."""
        out = []
        for raw in self.split(chunk):
            if self.stopped:
                break
            out.append(self.take(raw, read_event(raw, strip=self.strips)))
        self.chunk_done()
        return b"".join(out)

    @property
    def strips(self) -> bool:
        """Events are read with their id lists cut out (the first leg's, for the client)."""
        return not self.keep_ids and self.leg is not None and self.leg.how == FIRST

    def take(self, raw: bytes, event: Event) -> bytes:
        """What the client gets of one event of the current leg."""
        if self.stopped:
            return b""
        first = self.leg is None or self.leg.how == FIRST
        if event.kind == "done":
            if not first and self.sent.finish is None:  # a new leg must end the answer
                self.failed = True
                self.diverged = "the new decoder's answer ended without a finish_reason"
                return b""
            self.done = True
            return raw
        if event.kind == "error":
            self.failed = True  # the engine failed mid-answer (vLLM: an error event)
            return b""
        if event.kind != "data" or event.doc is None:
            return raw if first else b""
        try:
            return self._first(raw, event) if first else self._merged(event)
        except Diverged as exc:
            self.failed, self.diverged = True, str(exc)
            return b""

    def _first(self, raw: bytes, event: Event) -> bytes:
        doc = event.doc
        assert doc is not None
        if self.head is None:
            self.head = {k: doc.get(k) for k in ("id", "object", "created", "model")}
        if event.prompt is not None and self.prompt is None:
            self.prompt = event.prompt
            self.sent.prompt_sent = self.keep_ids
        choice = _first_choice(doc)
        if choice is not None:
            self._read_first(choice, event.ids)
        if "usage" in doc and doc["usage"] is not None:
            self.sent.usage = True
        if self.keep_ids:
            return raw
        if choice is not None and self._idle(doc, choice):
            return b""  # vLLM sends it only for the ids the proxy asked for
        return event.stripped if event.stripped is not None else raw

    def _read_first(self, choice: dict[str, Any], ids: list[int] | None) -> None:
        sent = self.sent
        delta = choice.get("delta")
        if ids is not None:
            sent.ids.extend(ids)
        elif not (isinstance(delta, dict) and "role" in delta):  # the role chunk has none
            self.ids_hidden = True
        if self.route == COMPLETIONS:
            text = choice.get("text")
            piece = text if isinstance(text, str) else ""
        else:
            delta = choice.get("delta")
            delta = delta if isinstance(delta, dict) else {}
            piece = self._read_delta(delta, ids)
        sent.text += piece
        sent.logprobs += _logprob_count(choice.get("logprobs"))
        self._settle(ids, piece)
        if choice.get("finish_reason") is not None:
            sent.finish = str(choice["finish_reason"])

    def _settle(self, ids: list[int] | None, piece: str) -> None:
        """A point where the answer's text is whole, for a prefix cut (see the module doc)."""
        if ids is not None and len(ids) == 1 and piece:
            self.sent.settles.append((len(self.sent.ids), len(self.sent.text) + self.lag))

    def _read_delta(self, delta: dict[str, Any], ids: list[int] | None) -> str:
        """A first-leg chat delta into the answer; returns its content."""
        sent = self.sent
        if "role" in delta:
            sent.role = True
        for key in REASONING_KEYS:
            if isinstance(delta.get(key), str):
                self.channels.add("reasoning")
                sent.reasoning += delta[key]
        for call in delta.get("tool_calls") or ():
            self.channels.add("tool_calls")
            index, name, args = _tool_call(call)
            entry = sent.tools.setdefault(index, ["", ""])
            entry[0] = entry[0] or name
            entry[1] += args
        content = delta.get("content")
        shown = any(k in delta for k in ("content", "tool_calls", *REASONING_KEYS))
        if ids and not shown:
            self.swallowed = True  # a parser took these tokens' text (markers, hidden text)
        return content if isinstance(content, str) else ""

    def _idle(self, doc: dict[str, Any], choice: dict[str, Any]) -> bool:
        """A chat event that carries nothing but the ids the proxy asked for."""
        if self.route == COMPLETIONS or "usage" in doc:
            return False
        delta = choice.get("delta")
        return (
            delta == {} and choice.get("finish_reason") is None and choice.get("logprobs") is None
        )

    # -- new legs ------------------------------------------------------------

    def _merged(self, event: Event) -> bytes:
        """A new leg's event less what the client has, in the client's shape."""
        leg, doc = self.leg, event.doc
        assert leg is not None and doc is not None and self.head is not None
        choice = _first_choice(doc)
        out: dict[str, Any] | None = None
        if choice is not None:
            out = self._merge_choice(leg, choice, event.ids)
        usage = doc.get("usage")
        if usage is not None:
            self.sent.usage = True
            if leg.how == PREFIX and isinstance(usage, dict):
                usage = _prefix_usage(usage, leg.base_ids)
        if out is None and usage is None:
            return b""
        choices = [out] if out is not None else []
        if leg.how == PREFIX and self.route != COMPLETIONS:
            new: dict[str, Any] = {**self.head, "choices": choices}
            if "system_fingerprint" in doc:  # vLLM stamps the last event with it
                new["system_fingerprint"] = doc["system_fingerprint"]
        else:
            new = {**doc, **self.head, "choices": choices}
            if self.keep_ids and not self.sent.prompt_sent and event.prompt is not None:
                self._give_prompt(new, out)
        if usage is not None:
            new["usage"] = usage
        return b"data: " + dumps(new) + b"\n\n"

    def _give_prompt(self, doc: dict[str, Any], choice: dict[str, Any] | None) -> None:
        """The prompt's ids the client asked for and did not get from the first leg."""
        if self.prompt is None:
            return
        ids = json.loads(b"[" + self.prompt + b"]")
        if self.route == COMPLETIONS and choice is not None:
            choice["prompt_token_ids"] = ids
        elif self.route != COMPLETIONS:
            doc["prompt_token_ids"] = ids
        else:
            return
        self.sent.prompt_sent = True

    def _merge_choice(
        self, leg: Leg, choice: dict[str, Any], ids: list[int] | None
    ) -> dict[str, Any] | None:
        """The client's part of one choice of a new leg (None: nothing new in it)."""
        sent = self.sent
        new_ids: list[int] = []
        if ids is not None and not self.ids_hidden:
            new_ids = _merge_seq(sent.ids, leg.base_ids + leg.ids, ids, "token ids")
            sent.ids.extend(new_ids)
        if ids is not None:
            leg.ids += len(ids)
        out = {k: v for k, v in choice.items() if k not in ("prompt_token_ids", "token_ids")}
        if self.route == COMPLETIONS or leg.how == PREFIX:
            text = choice.get("text")
            part = self._merge_text(leg, text if isinstance(text, str) else "", ids)
            fresh = bool(part)
            if self.route == COMPLETIONS:
                out["text"] = part
            else:
                out = _chat_choice(choice, part)
        else:
            delta = choice.get("delta")
            new_delta = self._merge_delta(leg, delta if isinstance(delta, dict) else {}, ids)
            fresh = bool(new_delta)
            out["delta"] = new_delta
        if "logprobs" in choice:
            logprobs, count = _merge_logprobs(choice["logprobs"], sent.logprobs - leg.logprobs)
            leg.logprobs += _logprob_count(choice["logprobs"])
            sent.logprobs += count
            fresh = fresh or count > 0
            out["logprobs"] = logprobs
        if self.keep_ids:
            out["token_ids"] = new_ids
            fresh = fresh or bool(new_ids)
        if choice.get("finish_reason") is not None:
            self._check_whole(leg)
            sent.finish = str(choice["finish_reason"])
            fresh = True
        return out if fresh else None

    def _merge_text(self, leg: Leg, piece: str, ids: list[int] | None) -> str:
        """A new leg's text (or content) piece less what the client has."""
        sent = self.sent
        part = _merge_seq(sent.text, leg.base_text + leg.text, piece, "text")
        leg.text += len(piece)
        sent.text += part
        if part and ids is not None and len(ids) == 1 and not self.ids_hidden:
            sent.settles.append((len(sent.ids), len(sent.text) + self.lag))
        return part

    def _merge_delta(
        self, leg: Leg, delta: dict[str, Any], ids: list[int] | None
    ) -> dict[str, Any]:
        """A replayed chat delta less what the client has (role, content, reasoning, tools)."""
        sent = self.sent
        out: dict[str, Any] = {}
        if "role" in delta and not sent.role:
            out["role"] = delta["role"]
            sent.role = True
        for key in REASONING_KEYS:
            piece = delta.get(key)
            if isinstance(piece, str):
                part = _merge_seq(sent.reasoning, leg.reasoning, piece, "reasoning")
                leg.reasoning += len(piece)
                sent.reasoning += part
                if part:
                    out[key] = part
        content = delta.get("content")
        if isinstance(content, str):
            part = self._merge_text(leg, content, ids)
            if part:
                out["content"] = part
        calls = [self._merge_call(leg, call) for call in delta.get("tool_calls") or ()]
        if any(calls):
            out["tool_calls"] = [c for c in calls if c]
        return out

    def _merge_call(self, leg: Leg, call: Any) -> dict[str, Any] | None:
        """A replayed tool-call delta less what the client has of that call."""
        index, name, args = _tool_call(call)
        known = self.sent.tools.get(index)
        out: dict[str, Any] | None = None
        if known is None:  # a call the client has not seen: its id, type and name go out
            self.sent.tools[index] = known = [name, ""]
            out = (
                {k: v for k, v in call.items() if k != "function"} if isinstance(call, dict) else {}
            )
            out["index"] = index
            out["function"] = {"name": name} if name else {}
        elif name and known[0] and name != known[0]:
            raise Diverged(f"the new decoder calls {name!r} where the client has {known[0]!r}")
        elif name and not known[0]:
            known[0] = name
        at = leg.tools.get(index, 0)
        part = _merge_seq(known[1], at, args, f"tool call {index}'s arguments")
        leg.tools[index] = at + len(args)
        known[1] += part
        if part or out is not None:
            out = out if out is not None else {"index": index, "function": {}}
            out["function"]["arguments"] = part
        return out

    def _check_whole(self, leg: Leg) -> None:
        """A leg that finishes must have given at least what the client has."""
        sent = self.sent
        short = [
            name
            for name, have, got in (
                ("text", len(sent.text), leg.base_text + leg.text),
                ("reasoning", len(sent.reasoning), leg.reasoning),
            )
            if got < have
        ]
        if not self.ids_hidden and leg.ids and leg.base_ids + leg.ids < len(sent.ids):
            short.append("token ids")
        short += [
            f"tool call {i}" for i, t in sent.tools.items() if leg.tools.get(i, 0) < len(t[1])
        ]
        if short:
            raise Diverged(
                f"the new decoder's answer ended before the client's ({', '.join(short)})"
            )

    # -- carrying on -----------------------------------------------------------

    def carry(self, model_len: int | None = None) -> Carry:
        """How the failed stream goes on (``model_len``: the failed decoder's, for chat's
        limit)."""
        sent = self.sent
        if sent.finish is not None:
            return Carry("finished")
        if self.diverged:
            return Carry("refused", self.diverged)
        if self.oversized:
            return Carry("refused", "an event outgrew --max-answer-bytes")
        if sent.empty and not self.channels:
            return Carry("replay", "nothing of the answer was sent")
        blockers = self._prefix_blockers(model_len)
        if not blockers:
            return Carry("prefix")
        reason = ", ".join(blockers)
        if reproducible(self.body):
            return Carry("replay", reason)
        return Carry(
            "refused",
            f"a sampled answer (no seed, temperature above 0) cannot be carried on unchanged: {reason}",
        )

    def _prefix_blockers(self, model_len: int | None) -> list[str]:
        out = [f"the request's {k}" for k in prefix_blockers(self.route, self.body)]
        if self.prompt is None:
            out.append("the engine sent no prompt token ids")
        if self.ids_hidden:
            out.append("the engine sent no token ids for part of the answer")
        if self.channels:
            out.append(" and ".join(sorted(self.channels)) + " in the answer")
        if self.swallowed:
            out.append("the engine's parser held back the text of some tokens")
        if self.leg is not None and self.leg.how == REPLAY and not self._caught_up():
            out.append("the answer was being replayed")
        limit = self._limit(model_len)
        if self.route != COMPLETIONS and _unlimited(self.body) and reproducible(self.body):
            # vLLM's chat limit is what fits, or less where the model's generation config
            # sets max_new_tokens, which the proxy cannot see; a replay keeps either
            out.append("no max_tokens (the engine's own default limit is not visible)")
        elif limit is None:
            out.append("no max_tokens and the engine's max_model_len unknown")
        elif limit - self._cut()[0] < 1:
            out.append("the answer's limit was reached without a finish_reason")
        return out

    def _cut(self) -> tuple[int, int]:
        """The last settle point whose text the client has: (token ids, characters)."""
        sent = self.sent
        return max(p for p in sent.settles if p[1] <= len(sent.text) and p[0] <= len(sent.ids))

    def _caught_up(self) -> bool:
        leg = self.leg
        return leg is not None and leg.text >= len(self.sent.text) and leg.ids >= len(self.sent.ids)

    def _limit(self, model_len: int | None) -> int | None:
        prompt_len = _count_ids(self.prompt) if self.prompt is not None else 0
        return token_limit(self.route, self.body, prompt_len, model_len)

    def continuation(self, carry: Carry, model_len: int | None = None) -> Continuation | None:
        """The request that carries the stream on as ``carry`` says (None: it cannot)."""
        if carry.how == "replay":
            body = {**self.body, "return_token_ids": True}
            self._start(Leg(REPLAY, self.route))
            return Continuation(self.route, body, None, 0)
        if carry.how != "prefix" or self.prompt is None:
            return None
        limit = self._limit(model_len)
        ids, chars = self._cut()
        if limit is None or limit - ids < 1:
            return None
        carried: dict[str, Any] = {k: self.body[k] for k in CARRIED if k in self.body}
        carried["max_tokens"] = limit - ids
        min_tokens = self.body.get("min_tokens")
        if isinstance(min_tokens, int) and min_tokens > ids:
            carried["min_tokens"] = min_tokens - ids
        carried["stream"] = True
        carried["return_token_ids"] = True
        done = ",".join(map(str, self.sent.ids[:ids])).encode()
        prompt = self.prompt.strip() + (b"," + done if done and self.prompt.strip() else done)
        self._start(Leg(PREFIX, COMPLETIONS, base_ids=ids, base_text=chars))
        return Continuation(COMPLETIONS, carried, b"[" + prompt + b"]", _count_ids(prompt))

    def _start(self, leg: Leg) -> None:
        self.leg = leg
        self.legs += 1
        self.failed = False
        self.splitter.drop()

    def completion(self) -> bytes:
        """The end of a stream whose answer was whole when its decoder failed: the usage
        the client asked for (counted from the ids streamed), then ``[DONE]``."""
        options = self.body.get("stream_options")
        wanted = isinstance(options, dict) and options.get("include_usage") is True
        out = b""
        if wanted and not self.sent.usage and self.head is not None and self.prompt is not None:
            prompt, made = _count_ids(self.prompt), len(self.sent.ids)
            usage = {
                "prompt_tokens": prompt,
                "total_tokens": prompt + made,
                "completion_tokens": made,
            }
            out = b"data: " + dumps({**self.head, "choices": [], "usage": usage}) + b"\n\n"
        return out + b"data: [DONE]\n\n"


def _unlimited(body: dict[str, Any]) -> bool:
    return body.get("max_completion_tokens") is None and body.get("max_tokens") is None


def _first_choice(doc: dict[str, Any]) -> dict[str, Any] | None:
    choices = doc.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        return choices[0]
    return None


def _tool_call(call: Any) -> tuple[int, str, str]:
    """A tool-call delta's index, function name and arguments piece."""
    if not isinstance(call, dict):
        return 0, "", ""
    index = call.get("index")
    fn = call.get("function")
    fn = fn if isinstance(fn, dict) else {}
    name, args = fn.get("name"), fn.get("arguments")
    return (
        index if isinstance(index, int) else 0,
        name if isinstance(name, str) else "",
        args if isinstance(args, str) else "",
    )


def _merge_seq(have: S, at: int, piece: S, what: str) -> S:
    """The part of ``piece`` (at ``at`` in the answer) beyond ``have``; Diverged when the
    part that overlaps ``have`` differs from it."""
    known = have[at : at + len(piece)]
    if piece[: len(known)] != known:
        raise Diverged(f"the new decoder's {what} differ from what the client has")
    return piece[len(known) :]


def _logprob_count(logprobs: Any) -> int:
    if isinstance(logprobs, dict):
        entries = logprobs.get("content")
        if entries is None:
            entries = logprobs.get("tokens")
        return len(entries) if isinstance(entries, list) else 0
    return 0


def _merge_logprobs(logprobs: Any, skip: int) -> tuple[Any, int]:
    """``logprobs`` less its first ``skip`` entries (chat: ``content``; completions: its
    four lists), and how many are left."""
    if not isinstance(logprobs, dict):
        return logprobs, 0
    skip = max(0, skip)
    out = dict(logprobs)
    count = 0
    for key, value in logprobs.items():
        if isinstance(value, list):
            out[key] = value[skip:]
            count = max(count, len(out[key]))
    return (out if count else None), count


def _chat_choice(choice: dict[str, Any], text: str) -> dict[str, Any]:
    """A /v1/completions choice as vLLM writes a chat chunk's (``stop_reason`` at the end
    only)."""
    out: dict[str, Any] = {"index": choice.get("index", 0), "delta": {"content": text}}
    out["logprobs"] = choice.get("logprobs")
    out["finish_reason"] = choice.get("finish_reason")
    if out["finish_reason"] is not None:
        out["stop_reason"] = choice.get("stop_reason")
    return out


def _prefix_usage(usage: dict[str, Any], offset: int) -> dict[str, Any]:
    """Counted from the client's prompt: the carried tokens were generated, not prompted."""
    out = dict(usage)
    prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
    if isinstance(prompt, int) and isinstance(completion, int):
        out["prompt_tokens"] = prompt - offset
        out["completion_tokens"] = completion + offset
        details = usage.get("prompt_tokens_details")
        cached = details.get("cached_tokens") if isinstance(details, dict) else None
        if isinstance(details, dict) and isinstance(cached, int):
            # the new leg's cache held carried tokens too; count the client's prompt only
            out["prompt_tokens_details"] = {
                **details,
                "cached_tokens": min(cached, prompt - offset),
            }
    return out


def _count_ids(text: bytes) -> int:
    """Token ids in a JSON list's inner text."""
    stripped = text.strip()
    return stripped.count(b",") + 1 if stripped else 0
