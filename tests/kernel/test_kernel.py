"""``%%cortex`` through a real kernel (``jupyter_client``): the widget messages it sends.

What a front end receives is asserted from the iopub channel: the view's widgets are
opened as comms and updated while the run streams, at a bounded rate and traffic; the
final display update leaves a static copy and a ``cortex`` metadata record; bound
variables are there for the next request; an interrupt ends a slow run at once.
"""

from __future__ import annotations

import base64
import json
import re
import time
from collections.abc import Callable

import pytest

from cortex_jupyter.display.widget import BURST, MAX_MESSAGES

from .harness import CHARGE_LOG, WIDGET_MIME, Execution, Kernel, Message, max_per_window

THOUGHT = "\n".join(f"Line {i}: weighing option {i} against the others." for i in range(12))
CELL = f"""%%cortex --script --chunk-size 8 --delay 0.01
<thought>
{THOUGHT}
<action id="slow">
{{"name": "kt_slow", "parameters": {{"seconds": 0.6}}, "output_key": "answer"}}
</action>
<action id="broken">{{"name": "kt_fail", "parameters": {{"reason": "the service is down"}}}}
</action>
Both are running; the answer comes when the slow one is done.
</thought>
<response>
## Result

The answer is **$answer**.
</response>
"""
CHUNKS = len(CELL.split("\n", 1)[1]) // 8
NODE = re.compile(r'<g class="cxj-node" data-id="([^"]+)" data-status="([^"]+)"')
PHASE = re.compile(r'data-phase="([^"]+)"')


Charges = list[tuple[str, float | None]]


@pytest.fixture(scope="module")
def charged(kernel: Kernel) -> tuple[Execution, Charges]:
    """The cell above, run once for the module's tests, with the budget's log of what it
    charged for each view message (``harness.CHARGE_LOG``)."""
    kernel.execute(CHARGE_LOG)
    return kernel.execute(CELL), kernel.charges()


@pytest.fixture(scope="module")
def streamed(charged: tuple[Execution, Charges]) -> Execution:
    return charged[0]


def view_id(execution: Execution) -> str:
    comm_id = execution.comm_of_class("cortex-view")
    assert comm_id is not None, execution.widget_classes()
    return comm_id


def test_the_view_is_opened_as_widget_comms_and_displayed(streamed: Execution) -> None:
    opens = streamed.of("comm_open")
    assert {m.content["target_name"] for m in opens} == {"jupyter.widget"}
    models = {m.state.get("_model_name") for m in opens}
    assert {"HTMLModel", "VBoxModel", "LayoutModel"} <= models
    classes = set(" ".join(streamed.widget_classes().values()).split())
    parts = {"cortex-view", "cortex-header", "cortex-thought", "cortex-graph", "cortex-inspector"}
    assert parts | {"cortex-response"} <= classes
    # Displayed first (with a display id), as the widget that holds the five parts; the
    # only other display is the static copy, left when the run ends (asserted below).
    shown, _copy = streamed.of("display_data")
    assert shown.content["data"][WIDGET_MIME]["model_id"] == view_id(streamed)
    assert shown.content["transient"]["display_id"]


def test_the_parts_are_updated_while_the_run_streams(streamed: Execution) -> None:
    updates = [m for m in streamed.of("comm_msg") if m.content["data"]["method"] == "update"]
    assert len(updates) >= 10
    thought = [value for _, value in streamed.part_values("cortex-thought")]
    assert len(set(thought)) >= 3, thought
    assert any("Line 0: weighing option 0" in value for value in thought)

    statuses: dict[str, list[str]] = {}
    for _, svg in streamed.part_values("cortex-graph"):
        for node, status in NODE.findall(svg):
            if not statuses.get(node) or statuses[node][-1] != status:
                statuses.setdefault(node, []).append(status)
    assert "running" in statuses["slow"], statuses
    assert statuses["slow"][-1] == "done"
    assert statuses["slow"].index("running") < statuses["slow"].index("done")
    assert statuses["broken"][-1] == "failed"
    # A failure is told once, in its own panel (the inspector opens by itself on it),
    # not again in a list under the graph (issue 37).
    inspector = " ".join(value for _, value in streamed.part_values("cortex-inspector"))
    assert "the service is down" in inspector
    details = " ".join(value for _, value in streamed.part_values("cortex-details"))
    assert "the service is down" not in details

    phases = [p for _, v in streamed.part_values("cortex-header") for p in PHASE.findall(v)]
    assert phases[0] == "streaming" and phases[-1] == "done", phases
    assert "running actions" in phases  # the stream ended while `slow` still ran

    response = " ".join(value for _, value in streamed.part_values("cortex-response"))
    assert "<h2>Result</h2>" in response
    assert "<strong>42</strong>" in response  # $answer, filled in once bound


