"""Model-written text never reaches HTML or SVG unescaped, in any renderer."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from cortex_jupyter.display import (
    IncrementalMarkdown,
    ViewState,
    details_html,
    graph_svg,
    header_html,
    static_html,
    thought_html,
    timeline_svg,
)
from cortex_jupyter.protocol import Action, ActionReady, ActionStart, ProtocolError
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


@pytest.mark.parametrize("payload", PAYLOADS)
def test_no_renderer_lets_model_text_through(payload: str) -> None:
    for name, out in outputs(hostile_state(payload)).items():
        lowered = out.lower()
        for raw in ("<script", "<img", "<iframe", "<svg onload", "\x00", "\x1b"):
            assert raw not in lowered, (name, raw)
        if name in ("graph", "timeline"):
            check_tree(ET.fromstring(out), SVG_ELEMENTS)
        else:
            check_tree(ET.fromstring(f"<root>{out}</root>"), HTML_ELEMENTS)


def test_payload_text_is_still_shown_escaped() -> None:
    out = outputs(hostile_state("<script>alert(1)</script>"))
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in out["thought"]
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in out["response"]
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in out["graph"]
