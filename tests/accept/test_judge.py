"""The judge: right codes pass; wrong codes, echoes and long answers fail."""

from __future__ import annotations

from hypothesis import given, strategies as st

from servekit.accept.judge import MAX_ANSWER_CHARS, echoed_phrases, judge_answer
from servekit.accept.needles import ANSWER_LINE, instruction_phrases, make_codes

seeds = st.text(min_size=1, max_size=12)
padding = st.text(alphabet=st.characters(categories=["L", "Zs"]), max_size=40)


@given(seeds, padding, padding)
def test_the_expected_code_with_short_padding_passes(seed: str, before: str, after: str) -> None:
    code, *_ = make_codes(seed)
    verdict = judge_answer(f"{before}{code}{after}", code, instructions=instruction_phrases("A"))
    # padding never contains the instruction phrases (letters and spaces only, < 41 chars)
    assert verdict.passed, verdict.reason


@given(seeds)
def test_another_needles_code_fails(seed: str) -> None:
    right, wrong, *_ = make_codes(seed)
    verdict = judge_answer(wrong, right, other_codes=(right, wrong))
    assert not verdict.passed
    assert right in verdict.reason


@given(seeds)
def test_naming_every_code_fails_even_with_the_right_one(seed: str) -> None:
    codes = make_codes(seed)
    verdict = judge_answer(" ".join(codes), codes[0], other_codes=codes)
    assert not verdict.passed
    assert "another needle" in verdict.reason


@given(seeds, st.sampled_from(instruction_phrases("B")), st.booleans())
def test_an_echo_of_an_instruction_fails_whatever_its_case(
    seed: str, phrase: str, upper: bool
) -> None:
    code = make_codes(seed)[1]
    echo = phrase.upper() if upper else phrase
    verdict = judge_answer(f"{echo}\n{code}", code, instructions=instruction_phrases("B"))
    assert not verdict.passed
    assert verdict.echoed


@given(seeds, st.integers(min_value=MAX_ANSWER_CHARS + 1, max_value=2000))
def test_an_answer_over_200_characters_fails(seed: str, length: int) -> None:
    code = make_codes(seed)[0]
    answer = (code + " " + "x" * length)[:length]
    verdict = judge_answer(answer, code)
    assert not verdict.passed
    assert verdict.answer_chars == length


@given(st.integers(min_value=0, max_value=20))
def test_replacement_characters_are_counted(n: int) -> None:
    code = make_codes("r")[0]
    verdict = judge_answer(code + "\ufffd" * n, code)
    assert verdict.replacement_chars == n
    assert verdict.passed


def test_spacing_does_not_hide_an_echo() -> None:
    found = echoed_phrases("answer   with\nthe code ONLY.", [ANSWER_LINE])
    assert found == (ANSWER_LINE,)


def test_exact_answer_passes_with_its_length() -> None:
    verdict = judge_answer("ZQ7K-3341", "ZQ7K-3341", instructions=instruction_phrases("A"))
    assert verdict.passed
    assert verdict.answer_chars == 9
