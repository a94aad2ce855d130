"""Markdown: safe output, ``$name`` filling, and incremental == full at every step."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cortex_jupyter.display import IncrementalMarkdown, fill_references, render_markdown, short_str

BLOCKS = [
    "# Heading $x",
    "Setext heading\n==============",
    "A paragraph with **bold**, `code $x`, a [link](https://example.org) and $x.",
    "- tight\n- list\n- items",
    "- loose\n\n- list\n\n- items",
    "1. one\n2. two\n\n3. three after a blank",
    "- item\n\n  continued paragraph in the item\n\n      indented code in the item",
    "```python\ndef f(x):\n\n    return x  # blank line inside the fence\n```",
    "```\nunclosed at first\n\n\nstill code\n```",
    "    indented code\n\n    more of it",
    "> a quote\n> on two lines\n\n> another quote",
    "| a | b |\n|---|---|\n| 1 | 2 |\n| 3 | 4 |",
    "Uses [a reference][ref] defined later.",
    "[ref]: https://example.org/ref",
    "***",
    "text\n***x",
    "<div onclick=alert(1)>raw html</div>",
    "$$100 and $missing and $obj.key and $obj.nope",
    "~~struck~~ and \\*escaped\\*",
    "line one  \nhard break",
    "foo\n\n\n\nbar after blank lines",
    "2. an ordered list starting at two\n\n2) another delimiter",
]
VALUES: dict[str, Any] = {"x": "<b>X</b>", "obj": {"key": [1, 2]}}


def streamed(text: str, cuts: list[int]) -> list[str]:
    """The prefixes a stream would show: ``text`` cut at each of ``cuts``."""
    return [text[:c] for c in sorted(set(cuts))] + [text]


def assert_incremental_equals_full(text: str, cuts: list[int]) -> IncrementalMarkdown:
    md = IncrementalMarkdown()
    for prefix in streamed(text, cuts):
        assert md.render(prefix, VALUES) == render_markdown(prefix, VALUES), repr(prefix)
    return md


@settings(max_examples=120, deadline=None)
@given(
    blocks=st.lists(st.sampled_from(BLOCKS), min_size=1, max_size=9),
    seps=st.lists(st.sampled_from(["\n", "\n\n", "\n\n\n", "\n \n"]), min_size=9, max_size=9),
    data=st.data(),
)
def test_incremental_equals_full_at_every_step(
    blocks: list[str], seps: list[str], data: st.DataObject
) -> None:
    text = "".join(b + s for b, s in zip(blocks, seps, strict=False))
    cuts = data.draw(st.lists(st.integers(0, len(text)), max_size=40))
    assert_incremental_equals_full(text, cuts)


def test_every_character_of_a_long_document() -> None:
    rng = random.Random(7)
    text = "\n\n".join(rng.choice(BLOCKS) for _ in range(30))
    # every third character, and both sides of every line break (where blocks finish)
    breaks = [i + d for i, c in enumerate(text) if c == "\n" for d in (0, 1, 2)]
    assert_incremental_equals_full(text, [*range(0, len(text), 3), *breaks])


def test_only_the_tail_is_parsed_again() -> None:
    paragraph = "Some words about the results, with **emphasis** and `code`. " * 4
    text = "\n\n".join(f"## Section {i}\n\n{paragraph}" for i in range(60))  # ~17 KB
    md = IncrementalMarkdown()
    steps = streamed(text, list(range(0, len(text), 8)))
    for prefix in steps:
        md.render(prefix)
    full_cost = sum(len(p) for p in steps)
    assert md.restarts == 0
    assert md.parsed_chars < full_cost / 20  # the tail is one or two blocks
    assert md.last_parsed < 2 * len(paragraph)
    assert md.cached_chars > len(text) - 2 * len(paragraph)


def test_a_late_reference_definition_restarts_once() -> None:
    md = IncrementalMarkdown()
    head = "See [docs][d].\n\nMore text.\n\n"
    md.render(head)
    html = md.render(head + "[d]: https://example.org/docs\n\nEnd.\n")
    assert 'href="https://example.org/docs"' in html
    assert md.restarts == 1


def test_changed_value_rerenders_cached_blocks() -> None:
    md = IncrementalMarkdown()
    text = "Total: $total.\n\nNext paragraph.\n\nTail"
    assert "Total: $total." in md.render(text, {})
    assert "Total: 42." in md.render(text, {"total": 42})
    assert md.render(text, {"total": 42}) == render_markdown(text, {"total": 42})


def test_text_that_is_not_an_extension_starts_over() -> None:
    md = IncrementalMarkdown()
    md.render("# One\n\nbody\n\nmore")
    assert md.render("# Two\n\nother") == render_markdown("# Two\n\nother")


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("$x", "<b>X</b>"),
        ("$obj.key", "[1, 2]"),
        ("$obj.key.1", "2"),
        ("$obj.nope", "{'key': [1, 2]}.nope"),
        ("see $x.", "see <b>X</b>."),
        ("$missing stays", "$missing stays"),
        ("costs $$5", "costs $5"),
        ("$my_var!", "v!"),
    ],
)
def test_fill_references(text: str, shown: str) -> None:
    filled, _ = fill_references(text, {**VALUES, "my_var": "v"})
    assert filled == shown


def test_filled_values_are_escaped_and_code_is_left_alone() -> None:
    html = render_markdown("Value $x, code `$x`, $$.\n\n```\n$x\n```", VALUES)
    assert "Value &lt;b&gt;X&lt;/b&gt;" in html
    assert "<b>X</b>" not in html
    assert ">$x</code>" in html and ">$x\n</code></pre>" in html


def test_short_str_is_short_and_safe() -> None:
    assert len(short_str(list(range(100_000)))) <= 200
    assert short_str("y" * 1000).endswith("…")

    class Broken:
        def __str__(self) -> str:
            raise RuntimeError

    assert "Broken" in short_str(Broken())


@pytest.mark.parametrize(
    "text",
    [
        "[x](javascript:alert(1))",
        "[x](JaVaScRiPt:alert(1))",
        "[x](vbscript:msgbox(1))",
        "![x](javascript:alert(1))",
        "<javascript:alert(1)>",
        "[x](data:text/html;base64,PHNjcmlwdD4=)",
        "[x]: javascript:alert(1)\n\n[x]",
    ],
)
def test_unsafe_links_are_not_links(text: str) -> None:
    html = render_markdown(text)
    assert "href=" not in html and "src=" not in html


def test_safe_links_open_in_a_new_tab() -> None:
    html = render_markdown("[a](https://example.org) [b](#anchor) [c](mailto:x@example.org)")
    assert html.count('target="_blank"') == 3
    assert 'rel="noopener noreferrer nofollow"' in html


def test_code_is_highlighted_with_inline_styles() -> None:
    html = render_markdown('```python\nprint("<hi>")\n```\n\n```nosuchlang\n<b>\n```')
    assert 'style="color:' in html and "class=" not in html
    assert "&lt;hi&gt;" in html and "&lt;b&gt;" in html
