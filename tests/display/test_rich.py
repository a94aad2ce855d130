"""Outputs shown in their richest safe form: rebuilt HTML, images, trees, text."""

from __future__ import annotations

import base64
import io
import xml.etree.ElementTree as ET
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cortex_jupyter.display.rich import (
    MAX_TEXT,
    TREE_ENTRIES,
    rich_html,
    sanitize_html,
    tree_html,
)

from .test_xss import HTML_ELEMENTS, check_tree

ALLOWED = HTML_ELEMENTS | {"table", "thead", "tbody", "tr", "th", "td", "i", "br", "img"}
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


def tree(markup: str) -> ET.Element:
    return ET.fromstring(f"<root>{markup}</root>")


class Frame:
    """Stands in for a DataFrame: an HTML table, with what a hostile cell could hold."""

    def _repr_html_(self) -> str:
        return (
            "<style scoped>.dataframe td { color: red }</style>"
            '<table border="1" class="dataframe" onclick="alert(1)"><thead><tr>'
            '<th colspan="2" style="position:fixed;top:0">name</th></tr></thead><tbody><tr>'
            '<td><a href="javascript:alert(1)">link</a></td><td><script>alert(1)</script>'
            "&lt;b&gt; &amp; <img src=x onerror=alert(1)></td></tr></tbody></table>"
            "<!-- comment --><svg onload=alert(1)><text>gone</text></svg>"
        )


def test_an_html_repr_is_rebuilt_from_inert_tags_only() -> None:
    out = rich_html(Frame())
    check_tree(tree(out), ALLOWED)
    lowered = out.lower()
    bad = ("<script", "<style", "onclick", "onerror", "javascript", "<img", "<svg", "fixed", "<a")
    for text in (*bad, "comment"):
        assert text not in lowered, text
    assert '<th colspan="2">name</th>' in out and "<td>link</td>" in out
    assert "&lt;b&gt; &amp;" in out  # entities decoded, then escaped again


@pytest.mark.parametrize(
    ("markup", "expected"),
    [
        ("<b>bold <i>both</b> after", "<b>bold <i>both</i></b> after"),
        ("<td colspan='x' rowspan=3>cell", '<td rowspan="3">cell</td>'),
        ("<p>open", "<p>open</p>"),
        ("a<br>b<hr/>c", "a<br/>b<hr/>c"),
        ("<div title='\"><script>'>t</div>", '<div title="&quot;&gt;&lt;script&gt;">t</div>'),
        ("<iframe src=x>inner <b>text</b></iframe>after", "after"),
        ("</b>stray", "stray"),
    ],
)
def test_sanitize_cases(markup: str, expected: str) -> None:
    assert sanitize_html(markup) == expected


TOKENS = [
    "<b>", "</b>", "<td>", "</table>", "<script>", "</script>", "<style>", "<svg>", "</svg>",
    "<img src=x onerror=y>", "<a href='javascript:x'>", "<!--", "-->", "&lt;", "&", "<", ">",
    '"', "text", "<br>", "<details open>", "</details>", "<p onclick=z>", "<![CDATA[", "]]>",
    "<table><tr><td>",
]  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(TOKENS) | st.text(max_size=5), max_size=30))
def test_rebuilt_html_is_always_well_formed_and_inert(pieces: list[str]) -> None:
    out = sanitize_html("".join(pieces))
    check_tree(tree(out), ALLOWED)
    lowered = out.lower()
    assert "<script" not in lowered and "<svg" not in lowered and "<img" not in lowered


class Picture:
    def _repr_png_(self) -> bytes:
        return PNG


class Broken:
    def _repr_png_(self) -> bytes:
        raise RuntimeError("no renderer")

    def _repr_html_(self) -> str:
        return "<b>fallback</b>"

    def __repr__(self) -> str:
        raise ValueError("no repr either")


class Drawing:
    def _repr_svg_(self) -> str:
        return '<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>'


class Figure:
    def savefig(self, buffer: io.BytesIO, format: str, bbox_inches: str) -> None:
        assert format == "png"
        buffer.write(PNG)


def test_images_become_data_urls_and_svg_stays_an_image() -> None:
    out = rich_html(Picture())
    assert out.startswith('<img alt="output" src="data:image/png;base64,')
    assert base64.b64encode(PNG).decode() in out
    svg = rich_html(Drawing())
    assert 'src="data:image/svg+xml;base64,' in svg and "<script" not in svg
    assert "data:image/png" in rich_html(Figure())


def test_a_failing_repr_falls_back_and_never_raises() -> None:
    assert rich_html(Broken()) == rich_html(Broken())  # the HTML form, rebuilt
    assert "<b>fallback</b>" in rich_html(Broken())

    class Nothing:
        def __repr__(self) -> str:
            raise ValueError("no")

    assert "repr failed: ValueError" in rich_html(Nothing())
    assert "&lt;Nothing" not in rich_html(Nothing)  # a class is shown by its repr
    assert "_repr_html_" not in rich_html(Frame)


def test_containers_are_a_bounded_collapsible_tree() -> None:
    value: dict[str, Any] = {"name": "<b>x</b>", "rows": list(range(300)), "nested": {"a": [1]}}
    value["self"] = value  # a cycle
    out = tree_html(value)
    check_tree(tree(out), ALLOWED)
    assert "&lt;b&gt;x&lt;/b&gt;" in out and "… 200 more" in out
    assert out.count("<details") >= 3 and 'open=""' in out
    big = tree_html({i: list(range(50)) for i in range(200)})
    assert big.count("<li>") <= TREE_ENTRIES + 200
    assert rich_html({"a": 1}).count("<details") == 1


def test_text_is_escaped_and_cut() -> None:
    out = rich_html("<script>x</script>" + "y" * MAX_TEXT)
    assert "&lt;script&gt;" in out and "more characters" in out
    check_tree(tree(out), ALLOWED)


class Notes:
    """A value whose richest form is markdown (``_repr_markdown_``)."""

    def _repr_markdown_(self) -> str:
        return "**bold** and $x$ <script>alert(1)</script> $name"


def test_a_markdown_repr_is_rendered_safely_as_the_answer_is() -> None:
    out = rich_html(Notes())
    assert "<strong>bold</strong>" in out
    assert '<span class="cortex-math">$x$</span>' in out
    assert "<script" not in out and "&lt;script&gt;" in out
