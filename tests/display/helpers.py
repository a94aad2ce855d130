"""Event sequences for the display tests: real parser output plus hand-made runtime events."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import comm
import pytest
from comm.base_comm import BaseComm

from cortex_jupyter.display import ViewState
from cortex_jupyter.display.widget import WidgetView
from cortex_jupyter.protocol import Parser
from cortex_jupyter.runtime import ActionStatus, End

PROTOCOL = """<thought>I will look up cats and dogs, then compare.
<action type="tool" mode="async" id="a1">
{"name": "search", "parameters": {"q": "cats"}, "output_key": "cats"}</action>
<action id="a2">{"name": "search", "parameters": {"q": "dogs"}, "output_key": "dogs"}</action>
<action type="llm" mode="sync" id="a3">
{"name": "compare", "parameters": {"a": "$cats", "b": "$dogs.hits"}, "depends_on": ["a1"]}
</action>
Waiting for results.</thought>
<response>
# Cats and dogs

Cats: **$cats**.

```python
print("done")
```
</response>"""


def parse(text: str = PROTOCOL, chunk: int = 9) -> list[Any]:
    """The parser's events for ``text`` fed in ``chunk``-character pieces."""
    parser = Parser("cortex")
    events: list[Any] = []
    for start in range(0, len(text), chunk):
        events.extend(parser.feed(text[start : start + chunk]))
    return events + parser.close()


def status(id: str, status: str, time: float, **fields: Any) -> ActionStatus:
    return ActionStatus(id=id, status=status, time=time, **fields)


def feed(
    state: ViewState, events: Iterable[Any], start: float = 100.0, step: float = 0.01
) -> float:
    """Apply ``events`` one ``step`` apart from ``start``; returns the last time used."""
    at = start
    for event in events:
        at = float(getattr(event, "time", at + step))
        state.apply(event, at)
    return at


def finished_run() -> ViewState:
    """The protocol above, with the runtime running a1/a2, failing a3, then ending."""
    state = ViewState(model="test-model")
    at = feed(state, parse())
    feed(
        state,
        [
            status("a1", "pending", at + 0.1, name="search", type="tool"),
            status("a1", "running", at + 0.2, attempt=1),
            status("a2", "running", at + 0.2, attempt=1),
            status("a1", "done", at + 0.5, attempt=1, output="{'hits': 3}"),
            status("a2", "done", at + 0.6, attempt=1, output="['rex']"),
            status("a3", "running", at + 0.7, attempt=1),
            status("a3", "failed", at + 0.9, attempt=1, error="ValueError: no model"),
            End("completed", at + 1.0),
        ],
    )
    return state


def comm_messages(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every comm message the widgets will send from now on, as the JSON the kernel would
    send (for the ``wire`` fixtures)."""
    sent: list[str] = []

    class WireComm(BaseComm):  # type: ignore[misc]
        def publish_msg(self, msg_type: str, data: Any = None, *args: Any, **kw: Any) -> None:
            sent.append(json.dumps(data, ensure_ascii=False))

    monkeypatch.setattr(comm, "create_comm", WireComm)
    return sent


def stream(
    view: WidgetView, clock: Any, text: str, chunk: int = 40, *, finish: bool = True
) -> None:
    """``text`` as the model streams it, a delta every 1/25 s on ``clock`` (a fake clock
    with ``step``), redrawn as the session does; then (``finish``) the final frame, which
    does not wait for the redraw budget."""
    parser = Parser("cortex")
    for start in range(0, len(text), chunk):
        clock.step(0.04)
        view.apply(parser.feed(text[start : start + chunk]))
        view.redraw()
    view.apply(parser.close())
    if finish:
        view.finish()
