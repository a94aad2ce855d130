"""The diff of a ``--compare`` cell (issue 35, item 3): the columns' actions aligned, the
answers diffed word by word, every text escaped; and the live toggle, which switches on
known messages only (a message is the front end's text: any code on the page can send one).
"""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from cortex_jupyter.display.compare import ColumnFacts
from cortex_jupyter.display.compare_diff import (
    SideCalls,
    align,
    answer_diff,
    calls_of,
    compare_diff,
    diff_html,
    diff_text,
)
from cortex_jupyter.display.compare_widget import CompareBox

# ---- aligning actions -------------------------------------------------------------------


def test_same_tool_same_args_match_other_args_differ_and_extras_are_only_in_one() -> None:
    a = SideCalls("a", (("search", {"q": "paris", "n": 3}), ("fetch", {"url": "x"})))
    b = SideCalls("b", (("search", {"n": 3, "q": "lyon"}), ("fetch", {"url": "x"}),
                        ("sum", [1, 2])))  # fmt: skip
    rows = align([a, b])
    assert [(r.tool, r.kind) for r in rows] == [
        ("search", "differs"), ("fetch", "same"), ("sum", "only")
    ]  # fmt: skip
    assert rows[0].keys == ("q",)  # n is equal (its order in the dict does not matter)
    assert rows[2].calls == (None, ("sum", [1, 2]))


def test_a_call_only_some_of_three_columns_make_names_the_others() -> None:
    call = ("search", {"q": "x"})
    rows = align([SideCalls("a", (call,)), SideCalls("b", ()), SideCalls("c", (call,))])
    (row,) = rows
    assert row.kind == "same" and row.missing == (1,)
    d = compare_diff([("a", None, ""), ("b", None, ""), ("c", None, "")])
    assert d.rows == ()
    text = diff_text(type(d)(("a", "b", "c"), rows, ()))  # the row says where it is missing
    assert "search: same (not in b)" in text


def test_an_exact_match_later_wins_over_an_earlier_same_tool() -> None:
    a = SideCalls("a", (("t", {"x": 1}), ("t", {"x": 2})))
    b = SideCalls("b", (("t", {"x": 2}),))
    rows = align([a, b])
    assert [r.kind for r in rows] == ["only", "same"]


def test_hostile_parameters_never_raise() -> None:
    weird: list[Any] = [None, "text", math.nan, {1: "a", "1": "b"}, [object()], {"k": {1, 2}}]
    cyclic: dict[str, Any] = {}
    cyclic["self"] = cyclic
    weird.append(cyclic)
    sides = [SideCalls(n, tuple(("t", p) for p in weird)) for n in ("a", "b")]
    rows = align(sides)
    assert sum(call is not None for row in rows for call in row.calls) == 2 * len(weird)
    diff_text(type(compare_diff([]))(("a", "b"), rows, ()))  # renders too


calls = st.lists(
    st.tuples(
        st.sampled_from(["a", "b", "<b>"]),
        st.one_of(
            st.none(),
            st.dictionaries(st.sampled_from(["x", "y"]), st.integers(0, 2), max_size=2),
            st.floats(allow_nan=True),
        ),
    ),
    max_size=6,
)


@settings(max_examples=60, deadline=None)
@given(st.lists(calls, min_size=1, max_size=4))
def test_alignment_covers_every_action_exactly_once_in_its_order(columns: list[Any]) -> None:
    sides = [SideCalls(f"c{i}", tuple(c)) for i, c in enumerate(columns)]
    rows = align(sides)
    for index, side in enumerate(sides):
        placed = [row.calls[index] for row in rows if row.calls[index] is not None]
        assert placed == list(side.calls)  # each exactly once, in its column's order
    for row in rows:
        present = [c for c in row.calls if c is not None]
        assert present and all(c[0] == row.tool for c in present)
        if row.kind == "only":
            assert len(present) == 1


def test_calls_of_a_run_are_its_top_level_actions_in_start_order() -> None:
    def node(name: str, started: Any, parent: Any = None, params: Any = None) -> Any:
        action = SimpleNamespace(parameters=params)
        return SimpleNamespace(name=name, started=started, parent=parent, action=action,
                               submitted=None)  # fmt: skip

    run = SimpleNamespace(actions={
        "1": node("late", 5.0), "2": node("early", 1.0, params={"q": 1}),
        "3": node("nested", 0.5, parent="1"), "4": node("never", None),
    })  # fmt: skip
    assert calls_of(run) == (("early", {"q": 1}), ("late", None), ("never", None))
    assert calls_of(SimpleNamespace(actions="not a mapping")) == ()


# ---- diffing answers --------------------------------------------------------------------


def test_answers_are_diffed_word_by_word() -> None:
    d = answer_diff("b", "The capital is Paris.", "The capital is Lyon.")
    assert d.ops == (("same", "The capital is "), ("removed", "Paris."), ("added", "Lyon."))
    assert answer_diff("b", "same", "same").equal


def test_a_long_answer_is_diffed_by_lines_and_a_huge_one_whole() -> None:
    many = "\n".join(f"line {i} word" for i in range(1200))
    d = answer_diff("b", many, many.replace("line 7 ", "LINE 7 "))
    assert d.by == "lines" and ("added", "LINE 7 word\n") in d.ops
    huge = "x\n" * 5000
    assert answer_diff("b", huge, huge + "y").by == "whole"


