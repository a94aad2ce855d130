"""The graph SVG: well-formed, stable layout, statuses told apart, details list."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

from cortex_jupyter.display import ViewState, details_html, graph_svg
from cortex_jupyter.display.svg import graph_size

from .helpers import feed, finished_run, parse, status

SVG = "{http://www.w3.org/2000/svg}"


def positions(state: ViewState) -> dict[str, tuple[int | None, int | None]]:
    return {n.id: (n.layer, n.slot) for n in state.top_level()}


def test_graph_is_well_formed_svg_with_one_box_per_action() -> None:
    state = finished_run()
    svg = graph_svg(state, now=None)
    root = ET.fromstring(svg)
    groups = root.findall(f"{SVG}g")
    assert [g.get("data-id") for g in groups] == ["a1", "a2", "a3"]
    assert len(root.findall(f"{SVG}path")) == 2  # a1 -> a3 (depends_on), a2 -> a3 ($dogs)
    failed = groups[2]
    title = failed.find(f"{SVG}title")
    assert title is not None and "error: ValueError: no model" in (title.text or "")
    texts = "".join(t.text or "" for t in failed.iter(f"{SVG}text"))
    assert "✗ failed" in texts and "compare" in texts and "llm · sync" in texts


def test_empty_state_draws_nothing() -> None:
    assert graph_svg(ViewState()) == ""


def test_running_duration_uses_now() -> None:
    state = ViewState()
    state.apply(status("a", "running", 10.0, name="slow"))
    assert "▶ running · 2.50 s" in graph_svg(state, now=12.5)


def test_layout_is_layered_and_stable_as_nodes_arrive() -> None:
    text = "".join(
        f'<action id="n{i}">{json.dumps({"name": f"t{i}", "depends_on": deps})}</action>'
        for i, deps in enumerate(
            [[], [], ["n0"], ["n0", "n1"], ["n2"], [], ["n3", "n4"], ["n1"], [], ["n6"]]
        )
    )
    state = ViewState()
    seen: dict[str, tuple[int | None, int | None]] = {}
    for event in parse(text, chunk=5):
        state.apply(event, 1.0)
        if event.kind == "action":
            now = positions(state)
            assert {k: now[k] for k in seen} == seen  # nobody already placed moved
            seen = now
    assert seen["n0"] == (0, 0) and seen["n1"] == (0, 1)
    assert seen["n3"][0] == 1 and seen["n4"][0] == 2 and seen["n6"][0] == 3
    assert seen["n9"][0] == 4
    assert len(set(seen.values())) == len(seen)  # no two boxes share a cell


def test_tens_of_nodes_grow_the_picture() -> None:
    text = "".join(
        f'<action id="x{i}">{json.dumps({"name": f"step {i}", "depends_on": deps})}</action>'
        for i, deps in enumerate([f"x{i - 3}"] if i >= 3 else [] for i in range(40))
    )
    state = ViewState()
    feed(state, parse(text, chunk=50))
    width, height = graph_size(state)
    assert width > 1000 and height > 200
    root = ET.fromstring(graph_svg(state))
    assert root.get("width") == str(width)
    assert len(root.findall(f"{SVG}g")) == 40


def test_workflow_children_are_chips_inside_the_parent() -> None:
    state = ViewState()
    feed(state, parse('<action type="workflow" id="w">{"name": "etl"}</action>'))
    for i, st in enumerate(["done", "failed", "skipped"], start=1):
        state.apply(status(f"w.{i}", st, 2.0 + i, parent="w", name=f"s{i}", error="why"))
    root = ET.fromstring(graph_svg(state))
    (box,) = root.findall(f"{SVG}g")
    chips = [r for r in box.findall(f"{SVG}rect") if r.find(f"{SVG}title") is not None]
    assert len(chips) == 3
    assert "s2 (w.2)" in (chips[1].find(f"{SVG}title").text or "")  # type: ignore[union-attr]


def test_details_list_names_failed_and_skipped_nodes() -> None:
    state = finished_run()
    state.apply(status("a4", "skipped", 500.0, name="after", error="depends on 'a3', which failed"))
    html = details_html(state)
    assert "compare" in html and "ValueError: no model" in html
    assert "↷ skipped" in html and "which failed" in html
    assert "search" not in html  # done nodes are not listed
    assert details_html(ViewState()) == ""