def test_the_message_rate_and_traffic_are_bounded(charged: tuple[Execution, Charges]) -> None:
    streamed, charges = charged
    view = streamed.view_messages()
    shown = next(i for i, m in enumerate(view) if m.type == "display_data")
    creation, updates = view[: shown + 1], view[shown + 1 :]
    # Creation: one comm_open per widget (parts, pieces, their layouts and styles).
    assert len(creation) <= 40, [m.type for m in creation]
    # The log saw every message the front end received, in the same order.
    assert [kind for kind, _ in charges] == [m.type for m in view]
    after = charges[shown + 1 :]
    # After it, every message but the final frame was charged to the view's budget
    # (MAX_MESSAGES a second, BURST at once): no second of the budget's own clock holds
    # more. The final frame (the parts in full, the Stop button's close, the static copy
    # and the view's update) is the tail, outside the budget.
    budgeted = [at for _, at in after if at is not None]
    final = [kind for kind, at in after if at is None]
    assert all(at is None for _, at in after[len(budgeted) :]), after
    assert max_per_window(budgeted) <= MAX_MESSAGES + BURST, max_per_window(budgeted)
    assert MAX_MESSAGES + BURST <= 30  # issue 6: at most 30 messages a second per view
    assert final[-2:] == ["display_data", "update_display_data"] and len(final) <= 12, final
    # The busiest second the kernel sent, for the record (its clock, not the budget's).
    print("busiest second by send time:", max_per_window(m.sent for m in updates))
    assert len(updates) < CHUNKS / 2  # coalesced: far fewer messages than chunks
    assert streamed.total_bytes() < 250_000
    assert streamed.foreign == 0


def test_the_final_update_leaves_a_static_copy_and_a_record(streamed: Execution) -> None:
    # The view's own output ends as its widget and an empty text (what a renderer without
    # the widget's model shows), carrying the run's record; it is the last update.
    final = streamed.view_messages()[-1]
    assert final.type == "update_display_data"
    shown, copy = streamed.of("display_data")
    assert final.content["transient"] == shown.content["transient"]
    data = final.content["data"]
    assert set(data) == {WIDGET_MIME, "text/plain"} and data["text/plain"] == ""
    assert data[WIDGET_MIME]["model_id"] == view_id(streamed)
    # The static copy: a second output of its own, with no widget in it, so that every
    # renderer shows its HTML or text; the graph in it is a picture (a data URI).
    assert copy.content["transient"]["display_id"] != shown.content["transient"]["display_id"]
    assert WIDGET_MIME not in copy.content["data"]
    html, text = copy.content["data"]["text/html"], copy.content["data"]["text/plain"]
    assert "<script" not in html.lower()
    assert "cortex-run" in html and "kt_slow" in html and "the service is down" in html
    uri = re.search(r'<img class="cortex-graph" src="data:image/svg\+xml;base64,([^"]+)"', html)
    assert uri is not None
    picture = base64.b64decode(uri.group(1)).decode()
    assert picture.startswith("<svg") and "kt_slow" in picture and "kt_fail" in picture
    assert "done" in text and "kt_fail" in text
    record = final.content["metadata"]["cortex"]
    assert record["status"] == "done"
    actions = {action["id"]: action for action in record["actions"]}
    assert actions["slow"]["status"] == "done"
    assert actions["broken"]["status"] == "failed"
    assert "the service is down" in actions["broken"]["error"]
    # The failure is also said in one line, and the cell itself succeeded.
    assert "cortex: 1 action(s) failed: broken (kt_fail)" in streamed.stream("stderr")
    assert streamed.status == "ok"


def test_a_bound_variable_is_readable_by_the_next_request(
    kernel: Kernel, streamed: Execution
) -> None:
    reply = kernel.execute(
        "", user_expressions={"answer": "answer", "status": "_cortex.status"}
    ).reply
    values = {
        name: found["data"]["text/plain"] for name, found in reply["user_expressions"].items()
    }
    assert values == {"answer": "42", "status": "'completed'"}


SLOW_CELL = """%%cortex --script --chunk-size 32 --delay 0.2
<thought>
First a lookup that takes a long time.
<action id="long">{"name": "kt_slow", "parameters": {"seconds": 20}, "output_key": "never"}</action>
""" + "\n".join(f"Slow line {i} of a thought that would take a long while." for i in range(40))


def run_and_interrupt(kernel: Kernel, cell: str, ready: Callable[[Message], bool]) -> Execution:
    """Run ``cell``; interrupt the kernel at the first message for which ``ready`` holds.

    Asserts the cell then ends within 2 s, with a ``KeyboardInterrupt`` error reply.
    """
    interrupted_at: list[float] = []

    def interrupt_when_ready(message: Message) -> None:
        if not interrupted_at and ready(message):
            kernel.interrupt()
            interrupted_at.append(time.monotonic())

    run = kernel.execute(cell, on_message=interrupt_when_ready, allow_error=True, timeout=60)
    assert interrupted_at, "the run ended before it could be interrupted"
    assert run.replied - interrupted_at[0] < 2.0
    assert run.status == "error"
    assert run.reply["ename"] == "CortexInterrupt"  # a KeyboardInterrupt: Run all stops
    assert run.reply["traceback"] == ["KeyboardInterrupt: the cortex run was stopped"]
    assert "cortex: interrupted" in run.stream("stderr")
    return run