def test_every_text_is_escaped_in_the_html() -> None:
    evil = '<img src=x onerror="alert(1)">'
    run = SimpleNamespace(actions={"1": SimpleNamespace(
        name=evil, started=1.0, parent=None, submitted=None,
        action=SimpleNamespace(parameters={evil: evil}),
    )})  # fmt: skip
    d = compare_diff([(evil, run, evil), ("b", None, f"{evil} and <script>x</script>")])
    html = diff_html(d)
    assert "<img" not in html and "<script" not in html
    assert "&lt;img" in html and "&lt;script&gt;" in html
    assert "<ins" in html  # the added words are marked


def test_the_text_marks_removed_and_added_words() -> None:
    d = compare_diff([("a", None, "red fox"), ("b", None, "red dog")])
    assert "[-fox-]{+dog+}" in diff_text(d)


# ---- the live toggle --------------------------------------------------------------------


class FakeView:
    def __init__(self) -> None:
        import ipywidgets

        self.widget = ipywidgets.HTML("run")

    def close(self) -> None:
        self.widget.close()


def facts(name: str) -> ColumnFacts:
    return ColumnFacts(name, "m", "completed", 10, None, None, 1.0)


def box(kept: list[str]) -> CompareBox:
    def keep(name: str) -> str:
        kept.append(name)
        return f"kept column {name}"

    return CompareBox([FakeView(), FakeView()], [facts("a"), facts("b")],  # type: ignore[list-item]
                      diff=lambda: "<div>the diff</div>", keep=keep)  # fmt: skip


def test_the_toggle_switches_to_the_diff_and_back() -> None:
    shown = box([])
    assert shown.widget.children == (shown.bar, shown.row)
    assert 'data-view="diff"' in shown.bar.value
    shown.bar._handle_custom_msg({"view": "diff"}, [])
    assert shown.view == "diff" and shown.widget.children == (shown.bar, shown.diff_pane)
    assert shown.diff_pane.value == "<div>the diff</div>"
    assert 'data-view="columns"' in shown.bar.value
    shown.bar._handle_custom_msg({"view": "columns"}, [])
    assert shown.widget.children == (shown.bar, shown.row)
    shown.close()


def test_forged_messages_do_nothing() -> None:
    kept: list[str] = []
    shown = box(kept)
    for forged in (
        {"view": "<b>"}, {"view": ["diff"]}, {"view": "diff", "extra": 1}, "diff", None,
        {"keep": "b"},  # column b's name, sent to column a's header
        {"keep": "nobody"}, {"keep": True}, {"keep": "a", "to": "/etc/passwd"},
    ):  # fmt: skip
        shown.bar._handle_custom_msg(forged, [])
        shown._headers[0]._handle_custom_msg(forged, [])
    assert shown.view == "columns" and kept == []
    shown._headers[1]._handle_custom_msg({"keep": "b"}, [])
    assert kept == ["b"] and "kept column b" in shown._headers[1].value
    shown.close()


def test_a_header_escapes_the_column_name_in_its_keep_button() -> None:
    shown = CompareBox([FakeView()], [facts('"><script>x</script>')])  # type: ignore[list-item]
    assert "<script>" not in shown._headers[0].value
    shown.close()


# ---- huge answers (gap 1): the diff compares and shows the first ANSWER_CHARS ----------

KEY = "sk-test-CUTKEY0123456789abcdefghij"


def test_a_huge_answer_is_cut_before_the_diff_and_the_view_says_where(
    monkeypatch: Any,
) -> None:
    from cortex_jupyter.display.compare_diff import ANSWER_CHARS

    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    line = "the answer goes on and on in words\n"
    body = line * (10_000_000 // len(line))
    # The key straddles the cut: redaction comes first, so no part of it is left.
    at = ANSWER_CHARS - len(KEY) // 2
    first = body[:at] + KEY + body[at:]
    other = body.replace("on and on", "ON and on", 1)
    d = compare_diff([("a", None, first), ("b", None, other)])
    (answer,) = d.answers
    assert answer.sizes == (len(first), len(other)) and answer.cut == ANSWER_CHARS
    text, html = diff_text(d), diff_html(d)
    assert len(html) < 4 * ANSWER_CHARS and len(text) < 4 * ANSWER_CHARS
    marker = f"only the first {ANSWER_CHARS:,} characters of each answer are compared"
    assert marker in text and marker in html
    assert f"a: {len(first):,} characters" in text and f"b: {len(other):,}" in text
    for shown in (text, html):
        assert KEY[:8] not in shown and KEY[-8:] not in shown
    assert "{+the answer goes ON and on" in text  # the part kept is still diffed


def test_answers_under_the_cut_say_nothing_of_a_cut() -> None:
    d = compare_diff([("a", None, "red fox"), ("b", None, "red dog")])
    assert d.answers[0].cut is None
    assert "characters of each answer" not in diff_text(d) + diff_html(d)


@settings(max_examples=60, deadline=None)
@given(st.text("ab \n", max_size=40), st.text("ab \n", max_size=40))
def test_an_answer_diff_gives_back_both_answers(first: str, other: str) -> None:
    d = answer_diff("b", first, other)
    assert "".join(t for op, t in d.ops if op != "added") == first
    assert "".join(t for op, t in d.ops if op != "removed") == other
