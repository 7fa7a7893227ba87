"""The text contract: what a model that follows it answers, and the tokenizer."""

from __future__ import annotations

from hypothesis import given, strategies as st

from servekit.textcontract import (
    encode,
    needle_sentence,
    pieces,
    question,
    render_chat,
    retrieve,
    short_instruction,
)

codes = st.from_regex(r"[A-Z0-9]{4}-[0-9]{4}", fullmatch=True)
names = st.sampled_from("ABCDXZ")
filler = st.text(alphabet="abc xyz.\n", max_size=200)


@given(names, codes, filler, filler)
def test_a_needle_anywhere_is_retrieved_by_its_question(
    name: str, code: str, before: str, after: str
) -> None:
    prompt = f"{before}\n\n{needle_sentence(name, code)}\n\n{after}\n\n{question(name)}"
    assert retrieve(prompt) == code
    assert retrieve(prompt, asked=question(name)) == code


def test_the_last_question_wins_and_missing_needles_give_nothing() -> None:
    doc = f"{needle_sentence('A', 'AAAA-1111')} {needle_sentence('B', 'BBBB-2222')}"
    assert retrieve(f"{doc}\n{question('A')} {question('B')}") == "BBBB-2222"
    assert retrieve(f"{doc}\n{question('C')}") is None
    assert retrieve("just text") is None


def test_repeat_the_code() -> None:
    assert retrieve(f"Please. {short_instruction('QX9P-0042')} exactly.") == "QX9P-0042"


@given(st.text())
def test_pieces_join_back_and_ids_count_them(text: str) -> None:
    assert "".join(pieces(text)) == text
    assert len(encode(text)) == len(pieces(text))


def test_chat_template() -> None:
    assert render_chat([("system", "s"), ("user", "u")]) == (
        "<|system|>\ns\n<|user|>\nu\n<|assistant|>\n"
    )
    assert render_chat([("user", "u")], add_generation_prompt=False) == "<|user|>\nu\n"
