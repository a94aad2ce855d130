"""A second round of hostile input to ``%%cortex --compare`` (issue 35): what a model's
answers, a careless line or a page can do to the diff, the columns and ``keep``."""

from __future__ import annotations

from cortex_jupyter.display.compare_diff import answer_diff, compare_diff, diff_text


def test_answers_that_share_only_their_spaces_are_replaced_whole_not_word_by_word() -> None:
    # Anchoring a match on every lone space made this diff cubic: 400 words took 7 s,
    # 1,500 words minutes, and the live diff redraws it at every frame of the stream.
    first, other = " ".join(["yes"] * 400), " ".join(["no"] * 400)
    d = answer_diff("b", first, other)
    assert d.ops == (("removed", first), ("added", other))
    assert diff_text(compare_diff([("a", None, first), ("b", None, other)])).endswith(
        f"  [-{first}-]{{+{other}+}}"
    )


def test_a_long_answer_with_one_word_changed_still_shows_only_that_word() -> None:
    words = [f"w{i} the" for i in range(700)]  # 1,400 words, "the" in every other
    first = " ".join(words)
    words[350] = "CHANGED the"
    d = answer_diff("b", first, " ".join(words))
    assert [op for op in d.ops if op[0] != "same"] == [("removed", "w350"), ("added", "CHANGED")]
