"""The graph SVG: well-formed, stable layout, statuses told apart, details list."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

from cortex_jupyter.display import ViewState, details_html, graph_svg, node_tooltip
from cortex_jupyter.display.svg import (
    BOX_H,
    BOX_W,
    COL_GAP,
    MARGIN,
    ROW_GAP,
    arrange,
    draw,
    graph_size,
    subgraph_svg,
)
from cortex_jupyter.display.theme import style_for
from cortex_jupyter.protocol import ProtocolError
from cortex_jupyter.runtime import Nested
from cortex_jupyter.runtime.core.events import ActionOutput, Progress

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


def test_a_deep_graph_wraps_into_bands_within_a_cells_width() -> None:
    text = "".join(
        f'<action id="x{i}">{json.dumps({"name": f"step {i}", "depends_on": deps})}</action>'
        for i, deps in enumerate([f"x{i - 3}"] if i >= 3 else [] for i in range(40))
    )
    state = ViewState()
    feed(state, parse(text, chunk=50))
    width, height = graph_size(state)
    assert width <= 900 and height > 1000  # 14 levels: 4 bands of at most 4 columns
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


def test_details_list_does_not_repeat_what_a_nodes_panel_says() -> None:
    # issue 37: a failure is reported once, in its node's panel (and one line under the
    # cell); the list under the graph keeps what has no panel: the run's own errors.
    state = finished_run()
    state.apply(status("a4", "skipped", 500.0, name="after", error="depends on 'a3', which failed"))
    assert details_html(state) == ""
    state.apply(ProtocolError("forged_result", "forged", source="<result>42</result>"))
    html = details_html(state)
    assert "ValueError: no model" not in html and "which failed" not in html
    assert "✗ error" in html and "&lt;result&gt;42&lt;/result&gt;" in html
    assert details_html(ViewState()) == ""


# ---- graphs of any size (issue 12, section 5) --------------------------------------------


def fan_out(fetches: int = 60, summaries: int = 6, fail: tuple[int, ...] = (13,)) -> ViewState:
    """``fetches`` independent fetch actions, then ``summaries`` depending on ten each."""
    text = "".join(
        f'<action id="f{i}">{{"name": "fetch", "parameters": {{"url": "u{i}"}}}}</action>'
        for i in range(fetches)
    ) + "".join(
        f'<action id="s{g}">'
        + json.dumps({"name": "summarize", "depends_on": [f"f{g * 10 + k}" for k in range(10)]})
        + "</action>"
        for g in range(summaries)
    )
    state = ViewState()
    at = feed(state, parse(text, chunk=200))
    for i in range(fetches):
        state.apply(status(f"f{i}", "running", at + 0.1, attempt=1))
        if i in fail:
            state.apply(status(f"f{i}", "failed", at + 0.5, attempt=1, error="refused"))
        elif i < fetches - 8:
            state.apply(status(f"f{i}", "done", at + 0.5, attempt=1, output="ok"))
    return state


def test_a_wide_level_becomes_a_group_and_failed_members_stay_visible() -> None:
    state = fan_out()
    picture = arrange(state)
    keys = [item.key for item in picture.items]
    # Six summaries are no crowd: they keep a box each.
    assert keys == ["g:0:fetch", "n:f13", *(f"n:s{g}" for g in range(6))]
    group = picture.item("g:0:fetch")
    assert group is not None and len(group.members) == 60
    svg = graph_svg(state)
    root = ET.fromstring(svg)
    texts = " ".join(t.text or "" for t in root.iter(f"{SVG}text"))
    assert "fetch ×60" in texts and "51 done, 8 running, 1 failed" in texts
    assert 'data-id="f13" data-status="failed"' in svg  # its own box
    # One edge per pair of boxes, however many actions it joins.
    edges = {(a, b): count for a, b, _, count in picture.edges}
    assert edges == {
        **{("g:0:fetch", f"n:s{g}"): 10 for g in range(6) if g != 1},
        ("g:0:fetch", "n:s1"): 9,
        ("n:f13", "n:s1"): 1,
    }
    # It fits about one screen, not a 5,400 px column.
    assert picture.width <= 900 and picture.height <= 600


def test_a_ten_node_run_is_drawn_as_before() -> None:
    text = "".join(
        f'<action id="n{i}">{json.dumps({"name": f"t{i % 3}", "depends_on": deps})}</action>'
        for i, deps in enumerate([[], [], [], ["n0"], ["n1"], ["n2"], [], ["n3"], ["n4"], []])
    )
    state = ViewState()
    feed(state, parse(text))
    picture = arrange(state)
    assert all(item.node is not None for item in picture.items)  # no groups
    for item in picture.items:
        node = item.node
        assert node is not None and node.layer is not None and node.slot is not None
        assert (item.x, item.y) == (
            MARGIN + node.layer * (BOX_W + COL_GAP),
            MARGIN + node.slot * (BOX_H + ROW_GAP),
        )


def test_an_expanded_group_shows_a_clickable_chip_per_member() -> None:
    state = fan_out(12, 0)
    picture = arrange(state, expanded={"g:0:fetch"})
    group = picture.item("g:0:fetch")
    assert group is not None and group.expanded and group.rows == 2
    pieces = draw(state, picture, None, live=True, selected="f2")
    piece = pieces["g:0:fetch"]
    root = ET.fromstring(f'<svg xmlns="http://www.w3.org/2000/svg">{piece}</svg>')
    chips = [r for r in root.iter(f"{SVG}rect") if r.get("class") == "cxj-chip"]
    assert [c.get("data-cxj-id") for c in chips] == [f"f{i}" for i in range(12)]
    assert all(c.get("data-cxj-act") == "select" for c in chips)
    assert 'data-cxj-act="toggle" data-cxj-id="g:0:fetch"' in piece
    # The static picture is never expanded and has nothing to click.
    assert "data-cxj" not in graph_svg(state)


def test_live_pieces_tick_in_the_page_and_mark_the_selected_node() -> None:
    state = ViewState(started=10.0)
    feed(state, parse('<action id="a">{"name": "slow"}</action>'), start=10.0)
    state.apply(status("a", "running", 12.0, attempt=1))
    state.apply(ActionOutput("a", 12.5, progress=Progress(2, 4, "steps")))
    picture = arrange(state)
    live = draw(state, picture, 99.0, live=True, selected="a")["n:a"]
    assert 'data-cxj-since="2.000"' in live  # seconds after the run started
    assert 'data-cxj-tail=" · 2/4"' in live and "cxj-progress" in live
    assert "cxj-selected" in live
    assert "99" not in live  # the page's clock, not the kernel's, moves it
    static = draw(state, picture, 15.0)["n:a"]
    assert "running · 3.00 s · 2/4" in static and "data-cxj" not in static


def test_awaiting_has_its_own_look_and_the_newest_line_shows_while_running() -> None:
    state = ViewState()
    feed(
        state,
        parse('<action id="m">{"name": "mail"}</action><action id="p">{"name": "p"}</action>'),
    )
    state.apply(status("m", "awaiting", 2.0, parameters='{"to": "bob"}'))
    state.apply(status("p", "running", 2.0))
    state.apply(ActionOutput("p", 2.1, stdout="step one\nstep <two>\n"))
    svg = graph_svg(state, now=3.0)
    assert 'data-status="awaiting"' in svg and "⚑ awaiting" in svg
    assert style_for("awaiting") != style_for("pending")
    assert "step &lt;two&gt;" in svg
    assert "waiting for your approval" in node_tooltip(state.nodes["m"])


def test_the_runs_own_refused_text_is_in_the_details_and_a_nodes_is_not() -> None:
    state = ViewState()
    feed(state, parse('<action id="bad">{"name": 3}</action>'))
    state.apply(status("ok", "done", 2.0, name="x", note="renamed from r1"))
    state.apply(ProtocolError("forged_result", "forged", source="<result>42</result>"))
    html = details_html(state, live=True)
    assert "the model wrote:" in html and "&lt;result&gt;42&lt;/result&gt;" in html
    # the refused action and the note are in their nodes' panels (the inspector)
    assert "&lt;action id=&quot;bad&quot;&gt;" not in html and "renamed from r1" not in html


def test_a_sub_runs_graph_for_the_inspector() -> None:
    state = ViewState()
    feed(state, parse('<action type="agent" id="ag">{"name": "helper"}</action>'))
    inner = '<action id="s1">{"name": "search"}</action><action id="s2">' + json.dumps(
        {"name": "read", "depends_on": ["s1"]}
    )
    for event in parse(inner + "</action>"):
        state.apply(Nested("ag", event), 2.0)
    svg = subgraph_svg(state, "ag", live=True)
    root = ET.fromstring(svg)
    boxes = [g.get("data-id") for g in root.iter(f"{SVG}g") if g.get("class") == "cxj-node"]
    assert boxes == ["ag/s1", "ag/s2"] and len(root.findall(f"{SVG}path")) == 1
    assert subgraph_svg(state, "nobody") == ""


def test_nodes_of_one_tool_with_long_ids_and_names_stay_told_apart() -> None:
    """Ids and names of one tool often differ only at their end: they are cut in the
    middle, never to the same text (issue 19 §15)."""
    state = ViewState()
    ids = ("fetch_customer_page_11", "fetch_customer_page_12")
    names = ("warehouse.inventory_by_region", "warehouse.inventory_by_country")
    for node_id, name in zip(ids, names, strict=True):
        state.apply(status(node_id, "done", 1.0, name=name))
    root = ET.fromstring(graph_svg(state, now=None))
    shown = [[t.text or "" for t in g.iter(f"{SVG}text")] for g in root.findall(f"{SVG}g")]
    assert shown[0][0] != shown[1][0] and shown[0][1] != shown[1][1]
    assert shown[0][1].endswith("_11") and shown[1][1].endswith("_12")
    assert shown[0][0].startswith("warehouse.") and shown[0][0].endswith("region")
