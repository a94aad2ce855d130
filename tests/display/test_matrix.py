"""An experiment's matrix as the user sees it: the static copy a saved notebook keeps
(escaped, marked, filtered, summarised), the terminal table, the live widget (what
reaches the front end, how often, and which clicks open a try), and an opened try's
view with its expectations laid over the run's graph."""

from __future__ import annotations

import base64
import html
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

import cortex_jupyter
from cortex_jupyter import store
from cortex_jupyter.display.matrix import (
    MatrixView,
    matrix_html,
    matrix_text,
    shown_cases,
    try_view,
)
from cortex_jupyter.display.matrix_data import AgentSummary, Matrix, MatrixCell
from cortex_jupyter.display.static import STATIC_CLASS, VIEW_CLASS, WIDGET_MIME
from cortex_jupyter.models import ScriptModel
from cortex_jupyter.runtime import Agent, Registry

from .test_xss import HTML_ELEMENTS, PAYLOADS, check_tree

EVIL = "<img src=x onerror=alert(1)>"


def cell(case: str, agent: str, passed: int, total: int, **kw: Any) -> MatrixCell:
    values: dict[str, Any] = {
        "flaky": 0 < passed < total,
        "cost": 0.0012,
        "tokens": 1234,
        "seconds": 0.84,
        "reasons": ("answer lacks 'Paris'",) if passed < total else (),
        "change": None,
        "tries": tuple((r, f"run-{case}-{agent}-{r}") for r in range(total)),
    }
    values.update(kw)
    return MatrixCell(case, agent, passed, total, **values)


def matrix(*cells: MatrixCell, done: int = 7, total: int = 8) -> Matrix:
    cases = tuple(dict.fromkeys(c.case for c in cells))
    agents = tuple(dict.fromkeys(c.agent for c in cells))
    summaries = (
        AgentSummary("gpt", 6, 8, 0.75, 0.4093, 0.9285, 0.05, 1.2, 3.4, 0),
        AgentSummary("local", 3, 8, 0.375, 0.1368, 0.6943, None, 0.5, 0.9, 1),
    )
    return Matrix(
        title="capitals",
        cases=cases,
        agents=agents,
        cells={(c.case, c.agent): c for c in cells},
        summaries=summaries,
        paired="gpt vs local on 2 cases: 2 vs 1 passed, McNemar exact p = 1.0",
        done=done,
        total=total,
    )


def sample() -> Matrix:
    return matrix(
        cell("france", "gpt", 2, 2),
        cell("france", "local", 2, 2),
        cell("spain", "gpt", 2, 2, change="improved"),
        cell("spain", "local", 1, 2, change="regressed"),
        cell("peru", "gpt", 0, 2, flaky=False),
        cell("peru", "local", 0, 2, flaky=False),
    )


