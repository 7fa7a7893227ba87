"""A command's one representation and its two derivations, which must agree.

``resolved_argv`` is what a process started here runs; ``shell_words`` is what a
rendered script says. dash, given each reference's value, must expand the script
words to exactly the resolved argv, whatever the data holds (quotes, ``$``,
newlines, a conditional's switch on or off).
"""

from __future__ import annotations

import shutil
import subprocess

import pytest
from hypothesis import given, settings, strategies as st

from servekit.render.command import (
    Arg,
    Ref,
    Word,
    references,
    resolved_argv,
    shell_word,
    shell_words,
    var,
)

SWITCH_ON = Ref(var="GUARD_ON", value="1")
SWITCH_OFF = Ref(var="GUARD_ON", value="")


def test_data_is_literal_and_references_are_quoted_variables() -> None:
    command: list[Arg] = [
        "vllm",
        "$(id)",
        var("GPU_UTIL", "0.9"),
        Word(parts=("http://", Ref(var="NODE1_IP", value="10.0.0.2"), ":7100")),
        Word(parts=("--middleware",), when=SWITCH_ON),
    ]
    assert resolved_argv(command) == (
        "vllm",
        "$(id)",
        "0.9",
        "http://10.0.0.2:7100",
        "--middleware",
    )
    assert shell_words(command) == [
        "vllm",
        "'$(id)'",
        '"${GPU_UTIL}"',
        'http://"${NODE1_IP}":7100',
        "${GUARD_ON:+--middleware}",
    ]
    assert references(command) == {"GPU_UTIL", "NODE1_IP", "GUARD_ON"}


def test_a_conditional_word_vanishes_when_its_switch_is_off() -> None:
    bind = Ref(var="BIND_HOST", value="")
    command: list[Arg] = [
        "--port",
        Word(parts=("--host",), when=bind),
        Word(parts=(bind,), when=bind),
    ]
    assert resolved_argv(command) == ("--port",)
    assert shell_word(command[2]) == '${BIND_HOST:+"${BIND_HOST}"}'


def test_empty_data_is_still_one_word() -> None:
    assert shell_word("") == "''"
    assert shell_word(Word(parts=("",))) == "''"
    assert resolved_argv([""]) == ("",)


VARS = ("NODE0_IP", "NODE1_IP", "GPU_UTIL", "BIND_HOST", "BUNDLE_DIR")
text = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), max_size=12)
refs = st.builds(Ref, var=st.sampled_from(VARS), value=text)
words = st.builds(
    Word,
    parts=st.lists(st.one_of(text, refs), min_size=1, max_size=4).map(tuple),
    when=st.one_of(
        st.none(), st.builds(Ref, var=st.just("SWITCH"), value=st.sampled_from(["", "1"]))
    ),
)
commands = st.lists(st.one_of(text, words), max_size=6)


def _consistent(command: list[Arg]) -> bool:
    """A variable has one value per script (as on a node)."""
    seen: dict[str, str] = {}
    for arg in command:
        if isinstance(arg, Word):
            for ref in [p for p in arg.parts if isinstance(p, Ref)] + [arg.when] * bool(arg.when):
                assert ref is not None
                if seen.setdefault(ref.var, ref.value) != ref.value:
                    return False
    return True


def _values(command: list[Arg]) -> dict[str, str]:
    found: dict[str, str] = {}
    for arg in command:
        if isinstance(arg, Word):
            for part in arg.parts:
                if isinstance(part, Ref):
                    found[part.var] = part.value
            if arg.when is not None:
                found[arg.when.var] = arg.when.value
    return found


@pytest.mark.skipif(shutil.which("dash") is None, reason="needs dash")
@settings(max_examples=80, deadline=None)
@given(command=commands.filter(_consistent))
def test_dash_expands_the_script_words_to_the_resolved_argv(command: list[Arg]) -> None:
    script = "set -- " + " ".join(shell_words(command)) + '\n[ $# = 0 ] || printf "%s\\0" "$@"\n'
    env = {"PATH": "/usr/bin:/bin", **_values(command)}
    out = subprocess.run(["dash", "-c", script], env=env, capture_output=True, check=True).stdout
    got = tuple(w.decode() for w in out.split(b"\0")[:-1])
    assert got == resolved_argv(command)
