"""The live graph component's wire format: patches by key, the whole picture on request."""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

import comm
import pytest
from comm.base_comm import BaseComm

from cortex_jupyter.display import live_graph
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
    # Its own module is the loader; the real one is in the shared GraphCode it names.
    assert "export default" in graph._esm and "data-cxj-act" in graph.code.code
    assert graph.get_state()["code"] == f"IPY_MODEL_{graph.code.model_id}"
    assert graph.get_state()["_anywidget_id"].endswith("LiveGraph")


def test_the_front_end_files_are_package_data() -> None:
    folder = resources.files("cortex_jupyter.display")
    assert folder.joinpath("live_graph.js").read_text(encoding="utf-8").strip()
    assert folder.joinpath("live_graph.css").read_text(encoding="utf-8").strip()


def test_the_graph_code_crosses_the_wire_once_per_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 19, item 2: each view used to re-send 7.8 KB of JavaScript and CSS."""
    sent: list[str] = []

    class RecordingComm(BaseComm):  # type: ignore[misc]
        def publish_msg(self, msg_type: str, data: Any = None, *args: Any, **kw: Any) -> None:
            sent.append(json.dumps(data))

    monkeypatch.setattr(comm, "create_comm", RecordingComm)
    monkeypatch.setattr(live_graph, "_shared", None)  # a fresh kernel
    code = resources.files("cortex_jupyter.display").joinpath("live_graph.js").read_text()
    marker = "function kernelNow()"
    assert marker in code
    graphs = [LiveGraph(full=lambda i=i: f"v{i}") for i in range(5)]
    assert len({g.code.model_id for g in graphs}) == 1
    assert sum(marker in message for message in sent) == 1  # the code: once, not five times
    opens = [m for m in sent if '"value": "v' in m]  # the five graphs' own comm_opens
    assert len(opens) == 5 and all(len(m) < 3000 for m in opens)
    graphs[0].code.close()  # closed (Widget.close_all()): the next graph sends it again
    LiveGraph(full=lambda: "", value="again")
    assert sum(marker in message for message in sent) == 2
