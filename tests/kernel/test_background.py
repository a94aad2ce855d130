"""``fire_and_forget`` actions through a real kernel: the cell ends with the run, not them.

ARCHITECTURE.md: nothing waits for a ``fire_and_forget`` action and the run may end
before it does, its node still showing its final status. In a kernel the cell returns
when the run ends; the action goes on in the session's own event loop, and when it ends
the graph node, the static copy, ``_cortex`` and its variable are updated while no cell
runs. ``%cortex stop`` cancels such actions.
"""

from __future__ import annotations

import re
import time

from .harness import Kernel, Message

NODE = re.compile(r'<g class="cxj-node" data-id="([^"]+)" data-status="([^"]+)"')

TOOL = '''
import anyio
from cortex_jupyter import default_registry

@default_registry.tool(name="kt_later")
async def kt_later(seconds: float, note: str = "logged") -> str:
    """Wait, then report (an async tool: cancellable)."""
    await anyio.sleep(seconds)
    return note
'''


def cell(seconds: float) -> str:
    return f"""%%cortex --script --delay 0
<action id="log" mode="fire_and_forget">
{{"name": "kt_later", "parameters": {{"seconds": {seconds}}}, "output_key": "log_note"}}
</action>
<response>Answered at once; the log goes on.</response>
"""


def statuses(message: Message) -> dict[str, str]:
    value = message.state.get("value")
    return dict(NODE.findall(value)) if isinstance(value, str) else {}


def final_record(message: Message) -> dict[str, str] | None:
    """The action statuses of a display update's ``cortex`` record, if it is one."""
    if message.type != "update_display_data":
        return None
    record = message.content["metadata"].get("cortex") or {}
    return {a["id"]: a["status"] for a in record.get("actions", [])}


def test_the_cell_ends_with_the_run_and_the_late_action_reports_after(kernel: Kernel) -> None:
    kernel.execute(TOOL)
    run = kernel.execute(cell(1.5))
    # By ordering, not by the clock: when the cell replied its action was still running
    # (said, and shown in the static copy), and it reported done only afterwards.
    assert "1 fire_and_forget action(s) still running (log)" in run.stream("stdout")
    shown = [final_record(m) for m in run.messages if final_record(m) is not None]
    assert shown[-1] == {"log": "running"}  # the first static copy, made as the cell ended

    # No cell runs now: the node turns done, and the static copy is made again.
    later = kernel.listen(5.0, until=lambda m: final_record(m) == {"log": "done"})
    assert final_record(later[-1]) == {"log": "done"}
    assert any(statuses(m).get("log") == "done" for m in later)
    assert kernel.evaluate("_cortex.actions['log'].status") == "'done'"
    assert kernel.evaluate("log_note") == "'logged'"
    assert kernel.evaluate("_cortex.status") == "'completed'"


def test_cortex_stop_cancels_what_outlived_its_cell(kernel: Kernel) -> None:
    kernel.execute(TOOL)
    started = time.monotonic()
    kernel.execute(cell(30))
    stop = kernel.execute("%cortex stop")
    assert stop.stream("stdout") == "Cancelled 1 running action(s): log.\n"
    later = kernel.listen(5.0, until=lambda m: final_record(m) == {"log": "cancelled"})
    assert final_record(later[-1]) == {"log": "cancelled"}
    assert time.monotonic() - started < 10
    assert kernel.evaluate("_cortex.actions['log'].status") == "'cancelled'"
    assert kernel.execute("%cortex stop").stream("stdout") == (
        "No fire_and_forget action is running.\n"
    )
    # The session's loop works on: the next run (and its own late action) is fine.
    kernel.execute(cell(0.2))
    again = kernel.listen(5.0, until=lambda m: final_record(m) == {"log": "done"})
    assert final_record(again[-1]) == {"log": "done"}


def test_wait_blocks_until_the_late_action_ended_and_its_variable_is_bound(
    kernel: Kernel,
) -> None:
    kernel.execute(TOOL)
    # Unbound, not reassigned: a name the user assigns is theirs (issue 18 §10).
    kernel.execute("globals().pop('log_note', None)")
    kernel.execute(cell(0.5))
    waited = kernel.execute(
        "print(_cortex.wait().actions['log'].status, globals().get('log_note'))"
    )
    assert waited.stream("stdout") == "done logged\n"

    kernel.execute(cell(30))
    timed_out = kernel.execute("_cortex.wait(timeout=0.2)", allow_error=True)
    assert timed_out.reply["ename"] == "TimeoutError"
    assert timed_out.reply["evalue"] == (
        "after 0.2 s these actions are still running: log (%cortex stop cancels them)"
    )
    kernel.execute("%cortex stop")
