"""What a tool writes is joined and redacted a batch at a time (issue 33 §2, §7): however
its writes split a secret and wherever the flusher takes a batch, the batches together
are the redaction of the whole text, and none holds any part of the secret."""

from __future__ import annotations

import contextlib
import itertools
import os
from collections.abc import Iterator

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from cortex_jupyter.runtime.core.record.captured import CapturedText
from cortex_jupyter.runtime.core.trust.secrets import REDACTED, secrets

SECRET = "sk-SPLITsecret0123456789abcdefXYZ"
PASSPHRASE = "correct horse battery staple"
SIZE = 6  # the shortest part of a secret that counts as a leak here
# Filler: none of the secret's upper-case letters or digits, so any six characters of it
# in the output came from the secret; "sk-", dots and "…" make texts that begin like it.
FILLER = st.text(alphabet="ab .\n-sk…", max_size=12)


@contextlib.contextmanager
def secret_set(value: str) -> Iterator[None]:
    """``value`` as a credential in the environment, for one example."""
    old = os.environ.get("DB_PASSWORD")
    os.environ["DB_PASSWORD"] = value
    try:
        yield
    finally:
        if old is None:
            del os.environ["DB_PASSWORD"]
        else:
            os.environ["DB_PASSWORD"] = old


def written(text: str, cuts: list[int], takes: set[int]) -> str:
    """``text`` appended in the pieces ``cuts`` make, taken after the pieces ``takes``
    names, then to its end: what the batches say, joined."""
    captured = CapturedText()
    bounds = sorted({0, len(text), *(c % (len(text) + 1) for c in cuts)})
    out = []
    for i, (start, end) in enumerate(itertools.pairwise(bounds)):
        captured.append(text[start:end])
        if i in takes:
            out.append(captured.take())
    out.append(captured.take(end=True))
    assert captured.text() == "".join(out)
    return "".join(out)


def fragments(value: str) -> set[str]:
    return {value[i : i + SIZE] for i in range(len(value) - SIZE + 1)}


def occurrence(value: str) -> st.SearchStrategy[str]:
    """The secret as a tool may print it: whole, in JSON, or cut by another library at
    ``...`` (at least ``SIZE`` of its characters beside the mark)."""
    cut = st.integers(min_value=SIZE, max_value=len(value) - 1)
    return st.one_of(
        st.just(value),
        st.just('{"password": "' + value + '"}'),
        cut.map(lambda k: value[:k] + "..."),
        cut.map(lambda k: "..." + value[-k:]),
    )


@settings(max_examples=300)
@given(
    parts=st.lists(st.one_of(FILLER, occurrence(SECRET)), max_size=8),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=40),
    takes=st.sets(st.integers(min_value=0, max_value=40), max_size=20),
)
@example(parts=[".", "...defXYZ"], cuts=[], takes=set())  # four dots: one mark
@example(parts=["sk-SPL..."], cuts=[7], takes={0})
def test_batches_hold_no_part_of_a_secret_wherever_the_writes_split_it(
    parts: list[str], cuts: list[int], takes: set[int]
) -> None:
    text = "".join(parts)
    with secret_set(SECRET):
        out = written(text, cuts, takes)
        assert out == secrets.redact(text)
    assert sorted(p for p in fragments(SECRET) if p in out) == []


@pytest.mark.parametrize("cut", range(1, len(SECRET)))
def test_a_secret_written_in_two_halves_taken_between_them_is_redacted_whole(cut: int) -> None:
    with secret_set(SECRET):
        captured = CapturedText()
        captured.append("key: " + SECRET[:cut])
        first = captured.take()
        captured.append(SECRET[cut:] + " done\n")
        out = first + captured.take(end=True)
    assert out == f"key: {REDACTED} done\n"


@settings(max_examples=150)
@given(
    gaps=st.lists(st.sampled_from([" ", "\n    ", "  ", "\\n"]), min_size=3, max_size=3),
    before=FILLER,
    cuts=st.lists(st.integers(min_value=0, max_value=200), max_size=20),
    takes=st.sets(st.integers(min_value=0, max_value=20), max_size=10),
)
def test_a_passphrase_wrapped_onto_lines_is_redacted_across_batches(
    gaps: list[str], before: str, cuts: list[int], takes: set[int]
) -> None:
    words = PASSPHRASE.split()
    shown = words[0] + "".join(gap + word for gap, word in zip(gaps, words[1:], strict=True))
    text = before + shown + " ok\n"
    with secret_set(PASSPHRASE):
        out = written(text, cuts, takes)
        assert out == secrets.redact(text)
    assert "horse" not in out and "battery" not in out


def test_text_that_does_not_end_as_a_secret_begins_is_not_held_back() -> None:
    """Lines go out as they are printed, secrets set or not."""
    with secret_set(SECRET):
        captured = CapturedText()
        captured.append("step 1 of 3 ...\n")
        assert captured.take() == "step 1 of 3 ...\n"
        captured.append("token sk-SPLIT")  # may be the beginning of the secret: held
        assert captured.take() == "token "
        assert captured.text() == f"step 1 of 3 ...\ntoken {REDACTED}"
        captured.append("ting\n")
        assert captured.take(end=True) == "sk-SPLITting\n"


def test_a_cut_raw_text_hides_the_beginning_of_a_secret_at_its_end() -> None:
    with secret_set(SECRET):
        captured = CapturedText()
        captured.append("...." + SECRET[:12])
        captured.cut(len(SECRET) - 12)
        out = captured.take()
    assert out == f"....{REDACTED}" and captured.dropped == len(SECRET) - 12
