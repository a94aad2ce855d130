"""The timeline SVG: a stream row, one bar per action, from a state or a run record."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from cortex_jupyter.display import ViewState, timeline_svg
from cortex_jupyter.runtime import Run

from .helpers import finished_run, parse, status

SVG = "{http://www.w3.org/2000/svg}"


def bars(svg: str) -> list[str]:
    root = ET.fromstring(svg)
    return [
        (r.find(f"{SVG}title").text or "")  # type: ignore[union-attr]
        for r in root.iter(f"{SVG}rect")
        if r.find(f"{SVG}title") is not None
    ]


def test_timeline_has_stream_segments_and_action_bars() -> None:
    titles = bars(timeline_svg(finished_run()))
    assert any(t.startswith("thought:") for t in titles)
    assert any(t.startswith("action a1:") for t in titles)
    assert any(t.startswith("response:") for t in titles)
    assert any(t.startswith("compare (a3): failed") for t in titles)
    assert any(t.startswith("search (a1): done 0.30 s") for t in titles)


def test_bars_lie_inside_the_picture() -> None:
    root = ET.fromstring(timeline_svg(finished_run(), width=600))
    for rect in root.iter(f"{SVG}rect"):
        assert 0 <= float(rect.get("x", 0)) <= 600
        assert float(rect.get("x", 0)) + float(rect.get("width", 0)) <= 600


def test_timeline_of_a_run_record() -> None:
    run = Run(started=10.0)
    for i, event in enumerate(parse()):
        run.record(event, 10.0 + i * 0.01)
    run.record(status("a1", "running", 10.5), 10.5)
    run.record(status("a1", "done", 11.0), 11.0)
    titles = bars(timeline_svg(run))
    assert any(t.startswith("search (a1): done 0.50 s") for t in titles)


def test_running_action_reaches_now_and_empty_state_is_fine() -> None:
    state = ViewState()
    state.apply(status("a", "running", 1.0, name="slow"))
    assert any("running 4.00 s" in t for t in bars(timeline_svg(state, now=5.0)))
    ET.fromstring(timeline_svg(ViewState()))
