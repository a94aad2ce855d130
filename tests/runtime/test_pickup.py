"""``Agent.resume`` and ``runtime.loop.pickup``: what a stopped run keeps, what runs again.

``record.kept`` is the one rule (an action that ended on its own is kept; one the stop
caught, or whose output is only a stand-in, runs again); a question that was waiting for
an approval is asked again; a plain run resumed twice is not run a third time.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from cortex_jupyter import Agent, Registry, Run
from cortex_jupyter.models import ScriptModel
from cortex_jupyter.runtime.core.record.graph import NOT_STARTED, ActionNode
from cortex_jupyter.runtime.core.record.run import OutputRepr, kept
from cortex_jupyter.runtime.loop.pickup import plan

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    ("status", "error", "output", "keep"),
    [
        ("done", None, {"v": 1}, True),
        ("done", None, None, True),
        ("done", None, OutputRepr("<a lock>"), False),  # a stand-in: made again
        ("failed", "boom", None, True),
        ("skipped", "denied by the user", None, True),
        ("skipped", NOT_STARTED, None, False),
        ("skipped", "depends on 'a', which was cancelled", None, False),
        ("cancelled", "cancelled: the run was stopped", None, False),
        ("running", None, None, False),
        ("awaiting", None, None, False),
        ("pending", None, None, False),
    ],
)
def test_what_a_resumed_run_keeps(status: str, error: str | None, output: Any, keep: bool) -> None:
    node = ActionNode("a", "tool", status=status, error=error, output=output)  # type: ignore[arg-type]
    assert kept(node) is keep


SCRIPT = [
    '<action id="p">{"name": "pay", "parameters": {"amount": 5}, "output_key": "paid"}</action>',
    "<response>Paid $paid.</response>",
]


async def test_an_approval_that_was_waiting_is_asked_again() -> None:
    tools = Registry()
    paid: list[int] = []
    asked: list[str] = []

    @tools.tool(approve=True)
    def pay(amount: int) -> int:
        """Pay an amount."""
        paid.append(amount)
        return amount

    async def first_person(node: ActionNode) -> bool:
        asked.append(node.id)
        await anyio.sleep(30)  # nobody answers: the run is stopped meanwhile
        return True

    async def second_person(node: ActionNode) -> bool:
        asked.append(node.id)
        return True

    run = Run()
    with anyio.move_on_after(0.5):
        agent = Agent(model=ScriptModel(SCRIPT), registry=tools, approval=first_person)
        await agent.run("Pay 5", run=run)
    assert run.actions["p"].status == "cancelled" and paid == []
    assert plan(run).turn == 1

    again = Agent(model=ScriptModel(SCRIPT), registry=tools, approval=second_person)
    resumed = await again.resume(run)
    assert resumed is run and run.status == "completed"
    assert asked == ["p", "p"] and paid == [5]
    assert run.answer == "Paid 5."
    # The record holds both: the wait that was stopped, then the one answered.
    statuses = [e.status for e in run.events if e.kind == "action_status" and e.id == "p"]
    assert statuses.count("awaiting") == 2 and statuses[-1] == "done"
    assert sum(e.kind == "turn" for e in run.events) == 2  # turn 1 was not asked again


async def test_a_finished_turn_between_turns_is_neither_asked_nor_run_again() -> None:
    """Stopped after turn 1's results were sent: resume asks turn 2 only."""
    tools = Registry()
    called: list[int] = []

    @tools.tool
    def double(x: int) -> int:
        """Double x."""
        called.append(x)
        return x * 2

    script = [
        '<action id="d">{"name": "double", "parameters": {"x": 4}, "output_key": "dd"}</action>',
        "<response>It is $dd.</response>",
    ]
    first = ScriptModel(script)
    run = Run()
    await Agent(model=first, registry=tools, max_turns=1).run("Double 4", run=run)
    assert run.status == "turn_limit" and called == [4]

    second = ScriptModel(script)
    await Agent(model=second, registry=tools, max_turns=1).resume(run)
    assert (run.status, run.answer, called) == ("completed", "It is 8.", [4])
    assert second.turns_used == 2  # only turn 2 was streamed
    assert run.variables == {"dd": 8}
