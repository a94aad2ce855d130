"""Approval rows through a real kernel (issue 18 §12): a click answers exactly the action
its row shows, even when another cell waits on an action with the same id."""

from __future__ import annotations

import time

from .harness import Kernel

TOOL = '''
from cortex_jupyter import default_registry

kt_sent = []

@default_registry.tool(name="kt_mail", approve=True)
def kt_mail(to: str) -> str:
    """Send mail (acts on the world)."""
    kt_sent.append(to)
    return f"sent to {to}"
'''


def cell(to: str) -> str:
    # The action outlives its cell (fire_and_forget) and waits for approval; the cell
    # lasts long enough (kt_slow) for its row to be drawn while it runs.
    return f"""%%cortex --script --delay 0
<action id="a1" mode="fire_and_forget">
{{"name": "kt_mail", "parameters": {{"to": "{to}"}}}}
</action>
<action id="pause" mode="sync">{{"name": "kt_slow", "parameters": {{"seconds": 0.5}}}}</action>
<response>Asked.</response>
"""


def sent_once_changed(kernel: Kernel) -> str:
    """``kt_sent`` once something was sent (the click reaches the run's loop in time)."""
    for _ in range(200):
        sent = kernel.evaluate("kt_sent")
        if sent != "[]":
            return sent
        time.sleep(0.05)
    return kernel.evaluate("kt_sent")


def test_approve_on_a_row_runs_its_own_cells_action(kernel: Kernel) -> None:
    kernel.execute(TOOL)
    first = kernel.execute(cell("boss@"))
    second = kernel.execute(cell("attacker@"))
    approve = first.comm_of_class("cortex-approve")
    assert approve is not None and second.comm_of_class("cortex-approve") is not None
    kernel.send_comm(approve, {"event": "click"})
    assert sent_once_changed(kernel) == "['boss@']"
    deny = second.comm_of_class("cortex-deny")
    assert deny is not None
    kernel.send_comm(deny, {"event": "click"})
    kernel.execute("_cortex.wait(timeout=10)")
    assert kernel.evaluate("_cortex.actions['a1'].error") == "'denied by the user'"
    assert kernel.evaluate("kt_sent") == "['boss@']"
