"""``%%cortex --compare`` in a real kernel (issue 35): three columns' comm messages
interleave, each column in its own view inside one box, and the static copy follows."""

from __future__ import annotations

from .harness import Kernel

COLUMNS = """
from cortex_jupyter import Agent
from cortex_jupyter.models import ScriptModel

def column(word):
    text = "<response>" + " ".join([word] * 60) + "</response>"
    return Agent(model=ScriptModel(text, chunk_size=6, delay=0.03))

ka, kb, kc = column("alpha"), column("beta"), column("gamma")
"""


def test_three_columns_stream_at_once_side_by_side(kernel: Kernel) -> None:
    kernel.execute(COLUMNS)
    execution = kernel.execute("%%cortex --compare ka,kb,kc\nName a colour.")
    sent = [
        (m.time, m.state["value"])
        for m in execution.of("comm_open", "comm_msg")
        if isinstance(m.state.get("value"), str)
    ]
    times = {
        word: [at for at, value in sent if word in value] for word in ("alpha", "beta", "gamma")
    }
    assert all(times.values()), times
    # The second (and third) column's first delta arrives before the first column ends.
    assert min(times["beta"]) < max(times["alpha"])
    assert min(times["gamma"]) < max(times["alpha"])
    # One box holds the columns; every column's view is inside it.
    box = execution.comm_of_class("cortex-compare")
    assert box is not None
    inside = execution.descendants(box)
    assert {m.comm_id for m in execution.of("comm_open", "comm_msg")
            if "beta" in str(m.state.get("value", ""))} <= inside  # fmt: skip
    # The static copy: the columns side by side as flex items that wrap.
    html = [m.content["data"].get("text/html", "") for m in execution.of("display_data")]
    copy = next(h for h in html if "cortex-compare" in h)
    assert "flex-wrap:wrap" in copy and copy.count("cortex-compare-column") == 3
    statuses = kernel.evaluate("[c.run.status for c in _compare.values()]")
    assert statuses == "['completed', 'completed', 'completed']"
