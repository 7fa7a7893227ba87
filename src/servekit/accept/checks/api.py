"""API surface: SSE framing, finish reasons, usage, chat, completions, Responses, images.

These are the contract clients build on; a proxy that re-frames a stream or
drops ``usage`` breaks clients while every answer stays correct.
"""

from __future__ import annotations

import base64
import struct
import zlib

from servekit.accept.check import Check
from servekit.accept.checks.common import PROMPTS, complete, text_or_reason, tokenize_count
from servekit.accept.env import Probe
from servekit.accept.outcome import Outcome, failed, passed, skipped
from servekit.accept.replies import answer_text, finish_reason, read_stream, usage
from servekit.visioncontract import COLOUR_QUESTION, colour_png, data_url, named_in_order

LENGTH_TOKENS = 8


async def sse(probe: Probe) -> Outcome:
    """A stream is well-formed SSE: JSON chunks with choices, then ``data: [DONE]``."""
    ex = await probe.stream(
        f"{probe.env.entry}/v1/completions",
        probe.completion(PROMPTS[1], max_tokens=16, stream=True),
    )
    if not ex.ok:
        return failed(f"stream failed: {ex.describe()}")
    reading = read_stream(ex)
    if reading.problems:
        return failed(f"malformed stream: {reading.problems[0]}", chunks=reading.chunks)
    if reading.finish_reason is None:
        return failed("no chunk carried a finish_reason", chunks=reading.chunks)
    measures = {"chunks": reading.chunks, "ttft_s": ex.ttft_s or 0.0}
    return passed(f"{reading.chunks} chunks then [DONE]", **measures)


async def finish_reasons(probe: Probe) -> Outcome:
    """``length`` at max_tokens, ``stop`` at a stop string, with the text cut there."""
    entry = probe.env.entry
    prompt = PROMPTS[2]
    first = await complete(probe, entry, prompt, max_tokens=LENGTH_TOKENS)
    text, why = text_or_reason(first)
    if text is None:
        return failed(f"request failed: {why}")
    reason = finish_reason(first)
    produced = usage(first).get("completion_tokens")
    if reason == "length" and produced != LENGTH_TOKENS:
        return failed(f"finish_reason length after {produced} tokens, max_tokens {LENGTH_TOKENS}")
    if reason not in ("length", "stop"):
        return failed(f"finish_reason {reason!r} at max_tokens {LENGTH_TOKENS}")
    stop = text.strip()[len(text.strip()) // 2 :][:3]
    if not stop:
        return failed(f"the model generated no visible text to stop on: {text!r}")
    second = await complete(probe, entry, prompt, max_tokens=LENGTH_TOKENS, stop=[stop])
    cut, why = text_or_reason(second)
    if cut is None:
        return failed(f"request with stop failed: {why}")
    want = text[: text.find(stop)]
    if finish_reason(second) != "stop" or cut != want:
        return failed(
            f"stop={stop!r}: finish_reason {finish_reason(second)!r} and text {cut!r}, "
            f"expected 'stop' and {want!r}"
        )
    return passed(f"{reason} at max_tokens, stop at {stop!r}", first_finish=str(reason))


async def usage_matches_tokenize(probe: Probe) -> Outcome:
    """``usage.prompt_tokens`` equals /tokenize's count; the total adds up."""
    prompt = PROMPTS[3]
    tok = await probe.post(
        f"{probe.env.tokenize_base}/tokenize", {"model": probe.env.model, "prompt": prompt}
    )
    count = tokenize_count(tok.json_body()) if tok.ok else None
    if count is None:
        return failed(f"/tokenize unusable: {tok.describe()}")
    ex = await complete(probe, probe.env.entry, prompt, max_tokens=LENGTH_TOKENS)
    use = usage(ex)
    if not ex.ok or not use:
        return failed(f"no usage in the reply: {ex.describe()}")
    p, c, t = use.get("prompt_tokens"), use.get("completion_tokens"), use.get("total_tokens")
    if p != count:
        return failed(f"usage.prompt_tokens {p} != /tokenize count {count}")
    if not isinstance(c, int) or c > LENGTH_TOKENS or t != count + c:
        return failed(f"usage inconsistent: prompt {p}, completion {c}, total {t}")
    return passed(f"prompt_tokens {p} = /tokenize, total {t}", prompt_tokens=count)


async def chat_and_completions(probe: Probe) -> Outcome:
    """Both /v1/chat/completions and /v1/completions answer with text."""
    entry = probe.env.entry
    chat = await probe.post(
        f"{entry}/v1/chat/completions",
        probe.chat([{"role": "user", "content": PROMPTS[0]}], max_tokens=16),
    )
    comp = await complete(probe, entry, PROMPTS[0], max_tokens=16)
    for label, ex in (("chat", chat), ("completions", comp)):
        if answer_text(ex) is None:
            return failed(f"{label} gave no text: {ex.describe()}")
    return passed("chat and completions both answer")


async def responses_api(probe: Probe) -> Outcome:
    """The Responses API answers where the engine offers it."""
    ex = await probe.post(
        f"{probe.env.entry}/v1/responses",
        {"model": probe.env.model, "input": PROMPTS[0], "max_output_tokens": 16, "temperature": 0},
    )
    if ex.status in (404, 405, 501):
        return skipped(f"the engine does not offer /v1/responses (HTTP {ex.status})")
    doc = ex.json_body()
    if not ex.ok or not isinstance(doc, dict) or not isinstance(doc.get("output"), list):
        return failed(f"/v1/responses unusable: {ex.describe()}")
    return passed(f"/v1/responses status {doc.get('status')!r}", items=len(doc["output"]))


def tiny_png(width: int = 8, height: int = 8) -> bytes:
    """A valid RGB PNG with a gradient, made without an imaging library."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    rows = b"".join(
        b"\x00" + bytes(v for x in range(width) for v in (x * 32 % 256, y * 32 % 256, 128))
        for y in range(height)
    )
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


async def vision(probe: Probe) -> Outcome:
    """A chat request with an image answers, where the model declares vision."""
    if "vision" not in probe.env.deployment.capabilities:
        return skipped("the model does not declare the vision capability")
    url = "data:image/png;base64," + base64.b64encode(tiny_png()).decode()
    content = [
        {"type": "text", "text": "Describe the image in one sentence."},
        {"type": "image_url", "image_url": {"url": url}},
    ]
    ex = await probe.post(
        f"{probe.env.entry}/v1/chat/completions",
        probe.chat([{"role": "user", "content": content}], max_tokens=32),
    )
    text = answer_text(ex)
    if text is None:
        return failed(f"image request failed: {ex.describe()}")
    return passed(f"image request answered ({len(text)} characters)")


IMAGE_COLOURS = ("red", "blue")


def responses_text(doc: object) -> str | None:
    """The output text of a /v1/responses reply (all output_text parts joined)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("output"), list):
        return None
    parts = [
        c.get("text")
        for item in doc["output"]
        if isinstance(item, dict) and isinstance(item.get("content"), list)
        for c in item["content"]
        if isinstance(c, dict) and c.get("type") == "output_text"
    ]
    texts = [p for p in parts if isinstance(p, str)]
    return "".join(texts) if texts else None


