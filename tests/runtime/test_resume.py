"""How a continuation joins the reply that was cut (``runtime.loop.resume``): pure, no I/O."""

from __future__ import annotations

import pytest

from cortex_jupyter.runtime.loop.resume import Resume

CUT = "<thought>Plan.</thought><response>This answer starts here "


def test_the_part_before_the_open_block_is_read_at_once() -> None:
    assert Resume(CUT).ready == "<thought>Plan.</thought>"
    whole = "<response>Done.</response>"  # cut between blocks: nothing to wait for
    assert Resume(whole).ready == whole and Resume(whole).join("more") == ("", "more")


@pytest.mark.parametrize(
    ("head", "joined"),
    [
        (
            "and ends here.</response>",
            ("<response>This answer starts here ", "and ends here.</response>"),
        ),
        (
            "<response>and ends.</response>",
            ("<response>This answer starts here ", "and ends.</response>"),
        ),
        (
            "<response>This answer starts here and ends.</response>",
            ("", "<response>This answer starts here and ends.</response>"),
        ),
        (
            '<action id="a">{}</action>',
            ("<response>This answer starts here </response>", '<action id="a">{}</action>'),
        ),
        ("<b>bold</b> words", ("<response>This answer starts here ", "<b>bold</b> words")),
    ],
    ids=["goes-on", "re-opens", "starts-again", "moves-on", "other-tag"],
)
def test_the_first_characters_decide_how_the_two_join(head: str, joined: tuple[str, str]) -> None:
    resume = Resume(CUT)
    assert resume.decided(head)
    assert resume.join(head) == joined


@pytest.mark.parametrize("head", ["", "   ", "<resp", "<response>", "<response>This ans"])
def test_too_little_of_the_continuation_waits(head: str) -> None:
    resume = Resume(CUT)
    assert not resume.decided(head)
    assert resume.decided(head, end=True)  # the stream ended: decide with what there is


@pytest.mark.parametrize(
    ("dialect", "cut", "ready"),
    [
        ("cortex", "<response>Use a <thought> tag, like", ""),
        ("cortex", "<thought>a</thought><response>b <action> c", "<thought>a</thought>"),
        ("cortex", '<thought>Plan <action id="a">{"name": "t"}</action> then', ""),
        ("cogency", "<respond>Use <think>, like", ""),
        ("hermes", "Loose text names <response>, like", "Loose text names <response>, like"),
        ("hermes", "<think>Use <response> here", ""),
        ("sigil", "§THINK: x §RESPOND: Use a <thought> tag", "§THINK: x "),
        ("auto", "§RESPOND: Use a <thought> tag", ""),
    ],
)
def test_what_is_open_is_what_the_parser_reads(dialect: str, cut: str, ready: str) -> None:
    # A tag quoted inside a block is text: the block the parser is in stays the open one.
    assert Resume(cut, dialect).ready == ready


def test_a_cut_block_is_closed_in_its_dialect_before_another_block() -> None:
    assert Resume("<respond>Use <think>", "cogency").join("<execute>[]</execute>") == (
        "<respond>Use <think></respond>",
        "<execute>[]</execute>",
    )
    # A sigil section ends at the next marker: nothing is added.
    assert Resume("§RESPOND: so far", "sigil").join("§CALLS: []") == (
        "§RESPOND: so far",
        "§CALLS: []",
    )
    assert Resume("§RESPOND: so far", "sigil").join("§RESPOND: and on") == (
        "§RESPOND: so far",
        " and on",
    )


@pytest.mark.parametrize(
    ("head", "continuation"),
    [(" $b.</response>", "$b.</response>"), ("<response> $b.", "$b."), ("\nmore", "\nmore")],
)
def test_a_cut_ending_in_a_space_is_not_followed_by_a_second_one(
    head: str, continuation: str
) -> None:
    # The model is shown the cut text without its trailing space and writes its own:
    # "Got $a " + " $b." would answer "Got 1  2." (a property test of resume found it).
    resume = Resume("<response>Got $a ")
    assert resume.decided(head)
    assert resume.join(head) == ("<response>Got $a ", continuation)
    assert Resume("<response>Got $a").join(" $b.") == ("<response>Got $a", " $b.")