def graph_statuses(message: Message) -> dict[str, str]:
    value = message.state.get("value")
    return dict(NODE.findall(value)) if isinstance(value, str) else {}


def test_an_interrupt_ends_a_slow_run_and_the_next_cell_works(kernel: Kernel) -> None:
    # Interrupt while the model still streams and the 20 s action runs (a sync tool, in a
    # worker thread: it cannot be stopped, the run must not wait for it).
    run = run_and_interrupt(
        kernel, SLOW_CELL, lambda message: graph_statuses(message).get("long") == "running"
    )
    phases = [p for _, v in run.part_values("cortex-header") for p in PHASE.findall(v)]
    assert phases[-1] == "interrupted", phases
    assert "streaming" in phases
    statuses = [dict(NODE.findall(svg)) for _, svg in run.part_values("cortex-graph")]
    assert statuses[-1] == {"long": "cancelled"}, statuses
    final = run.view_messages()[-1]
    assert final.type == "update_display_data"
    record = final.content["metadata"]["cortex"]
    assert record["actions"][0]["status"] == "cancelled"

    # The kernel is free again: a plain cell, then another run.
    assert kernel.execute("print(1 + 1)").stream("stdout") == "2\n"
    assert kernel.evaluate("_cortex.status") == "'cancelled'"
    after = kernel.execute(
        '%%cortex --script --delay 0\n<action id="q">{"name": "kt_slow", "parameters": '
        '{"seconds": 0}, "output_key": "quick"}</action>\n<response>ok</response>'
    )
    assert after.status == "ok" and kernel.evaluate("quick") == "42"


# The same action, its body padded so it streams for about two seconds: the view has time
# to show it "starting" whatever its message budget holds back.
SLOW_BODY_CELL = SLOW_CELL.replace('<action id="long">', '<action id="long">' + " " * 320)


def test_an_action_cut_by_an_interrupt_is_not_left_looking_live(kernel: Kernel) -> None:
    # Interrupt after `<action id="long">` arrived, before its body did.
    run = run_and_interrupt(
        kernel, SLOW_BODY_CELL, lambda message: graph_statuses(message).get("long") == "starting"
    )
    final = [dict(NODE.findall(svg)) for _, svg in run.part_values("cortex-graph")][-1]
    assert final["long"] not in ("pending", "starting", "running"), final


LEAKY_TOOL = '''
import os
from cortex_jupyter import default_registry

os.environ["KT_SERVICE_TOKEN"] = "kt-QRSTUVWXYZmnopqrs-yz"

@default_registry.tool(name="kt_leak")
def kt_leak(pad: int) -> str:
    """A debug dump that prints and returns the service's token."""
    token = os.environ["KT_SERVICE_TOKEN"]
    print(f"using {token}")
    return "." * pad + token
'''
KT_TOKEN = "kt-QRSTUVWXYZmnopqrs-yz"


def test_no_part_of_a_secret_reaches_the_front_end(kernel: Kernel) -> None:
    """A tool prints and returns a credential-looking environment value; its summary
    (160 characters) cuts through it: nothing the kernel sends holds a part of it."""
    kernel.execute(LEAKY_TOOL)
    run = kernel.execute(
        '%%cortex --script --delay 0\n<action id="leak">{"name": "kt_leak", '
        '"parameters": {"pad": 70}, "output_key": "kt_dump"}</action>'
        "<response>The dump: $kt_dump</response>"
    )
    graph = run.comm_of_class("cortex-graph")
    assert graph is not None
    clicked = kernel.send_comm(graph, {"act": "select", "id": "leak"})
    inspector = [m.state["value"] for m in clicked if "cxj-inspector" in str(m.state.get("value"))]
    assert inspector and "using [redacted]" in inspector[-1]
    sent = json.dumps([m.raw["content"] for m in [*run.messages, *clicked]])
    parts = [KT_TOKEN[:n] for n in range(4, len(KT_TOKEN))]
    parts += [KT_TOKEN[-n:] for n in range(4, len(KT_TOKEN))]
    assert [part for part in parts if part in sent] == []
    assert kernel.evaluate("kt_dump.endswith(os.environ['KT_SERVICE_TOKEN'])") == "True"


def test_variables_on_the_cell_line_are_expanded_as_in_a_terminal(kernel: Kernel) -> None:
    """A kernel runs ``%%cortex`` as an async cell (``magic.as_async_cell``): its line's
    ``{var}`` and ``$var`` expand as ``run_cell_magic`` expands them in a terminal; the
    body, the prompt, is left as written."""
    kernel.execute("kt_turns, kt_size = 1, 4")
    kernel.execute(
        "%%cortex --script --delay 0 --max-turns {kt_turns} --chunk-size $kt_size\n"
        "<response>Cost: {price} and $$5.</response>"
    )
    assert kernel.evaluate("_cortex.status") == "'completed'"
    assert kernel.evaluate("_cortex.response") == "'Cost: {price} and $$5.'"
