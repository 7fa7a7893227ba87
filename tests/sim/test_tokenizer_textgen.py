"""The tokenizer round-trips text; generation is a pure function of its inputs."""

from __future__ import annotations

from hypothesis import given, settings, strategies as st

from servekit.sim.textgen import Sampling, Voice, answer_pieces
from servekit.textcontract import encode, pieces

NEEDLE_DOC = (
    "Once upon a time.\n\nThe secret code for needle B is ZQ7K-3341.\n\n"
    "The secret code for needle C is AB12-0007.\n\nMore filler text here."
)


def _answer(prompt: str, question: str | None = None, voice: Voice | None = None) -> str:
    ids = encode(prompt)
    out = answer_pieces(
        prompt,
        question,
        hash(tuple(ids)),
        sampling=Sampling(temperature=0.0),
        voice=voice or Voice(),
        natural=(12, 40),
    )
    return "".join(out)


@settings(deadline=None)  # a loaded CI machine must not turn slowness into failure
@given(st.text())
def test_pieces_join_back_to_the_text(text: str) -> None:
    assert "".join(pieces(text)) == text


def test_ids_are_stable_and_count_pieces() -> None:
    text = "Hello, world!  ZQ7K-3341\n\nnext"
    assert encode(text) == encode(text)
    assert len(encode(text)) == len(pieces(text))
    assert pieces("ZQ7K-3341") == ["ZQ7K", "-", "3341"]


def test_needle_question_is_answered_with_its_code() -> None:
    prompt = f"{NEEDLE_DOC}\n\nWhat is the secret code for needle C?\nAnswer with the code only."
    assert _answer(prompt) == "AB12-0007"
    assert _answer(prompt, question="What is the secret code for needle B?") == "ZQ7K-3341"


def test_missing_needle_gets_pseudo_text_not_a_code() -> None:
    prompt = f"{NEEDLE_DOC}\n\nWhat is the secret code for needle A?"
    answer = _answer(prompt)
    assert "ZQ7K" not in answer and "AB12" not in answer
    assert answer.endswith(".")


def test_repeat_the_code() -> None:
    assert _answer("Please. Repeat the code QX9P-0042 exactly.") == "QX9P-0042"


def test_misbehaviours_fail_in_their_own_way() -> None:
    prompt = f"{NEEDLE_DOC}\n\nWhat is the secret code for needle B?\nAnswer with the code only."
    wrong = _answer(prompt, voice=Voice(misbehave="wrong_code"))
    assert wrong != "ZQ7K-3341" and len(wrong) == len("ZQ7K-3341")
    assert "Answer with the code only." in _answer(prompt, voice=Voice(misbehave="echo_prompt"))
    long = _answer(prompt, voice=Voice(misbehave="long_answer"))
    assert long.startswith("ZQ7K-3341") and len(long) > 200


def test_disagree_seed_changes_text_and_codes() -> None:
    prompt = f"{NEEDLE_DOC}\n\nWhat is the secret code for needle B?"
    assert _answer(prompt, voice=Voice(disagree_seed=7)) != "ZQ7K-3341"
    plain = "Tell me a story about caches."
    assert _answer(plain) == _answer(plain)
    assert _answer(plain, voice=Voice(disagree_seed=7)) != _answer(plain)


def test_sampling_parameters_change_pseudo_text() -> None:
    ids = encode("Tell me a story.")
    texts = {
        "".join(
            answer_pieces(
                "Tell me a story.",
                None,
                hash(tuple(ids)),
                sampling=Sampling(temperature=t, seed=s),
                voice=Voice(),
                natural=(12, 40),
            )
        )
        for t, s in ((0.0, None), (0.7, 1), (0.7, 2))
    }
    assert len(texts) == 3
