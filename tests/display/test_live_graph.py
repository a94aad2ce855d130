"""The live graph component's wire format: patches by key, the whole picture on request."""

from __future__ import annotations

from importlib import resources

from cortex_jupyter.display.live_graph import LiveGraph, frame, patch


def test_a_patch_carries_what_changed_and_what_left() -> None:
    sent = {"a": "<g data-key='a'>1</g>", "b": "<g data-key='b'>1</g>"}
    pieces = {"a": "<g data-key='a'>1</g>", "c": "<g data-key='c'>new</g>"}
    head = frame("patch", 10, 20, 1.5)
    value, waiting = patch(sent, pieces, head)
    assert value == (
        '<g data-cxj-frame="patch" data-w="10" data-h="20" data-now="1.500"></g>'
        '<g data-key="b" data-gone=""></g>'
        "<g data-key='c'>new</g>"
    )
    assert not waiting and sent == pieces
    assert patch(sent, pieces, head) == ("", False)  # nothing changed: nothing to send


def test_a_patch_is_cut_at_its_limit_and_the_rest_waits() -> None:
    sent: dict[str, str] = {}
    pieces = {f"k{i}": "x" * 100 for i in range(10)}
    value, waiting = patch(sent, pieces, "<g/>", limit=350)
    assert waiting and len(value) <= 350 and len(sent) == 3
    value, waiting = patch(sent, pieces, "<g/>", limit=350)
    assert waiting and len(sent) == 6
    huge = {"big": "y" * 1000}
    value, waiting = patch({}, huge, "<g/>", limit=10)
    assert not waiting and "y" * 1000 in value  # one piece always goes


def test_the_whole_state_is_the_whole_picture() -> None:
    graph = LiveGraph(full=lambda: "WHOLE", value="the last patch")
    assert graph.get_state()["value"] == "WHOLE"  # a front end asking for everything
    assert graph.get_state("value") == {"value": "the last patch"}  # an update
    assert "export default" in graph._esm and "data-cxj-act" in graph._esm
    assert graph.get_state()["_anywidget_id"].endswith("LiveGraph")


def test_the_front_end_files_are_package_data() -> None:
    folder = resources.files("cortex_jupyter.display")
    assert folder.joinpath("live_graph.js").read_text(encoding="utf-8").strip()
    assert folder.joinpath("live_graph.css").read_text(encoding="utf-8").strip()
