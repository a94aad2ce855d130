"""The inspector: everything about one action, from the view state and the run record."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from types import SimpleNamespace
from typing import Any

import pytest

from cortex_jupyter.display import ViewState
from cortex_jupyter.display.inspector import inspector_html, record_node, waiting_html
from cortex_jupyter.runtime import Nested
from cortex_jupyter.runtime.core.events import ActionOutput, Progress

from .helpers import feed, finished_run, parse, status
from .test_rich import ALLOWED, Frame
from .test_xss import PAYLOADS, check_tree, hostile_state

SECTIONS = 'data-cxj-section="'


def sections(html: str) -> list[str]:
    return [part.split('"', 1)[0] for part in html.split(SECTIONS)[1:]]


def well_formed(html: str) -> ET.Element:
    root = ET.fromstring(f"<root>{html}</root>")
    check_tree(root, ALLOWED)
    return root


def test_a_failed_node_from_the_view_state_alone() -> None:
    state = finished_run()
    html = inspector_html(state, "a3", now=None)
    well_formed(html)
    assert sections(html) == ["error", "parameters", "edges", "source"]
    assert "ValueError: no model" in html and "✗ failed" in html
    # Its parameters as written, its edges and the $name that made one.
    assert "&#x27;$cats&#x27;" in html and "&#x27;$dogs.hits&#x27;" in html
    assert 'data-cxj-id="a1"' in html and "uses <code>$dogs</code>" in html
    assert "<code>depends_on</code>" in html
    assert "&lt;action type=&quot;llm&quot; mode=&quot;sync&quot; id=&quot;a3&quot;&gt;" in html
    assert 'data-cxj-act="close"' in html
    assert inspector_html(state, "nobody") == ""
    assert "data-cxj" not in inspector_html(state, "a3", live=False).replace("data-cxj-section", "")


def test_a_running_node_shows_progress_and_what_it_wrote_live() -> None:
    state = ViewState(started=100.0)
    feed(state, parse('<action id="g">{"name": "crawl", "parameters": {"n": 5}}</action>'))
    state.apply(status("g", "running", 101.0, attempt=1, parameters='{"n": 5}'))
    state.apply(
        ActionOutput(
            "g", 101.5, stdout="page 1\n", stderr="slow\n", logs=("INFO crawl: ok",),
            progress=Progress(2, 5, "pages"), partial="['a', 'b']",
        )
    )  # fmt: skip
    html = inspector_html(state, "g", now=102.0)
    well_formed(html)
    assert sections(html) == [
        "parameters", "output", "progress", "stdout", "stderr", "logs", "source",
    ]  # fmt: skip
    assert 'data-cxj-since="1.000"' in html  # the page's clock ticks "running for"
    assert "2/5 pages" in html and "width:40.0%" in html
    assert "page 1" in html and "slow" in html and "INFO crawl: ok" in html
    assert "Latest value" in html and "[&#x27;a&#x27;, &#x27;b&#x27;]" in html
    assert "{&quot;n&quot;: 5}" in html  # as the tool is called (the runtime's JSON)


def test_the_record_adds_the_rich_output_and_all_the_captured_text() -> None:
    state = ViewState()
    feed(state, parse('<action id="t">{"name": "table", "parameters": {"q": "$x"}}</action>'))
    state.apply(status("t", "running", 2.0, attempt=1))
    state.apply(ActionOutput("t", 2.1, stdout="tail only\n"))
    state.apply(status("t", "done", 3.0, attempt=1, output="<Frame>"))
    full = SimpleNamespace(
        status="done",
        output=Frame(),
        resolved={"q": {"deep": [1, 2, {"k": "<v>"}]}},
        stdout="head\n" + "x" * 100 + "\ntail only\n",
        stderr="",
        logs=["WARNING a: one", "WARNING a: two"],
    )
    record = SimpleNamespace(actions={"t": full})
    cache: dict[Any, str] = {}
    html = inspector_html(state, "t", record=record, cache=cache)
    well_formed(html)
    assert "Output (Frame)" in html and '<th colspan="2">name</th>' in html
    assert "<script" not in html.lower()
    assert "&#x27;&lt;v&gt;&#x27;" in html and "as the tool is called" in html
    assert "head\n" in html and "WARNING a: two" in html
    assert len(cache) == 1  # the rich form is computed once per output
    assert inspector_html(state, "t", record=record, cache=cache) == html


def test_an_awaiting_node_says_how_to_answer() -> None:
    state = ViewState()
    feed(state, parse('<action id="m">{"name": "mail", "parameters": {"to": "$boss"}}</action>'))
    state.apply(status("m", "awaiting", 2.0, parameters='{"to": "ceo@example.com"}'))
    html = inspector_html(state, "m")
    assert "waits for your approval" in html and "asked for approval at" in html
    line = waiting_html(state.nodes["m"])
    well_formed(line)
    assert "mail" in line and "ceo@example.com" in line


def test_retries_and_a_refused_action() -> None:
    state = ViewState()
    feed(state, parse('<action id="r">{"name": "flaky"}</action><action id="x">[1]</action>'))
    state.apply(status("r", "running", 2.0, attempt=1))
    state.apply(status("r", "running", 2.5, attempt=1, error="TimeoutError: 1 s", retry_in=0.2))
    state.apply(status("r", "running", 2.7, attempt=2))
    state.apply(status("r", "failed", 3.0, attempt=2, error="ConnectionError: reset"))
    html = inspector_html(state, "r")
    assert "attempt 1 failed" in html and "TimeoutError: 1 s" in html
    assert "attempt 2 failed" in html and "ConnectionError: reset" in html
    refused = inspector_html(state, "x")
    assert "What the model wrote (refused)" in refused
    assert 'data-cxj-section="source" open=""' in refused  # open: that text is the story


def test_an_agents_inspector_shows_its_own_graph_and_answer() -> None:
    state = ViewState()
    feed(state, parse('<action type="agent" id="ag">{"name": "helper"}</action>'))
    inner = '<thought>sub thinking</thought><action id="s1">{"name": "search"}</action>'
    for event in parse(inner + "<response>sub answer</response>"):
        state.apply(Nested("ag", event), 2.0)
    html = inspector_html(state, "ag")
    well_formed(html)
    assert "Its actions (1)" in html and 'data-id="ag/s1"' in html
    assert "sub thinking" in html and "sub answer" in html
    run = SimpleNamespace(
        actions={"ag": SimpleNamespace(subrun=SimpleNamespace(actions={"s1": 1}))}
    )
    assert record_node(run, "ag/s1") == 1 and record_node(run, "ag/zz") is None
    assert record_node(None, "ag") is None


@pytest.mark.parametrize("payload", PAYLOADS)
def test_no_inspector_lets_model_text_through(payload: str) -> None:
    state = hostile_state(payload)
    state.apply(ActionOutput("a1", 300.0, stdout=payload, logs=(payload,), partial=payload))
    record = SimpleNamespace(
        actions={"a1": SimpleNamespace(status="done", output={payload: [payload]}, resolved={
            "q": payload}, stdout=payload, stderr=payload, logs=[payload])}
    )  # fmt: skip
    for node_id in state.order:
        html = inspector_html(state, node_id, now=300.0, record=record)
        lowered = html.lower()
        for raw in ("<script", "<img", "<iframe", "<svg onload", "\x00", "\x1b"):
            assert raw not in lowered, (node_id, raw)
        well_formed(html)
    json.dumps(inspector_html(state, "a1"))
