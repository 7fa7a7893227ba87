"""Needle wording (the contract with the simulator), codes, placement and the corpus."""

from __future__ import annotations

import re

from hypothesis import given, strategies as st

from servekit.accept.corpus import filler, paragraphs
from servekit.accept.needles import (
    ANSWER_LINE,
    Needle,
    ask,
    embed,
    make_codes,
    make_needles,
    question,
    short_instruction,
)

CODE = re.compile(r"^[A-Z0-9]{4}-[0-9]{4}$")


def test_wording_is_exactly_the_agreed_contract() -> None:
    needle = Needle(name="A", code="ZQ7K-3341")
    assert needle.sentence == "The secret code for needle A is ZQ7K-3341."
    assert question("C") == "What is the secret code for needle C?"
    assert short_instruction("ZQ7K-3341") == "Repeat the code ZQ7K-3341"


@given(st.text(max_size=20))
def test_codes_are_distinct_well_formed_and_a_function_of_the_seed(seed: str) -> None:
    codes = make_codes(seed)
    assert len(set(codes)) == 4
    assert all(CODE.match(c) for c in codes)
    assert make_codes(seed) == codes


@given(st.floats(min_value=0.0, max_value=1.0), st.integers(min_value=2000, max_value=40000))
def test_a_needle_lands_near_its_depth(depth: float, chars: int) -> None:
    (needle,) = make_needles("d", (depth, 0, 0, 0))[:1]
    document = embed(filler(chars), (needle,))
    at = document.index(needle.sentence) / len(document)
    longest = max(len(p) for p in paragraphs()) + 40
    assert abs(at - depth) <= longest / len(document) + 0.01
    assert document.count("The secret code for needle") == 1


def test_all_four_needles_are_embedded_once_each() -> None:
    needles = make_needles("m", (0.1, 0.4, 0.6, 0.9))
    document = embed(filler(20000), needles)
    positions = [document.index(n.sentence) for n in needles]
    assert positions == sorted(positions)
    prompt = ask(document, "B")
    assert prompt.endswith(f"\n\n{question('B')}\n{ANSWER_LINE}")


@given(st.integers(min_value=1, max_value=200_000))
def test_filler_is_long_enough_and_ends_a_sentence(chars: int) -> None:
    text = filler(chars)
    assert len(text) >= chars
    assert text.endswith(".")
    assert len(text) < chars + max(len(p) for p in paragraphs()) + 64


def test_corpus_holds_nothing_that_looks_like_a_needle() -> None:
    text = filler(120_000)
    assert not re.search(r"[A-Z0-9]{4}-[0-9]{4}", text)
    assert "secret code" not in text
    assert "Section 2." in text  # repeated passes are numbered
