"""The timeline SVG: a stream row, one bar per action, from a state or a run record."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from cortex_jupyter.display import ViewState, from_run, timeline_svg
from cortex_jupyter.display.theme import style_for
from cortex_jupyter.runtime import ActionOutput, Run
from cortex_jupyter.runtime.core.events import Progress

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


def _run_with_output() -> Run:
    run = Run(started=10.0)
    for i, event in enumerate(parse()):
        run.record(event, 10.0 + i * 0.01)
    run.record(status("a1", "running", 10.5), 10.5)
    writes = [
        ActionOutput("a1", 10.6, stdout="fetching page 1\n", progress=Progress(1, 3, "pages")),
        ActionOutput("a1", 10.8, stderr="slow server\n", logs=("WARNING:x:retrying",)),
        ActionOutput("a1", 10.9, progress=Progress(3, 3, "pages")),
    ]
    for event in writes:
        run.record(event, event.time)
    run.record(status("a1", "done", 11.0), 11.0)
    return run


def marks(svg: str) -> list[tuple[str, str]]:
    root = ET.fromstring(svg)
    return [
        (r.get("data-kind") or "", r.find(f"{SVG}title").text or "")  # type: ignore[union-attr]
        for r in root.iter(f"{SVG}rect")
        if r.get("class") == "cxj-mark"
    ]


def test_captured_output_and_progress_are_marks_on_the_bar() -> None:
    found = marks(timeline_svg(_run_with_output()))
    kinds = [kind for kind, _ in found]
    assert kinds.count("output") == 1 and kinds.count("stderr") == 1
    assert kinds.count("progress") == 2
    tips = dict(found)
    assert tips["output"] == "printed at 0.60 s:\nfetching page 1"
    assert "WARNING:x:retrying" in tips["stderr"] and "slow server" in tips["stderr"]
    assert any(tip == "progress 3/3 pages at 0.90 s" for kind, tip in found if kind == "progress")
    # The marks sit on a1's bar: between its start and its end.
    root = ET.fromstring(timeline_svg(_run_with_output()))
    bar = next(r for r in root.iter(f"{SVG}rect") if "search (a1): done" in _title(r))
    left, right = float(bar.get("x", 0)), float(bar.get("x", 0)) + float(bar.get("width", 0))
    for rect in root.iter(f"{SVG}rect"):
        if rect.get("class") == "cxj-mark":
            assert left - 2 <= float(rect.get("x", 0)) <= right + 2


def _title(rect: ET.Element) -> str:
    title = rect.find(f"{SVG}title")
    return "" if title is None else title.text or ""


def test_a_view_state_draws_bars_without_marks() -> None:
    assert marks(timeline_svg(from_run(_run_with_output()))) == []


def test_marks_close_together_merge_and_keep_the_newest_text() -> None:
    run = _run_with_output()
    for i in range(200):  # 200 reports within 2 ms: under a pixel of this picture
        run.record(ActionOutput("a1", 10.95 + i * 1e-5, stdout=f"line {i}\n"), 10.95)
    found = [tip for kind, tip in marks(timeline_svg(run)) if kind == "output"]
    assert len(found) <= 3  # the first print, and the burst (split by a pixel boundary)
    assert found[-1].endswith("line 197\nline 198\nline 199")


def test_a_response_does_not_look_like_a_done_action() -> None:
    svg = timeline_svg(finished_run())
    root = ET.fromstring(svg)
    response = next(r for r in root.iter(f"{SVG}rect") if _title(r).startswith("response:"))
    done = next(r for r in root.iter(f"{SVG}rect") if "search (a1): done" in _title(r))
    assert response.get("fill") != done.get("fill")
    assert done.get("fill") == style_for("done").stroke
    # The legend names the colours the picture uses, and only those (issue 37).
    legend = [t.text for t in root.iter(f"{SVG}text")]
    for name in ("response", "done"):
        assert name in legend, name
    for name in ("printed", "stderr / log", "progress", "running", "cancelled"):
        assert name not in legend, name


def test_the_legend_lists_the_marks_drawn_in_colours_that_differ() -> None:
    root = ET.fromstring(timeline_svg(_run_with_output()))
    legend = {t.text for t in root.iter(f"{SVG}text")}
    assert "printed" in legend
    from cortex_jupyter.display.theme import STATUS_STYLES, STREAM_COLOURS

    statuses = {style.stroke for style in STATUS_STYLES.values()}
    assert not statuses & set(STREAM_COLOURS.values())  # "action" is no "skipped"


def test_a_marks_tip_cut_to_its_tail_keeps_no_part_of_a_secret(secret: str) -> None:
    run = _run_with_output()
    run.record(ActionOutput("a1", 10.95, stdout=secret + "." * 590 + "\n"), 10.95)
    tips = "\n".join(tip for kind, tip in marks(timeline_svg(run)) if kind == "output")
    assert "." * 500 in tips  # the tip's last 600 characters cut the key
    assert [secret[-n:] for n in range(4, len(secret)) if secret[-n:] in tips] == []
