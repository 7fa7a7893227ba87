"""The filler text of long prompts: the packaged public-domain corpus.

Long-context checks need natural prose of any length. The corpus ships inside
the package (``data/corpus.txt``, provenance in ``data/README.md``) and is
repeated as numbered sections until it is long enough, then cut at a paragraph
or sentence boundary so the model never sees a torn word.
"""

from __future__ import annotations

from functools import cache
from importlib import resources


@cache
def paragraphs() -> tuple[str, ...]:
    """The corpus paragraphs, in order, whitespace-normalised."""
    text = resources.files("servekit.accept").joinpath("data/corpus.txt").read_text("utf-8")
    return tuple(" ".join(p.split()) for p in text.split("\n\n") if p.strip())


def filler(chars: int) -> str:
    """At least ``chars`` characters of corpus prose, cut at a sentence end.

    Each pass over the corpus starts with a section heading (``Section 2.``) so
    repeated text is still distinguishable; the result ends with a full stop.
    """
    if chars <= 0:
        return ""
    parts: list[str] = []
    length = 0
    section = 0
    while length < chars:
        section += 1
        for index, para in enumerate(paragraphs()):
            piece = f"Section {section}. {para}" if index == 0 else para
            length += len(piece) + (2 if parts else 0)
            parts.append(piece)
            if length >= chars:
                break
    text = "\n\n".join(parts)
    return _cut_at_sentence(text, chars)


def _cut_at_sentence(text: str, chars: int) -> str:
    """The shortest prefix of ``text`` of at least ``chars`` that ends a sentence."""
    end = text.find(". ", chars - 1)
    end2 = text.find(".\n", chars - 1)
    ends = [e for e in (end, end2) if e >= 0]
    return text[: min(ends) + 1] if ends else text