async def responses_images(probe: Probe) -> Outcome:
    """/v1/responses with two images: both recognised, in order (where vision is declared)."""
    if "vision" not in probe.env.deployment.capabilities:
        return skipped("the model does not declare the vision capability")
    content: list[dict[str, str]] = [{"type": "input_text", "text": COLOUR_QUESTION}]
    content += [
        {"type": "input_image", "image_url": data_url(colour_png(c))} for c in IMAGE_COLOURS
    ]
    ex = await probe.post(
        f"{probe.env.entry}/v1/responses",
        {
            "model": probe.env.model,
            "input": [{"role": "user", "content": content}],
            "max_output_tokens": 32,
            "temperature": 0,
        },
    )
    if ex.status in (404, 405, 501):
        return skipped(f"the engine does not offer /v1/responses (HTTP {ex.status})")
    text = responses_text(ex.json_body()) if ex.ok else None
    if text is None:
        return failed(f"/v1/responses with images unusable: {ex.describe()}")
    want = list(IMAGE_COLOURS)
    if not named_in_order(text, want):
        return failed(f"expected the colours {', '.join(want)} in order, got {text[:80]!r}")
    return passed(f"both images recognised: {text[:60]!r}", images=len(want), answer=text[:200])


CHECKS = (
    Check("api.sse", "api", "well-formed SSE ending in [DONE]", sse),
    Check("api.finish_reason", "api", "finish_reason length vs stop", finish_reasons),
    Check("api.usage", "api", "usage consistent with /tokenize", usage_matches_tokenize),
    Check("api.chat_completions", "api", "chat and completions", chat_and_completions),
    Check("api.responses", "api", "the Responses API where offered", responses_api),
    Check("api.vision", "api", "requests with images where declared", vision),
    Check(
        "api.responses_images",
        "api",
        "Responses API with two images, both recognised, where declared",
        responses_images,
    ),
)
