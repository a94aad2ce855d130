"""Views over a long day, in a real kernel (issue 19, items 1 and 2): only the newest
views stay live; older finished ones show their static copy and close their widgets,
and the graph's code crosses the wire once."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .harness import WIDGET_MIME, Execution, Kernel

LIVE = 3  # CortexMagics.live_views for these tests: fewer cells show the same


def cell(i: int) -> str:
    return f"""%%cortex --script --chunk-size 400 --delay 0
<thought>Cell {i}: one quick action.</thought>
<action id="a{i}">{{"name": "kt_slow", "parameters": {{"seconds": 0.01, "answer": {i}}},
"output_key": "out{i}"}}</action>
<response>Cell {i} answered $out{i}.</response>
"""


LIVE_WIDGETS = "len(__import__('ipywidgets').widgets.widget._instances)"


@pytest.fixture(scope="module")
def views_kernel(kernel: Kernel) -> Iterator[Kernel]:
    kernel.execute(f"%config CortexMagics.live_views = {LIVE}\nruns = []")
    yield kernel
    kernel.execute("%config CortexMagics.live_views = 10")


def live_widgets(kernel: Kernel) -> int:
    return int(kernel.evaluate(LIVE_WIDGETS))


def opened(execution: Execution) -> set[str]:
    return {m.comm_id for m in execution.of("comm_open") if m.comm_id is not None}


def closed(execution: Execution) -> set[str]:
    return {m.comm_id for m in execution.of("comm_close") if m.comm_id is not None}


def test_only_the_newest_views_stay_live(views_kernel: Kernel) -> None:
    kernel = views_kernel
    counts: list[int] = []
    runs: list[Execution] = []
    for i in range(15):
        runs.append(kernel.execute(cell(i), cell_id=f"cell-{i}"))
        kernel.execute("runs.append(_cortex)")
        counts.append(live_widgets(kernel))
    # Bounded: once LIVE views are live, each new cell lets the oldest go.
    assert counts[LIVE + 1 :] == [counts[LIVE]] * (14 - LIVE), counts
    # The view a cell let go: every widget it opened got a comm_close, in that cell...
    first, later = runs[0], runs[LIVE]
    assert left_open(first) and left_open(first) <= closed(later)
    # ...and its output became an empty text with the run's record: the static copy
    # under it is what shows (as in a saved notebook), the record stays in the notebook.
    (shown, _copy) = first.of("display_data")
    display_id = shown.content["transient"]["display_id"]
    (update,) = [
        m
        for m in later.of("update_display_data")
        if m.content["transient"]["display_id"] == display_id
    ]
    assert update.content["data"] == {"text/plain": ""}
    assert update.content["metadata"]["cortex"]["status"] == "done"
    # The records the user holds are intact: only the view let go.
    assert kernel.evaluate("{r.status for r in runs[:3]}") == "{'completed'}"
    assert kernel.evaluate("(runs[0].variables['out0'], out0)") == "(0, 0)"


def left_open(execution: Execution) -> set[str]:
    """The widgets a cell opened and left open, but the shared graph code."""
    return opened(execution) - closed(execution) - {kernel_code(execution)}


def kernel_code(execution: Execution) -> str | None:
    """The shared graph code's comm (made by the first view with a graph, kept)."""
    for message in execution.of("comm_open"):
        if "code" in message.state and "css" in message.state:
            return message.comm_id
    return None


def test_running_a_cell_again_lets_its_old_view_go(views_kernel: Kernel) -> None:
    kernel = views_kernel
    kernel.execute("%cortex views close")
    before = live_widgets(kernel)
    one = kernel.execute(cell(1), cell_id="again")
    two = kernel.execute(cell(2), cell_id="again")
    assert left_open(one) and left_open(one) <= closed(two)  # the view it replaced
    assert live_widgets(kernel) - before == len(left_open(two))


def test_views_lists_and_closes_the_live_views(views_kernel: Kernel) -> None:
    kernel = views_kernel
    kernel.execute("%cortex views close")
    baseline = live_widgets(kernel)
    for i in range(2):
        kernel.execute(cell(i), cell_id=f"list-{i}")
    listing = kernel.execute("%cortex views").stream("stdout")
    assert "2 live view(s)" in listing and listing.count("done, 1 action(s)") == 2
    closing = kernel.execute("%cortex views close")
    assert "Closed 2 view(s)" in closing.stream("stdout")
    assert len(closing.of("comm_close")) > 10 and live_widgets(kernel) == baseline
    assert all(m.content["data"] == {"text/plain": ""} for m in closing.of("update_display_data"))
    assert "No live view" in kernel.execute("%cortex views").stream("stdout")
    wrong = kernel.execute("%cortex views shut", allow_error=True)
    assert wrong.reply["ename"] == "UsageError" and "%cortex views close" in wrong.reply["evalue"]


def test_the_graph_code_is_sent_once(views_kernel: Kernel) -> None:
    kernel = views_kernel
    sent = [kernel.execute(cell(i), cell_id=f"code-{i}") for i in range(3)]
    code = [m for e in sent for m in e.of("comm_open") if "function kernelNow()" in str(m.state)]
    assert code == []  # the earlier tests' first view sent it; no view sends it again
    graphs = [m for e in sent for m in e.of("comm_open") if m.state.get("_anywidget_id")]
    assert len(graphs) == 3 and all(m.size < 4000 for m in graphs)
    assert all(WIDGET_MIME in e.of("display_data")[0].content["data"] for e in sent)