def text_of(markup: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", " ", markup))


# ---- which cases each filter shows ---------------------------------------------------


def test_each_filter_shows_the_cases_it_names() -> None:
    m = sample()
    assert shown_cases(m, "all") == ("france", "spain", "peru")
    assert shown_cases(m, "failures") == ("spain", "peru")
    assert shown_cases(m, "flaky") == ("spain",)
    assert shown_cases(m, "different") == ("spain",)  # peru fails alike: not different
    with pytest.raises(ValueError, match="failing"):
        shown_cases(m, "failing")


def test_a_cell_with_no_finished_try_counts_for_no_filter() -> None:
    m = matrix(cell("a", "gpt", 1, 1), cell("a", "local", 0, 0, tries=()))
    assert shown_cases(m, "different") == ()
    assert shown_cases(m, "failures") == ()


# ---- the static copy ------------------------------------------------------------------


def test_the_static_copy_shows_fractions_marks_figures_and_reasons() -> None:
    page = matrix_html(sample())
    words = " ".join(text_of(page).split())
    assert "<script" not in page and "<svg" not in page and "<style" not in page
    assert words.count("2/2") == 3 and "1/2" in words and "0/2" in words
    assert "≈ flaky" in words  # spain/local's repeats disagree
    assert "▲ improved" in words and "▼ regressed" in words
    assert "$0.0012 · 1.2k tok · 0.84 s" in words
    assert "answer lacks 'Paris'" in words
    assert 'title="answer lacks &#x27;Paris&#x27;"' in page  # the reason on hover too
    # A summary row per agent: rate with its interval, cost, p50/p95, unfinished.
    assert "75% (41\u201393%) of 8 · $0.05 · p50 1.20 s · p95 3.40 s" in words
    assert "38% (14\u201369%) of 8 · cost unknown · p50 0.50 s · p95 0.90 s · 1 unfinished" in words
    assert "McNemar exact p = 1.0" in words
    assert "7/8 tries done" in words
    # Each cell's colour says its fraction: all, some, none passed.
    fills = re.findall(r'class="cortex-cell"[^>]*background:(#[0-9a-f]{6})', page)
    assert fills == ["#e5f5f0", "#e5f5f0", "#e5f5f0", "#fdf9d8", "#fbeee5", "#fbeee5"]


def test_case_names_and_reasons_are_escaped() -> None:
    m = matrix(
        cell(EVIL, "gpt", 0, 1, reasons=(EVIL,)),
        cell(EVIL, f"local{EVIL}", 1, 1),
    )
    page = matrix_html(m)
    assert "<img" not in page and "onerror=alert" not in page.replace("onerror=alert(1)&gt;", "")
    assert page.count("&lt;img src=x onerror=alert(1)&gt;") >= 4  # case, agent, reason, title
    assert "<img" not in matrix_html(m, live=True)
    assert EVIL in matrix_text(m)  # a terminal shows the text as it is


def test_a_filter_leaves_out_the_other_rows_and_says_so() -> None:
    page = matrix_html(sample(), "flaky")
    rows = re.findall(r'<th scope="row" title="([^"]*)"', page)
    assert rows == ["spain"]
    assert "showing flaky: 1 of 3 cases" in text_of(page)
    empty = matrix_html(matrix(cell("a", "gpt", 1, 1)), "failures")
    assert "no case to show" in text_of(empty)


def test_the_terminal_table() -> None:
    text = matrix_text(sample())
    lines = text.splitlines()
    assert lines[0] == "capitals"
    assert lines[1].split() == ["case", "gpt", "local"]
    assert lines[3].split() == ["france", "2/2", "2/2"]
    assert lines[4].split() == ["spain", "2/2", "▲", "1/2", "≈", "▼"]
    assert "gpt: 75% (41\u201393%) of 8" in text
    assert "7/8 tries done" in text
    assert "✗ peru / gpt: answer lacks 'Paris'" in text


# ---- the live widget ------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Opened:
    calls: list[tuple[str, str, int, str | None]] = field(default_factory=list)

    def __call__(self, case: str, agent: str, repeat: int, run_id: str | None) -> None:
        self.calls.append((case, agent, repeat, run_id))


def test_the_front_end_receives_the_cells_with_a_button_per_try() -> None:
    view = MatrixView(Opened(), clock=Clock())
    view.update(sample())
    sent = view.widget.value
    tries = re.findall(r'data-case="([^"]*)" data-agent="([^"]*)" data-repeat="(\d+)"', sent)
    assert len(tries) == 12 and ("spain", "local", "1") in tries
    assert re.findall(r'data-filter="(\w+)"', sent) == ["all", "failures", "flaky", "different"]
    assert "Failures (2)" in sent and "Flaky (1)" in sent
    assert VIEW_CLASS in view.widget._dom_classes


def test_updates_are_coalesced_to_ten_a_second_by_the_clock() -> None:
    clock = Clock()
    view = MatrixView(Opened(), clock=clock)
    values: list[str] = []
    view.widget.observe(lambda change: values.append(change["new"]), "value")
    for done in range(1, 6):  # five tries finish within 40 ms
        view.update(matrix(cell("a", "gpt", done, done), done=done, total=10))
        clock.now += 0.01
    assert len(values) == 1 and "1/10 tries done" in values[0]
    clock.now += 0.1
    view.update(matrix(cell("a", "gpt", 6, 6), done=6, total=10))
    assert len(values) == 2 and "6/10 tries done" in values[1]
    view.update(matrix(cell("a", "gpt", 7, 7), done=7, total=10))  # held
    assert len(values) == 2
    view.flush()
    assert len(values) == 3 and "7/10 tries done" in values[2]
    view.flush()  # nothing held: nothing sent
    assert len(values) == 3


def test_a_filter_button_redraws_with_only_its_cases() -> None:
    view = MatrixView(Opened(), clock=Clock(), matrix=sample())
    view.widget._handle_custom_msg({"filter": "different"}, [])
    rows = re.findall(r'<th scope="row" title="([^"]*)"', view.widget.value)
    assert rows == ["spain"]
    view.widget._handle_custom_msg({"filter": "<b>"}, [])  # no such filter: nothing
    assert view.filter == "different"


def test_a_click_opens_the_try_it_names_and_a_forged_one_opens_nothing() -> None:
    opened = Opened()
    view = MatrixView(opened, clock=Clock())
    view.update(sample())
    for content in (
        {"open": {"case": "spain", "agent": "local", "repeat": 1}},
        {"open": {"case": "spain", "agent": "local", "repeat": 2}},  # no third repeat
        {"open": {"case": "spain", "agent": "local", "repeat": True}},
        {"open": {"case": "spain", "agent": "local", "repeat": "1"}},
        {"open": {"case": "spain", "agent": "nobody", "repeat": 0}},
        {"open": {"case": "sp", "agent": "local", "repeat": 0}},
        {"open": {"case": ["spain"], "agent": "local", "repeat": 0}},
        {"open": "spain"},
        {"open": {"run_id": "run-spain-local-1"}},
        "spain",
        [],
    ):
        view.widget._handle_custom_msg(content, [])
    assert opened.calls == [("spain", "local", 1, "run-spain-local-1")]  # its id from the matrix


class _Buttons(HTMLParser):
    """The try buttons' data as a page's script reads them (attributes unescaped)."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[dict[str, Any]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        data = dict(attrs)
        if tag == "button" and "data-repeat" in data:
            self.found.append(data)


@pytest.mark.parametrize("odd", ["a\x01b", "line\r\nbreak", "cr\ronly", "esc\x1b[31m"])
def test_a_click_on_a_case_named_with_characters_html_cannot_carry_opens_it(odd: str) -> None:
    opened = Opened()
    view = MatrixView(opened, clock=Clock())
    view.update(matrix(cell(odd, "gpt", 1, 1), cell("plain", "gpt", 1, 1)))
    page = _Buttons()
    # The page's input stream turns \r\n and \r into \n before parsing (HTML's preprocessing).
    page.feed(view.widget.value.replace("\r\n", "\n").replace("\r", "\n"))
    for data in page.found:
        content = {"case": data["data-case"], "agent": data["data-agent"], "repeat": 0}
        view.widget._handle_custom_msg({"open": content}, [])
    assert opened.calls == [
        (odd, "gpt", 0, f"run-{odd}-gpt-0"),
        ("plain", "gpt", 0, "run-plain-gpt-0"),
    ]


def test_a_click_reads_the_latest_matrix() -> None:
    opened = Opened()
    view = MatrixView(opened, clock=Clock())
    view.update(matrix(cell("a", "gpt", 1, 1)))
    view.update(matrix(cell("a", "gpt", 1, 2)))  # held back, but it is the matrix now
    view.widget._handle_custom_msg({"open": {"case": "a", "agent": "gpt", "repeat": 1}}, [])
    assert opened.calls == [("a", "gpt", 1, "run-a-gpt-1")]


def test_closed_it_leaves_the_static_copy() -> None:
    view = MatrixView(Opened(), clock=Clock())
    assert WIDGET_MIME in view._repr_mimebundle_()
    view.update(sample())
    view.update(matrix(cell("a", "gpt", 1, 1), done=8, total=8))  # held until the end
    data, metadata = view.close()
    assert view.widget.comm is None
    assert metadata == {}
    assert STATIC_CLASS in data["text/html"] and "8/8 tries done" in data["text/html"]
    assert "8/8 tries done" in data["text/plain"]
    assert view._repr_mimebundle_() == data
    assert "<script" not in data["text/html"]


# ---- an opened try -------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:  # experiments.results.Verdict's shape (display may not import it)
    passed: bool
    score: float
    reason: str = ""
    details: dict[str, Any] = field(default_factory=dict)


SCRIPT = """<action id="a1">{"name": "lookup", "parameters": {"n": 3}, "output_key": "got"}</action>
<action id="a2">{"name": "refund", "parameters": {"n": 4}}</action>
--- next turn ---
<response final="true">Refunded $got.</response>"""


def tools() -> Registry:
    registry = Registry()

    @registry.tool
    def lookup(n: int) -> int:
        """Look up."""
        return n * 7

    @registry.tool
    def refund(n: int) -> int:
        """Refund."""
        return n

    return registry


@pytest.fixture
def stored(tmp_path: Path) -> Any:
    kept = store.open_store(tmp_path / "runs.db")
    run = Agent(model=ScriptModel(SCRIPT), registry=tools()).run_sync("refund it", store=kept)
    assert kept.flush()
    return cortex_jupyter.open_run(run.id, store=tmp_path / "runs.db")


def graph_svg_of(page: str) -> str:
    uri = re.search(r'class="cortex-graph" src="data:image/svg\+xml;base64,([^"]+)"', page)
    assert uri is not None
    return base64.b64decode(uri.group(1)).decode()


def test_an_opened_try_shows_its_run_with_the_verdicts_laid_over_it(stored: Any) -> None:
    verdicts = {
        "answer": Verdict(True, 1.0, "contains 'Refunded'"),
        "tools": Verdict(
            False, 0.5, "refund came first", {"missing": ["notify"], "out_of_order": ["refund"]}
        ),
        "graph": Verdict(False, 0.0, "refund did not wait", {"broken": [["refund", "lookup"]]}),
        "output": Verdict(
            False, 0.0, "2 fields differ", {"diff": {"city": {"expected": "Paris", "actual": EVIL}}}
        ),
    }
    view = try_view(stored, verdicts, title="spain / local #2")
    page = view.html
    words = " ".join(text_of(page).split())
    assert "✓ answer — contains 'Refunded'" in words
    assert "✗ tools (0.50) — refund came first" in words
    assert "missing: notify" in words
    assert "out of order: refund" in words
    assert "a before edge broken: refund did not wait for lookup" in words
    assert "field expected got city 'Paris'" in words and EVIL.replace("<", "") not in page
    assert "<img src=x" not in page
    # The run as %cortex open shows it: its actions and its answer.
    assert "lookup" in words and "refund" in words and "Refunded 21." in words
    # The graph outlines both ends of the broken edge, refund also as out of order.
    svg = graph_svg_of(page)
    marks = re.findall(r'<g class="cxj-mark"><title>([^<]*)</title>', svg)
    assert sorted(marks) == ["a before edge broken", "out of order; a before edge broken"]
    assert "outlined in the graph" in words
    assert view._repr_mimebundle_()["text/plain"].startswith("spain / local #2")


def test_a_typed_answers_difference_as_expect_output_gives_it() -> None:
    verdict = Verdict(
        False, 0.0, "city is 'Lima', expected 'Paris'", {"fields": {"city": ["'Lima'", "'Paris'"]}}
    )
    words = " ".join(text_of(try_view(None, {"output": verdict}).html).split())
    assert "field expected got city \"'Paris'\" \"'Lima'\"" in words


def test_a_try_that_never_ran_shows_its_verdicts_only() -> None:
    view = try_view(None, {"protocol": Verdict(False, 0.0, "the model server refused")})
    assert "the model server refused" in view.html
    assert "cortex-graph" not in view.html


def test_the_static_copy_holds_only_what_sanitizers_keep() -> None:
    m = matrix(cell(EVIL, "gpt", 0, 2, flaky=True, reasons=(EVIL, "x")), cell(EVIL, "local", 1, 1))
    data, _ = MatrixView(Opened(), clock=Clock(), matrix=m).close()
    body = data["text/html"].split("</style>", 1)[1]  # the <style> sanitizers drop, on purpose
    tags = set(re.findall(r"<\s*([a-zA-Z][\w-]*)", body))
    assert tags <= {"div", "span", "table", "thead", "tbody", "tr", "th", "td"}, tags
    assert not re.search(r"\son\w+\s*=", body.replace("onerror=alert(1)&gt;", ""))


@pytest.mark.parametrize("payload", PAYLOADS)
def test_no_matrix_or_verdict_text_gets_through(payload: str) -> None:
    m = matrix(
        cell(payload, payload, 0, 2, flaky=True, reasons=(payload,), change="regressed"),
        cell(payload, "local", 1, 1),
    )
    hostile = Verdict(False, 0.5, payload, {
        "missing": [payload], "extra": [payload], "broken": [[payload, payload]],
        "not_parallel": [[payload, "b"]], "diff": {payload: {"expected": payload, "actual": 1}},
    })  # fmt: skip
    tables = {"td", "th", "tr", "table", "thead", "tbody", "button"}
    for out in (matrix_html(m), matrix_html(m, live=True), try_view(None, {payload: hostile}).html):
        for raw in ("<script", "<img", "<iframe", "<svg", "\x00", "\x1b"):
            assert raw not in out.lower()
        check_tree(ET.fromstring(f"<root>{out}</root>"), HTML_ELEMENTS | tables)
