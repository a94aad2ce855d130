"""Approval before tools that act on the world (send an email, delete a file, spend money).

A tool registered with ``approve=True`` (an MCP tool marked ``destructiveHint``, or a name
in ``Agent(approve={...})``) does not start when its closing tag arrives: its node waits in
the status ``awaiting``, showing its resolved parameters, until the approval policy says
yes. Denied, it ends ``skipped`` with the reason, its dependents are skipped, and the
model reads that in its results. Actions that do not depend on it go on meanwhile; Stop
cancels a waiting approval like any running action.

The policy (``Agent(approval=...)``, ``%config CortexMagics.approve``) is ``"ask"`` (the
host asks the person: buttons on the node in a notebook, ``input()`` in a terminal),
``"allow"``, ``"deny"``, or a callable ``(node) -> bool`` (sync or async) for tests and
automation. ``approve_timeout`` seconds without an answer deny it.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread

if TYPE_CHECKING:
    from .graph import ActionNode

__all__ = ["APPROVAL_MODES", "Approver", "Decision", "approver_for", "terminal_ask"]

#: A way to ask: given the waiting node, the answer (True: run it).
Approver = Callable[["ActionNode"], Awaitable[bool]]
APPROVAL_MODES = ("ask", "allow", "deny")
Policy = str | Callable[["ActionNode"], Any]


class Decision:
    """One pending question, answered from another thread (a button click in the cell's
    thread); the runtime polls it, so a cancelled run leaves no thread behind."""

    def __init__(self) -> None:
        self.answer: bool | None = None

    def set(self, approved: bool) -> None:
        if self.answer is None:
            self.answer = bool(approved)

    async def wait(self, poll: float = 0.02) -> bool:
        while self.answer is None:
            await anyio.sleep(poll)
        return self.answer


def describe(node: ActionNode) -> str:
    """What the person is asked about: the tool and its resolved parameters."""
    params = ", ".join(f"{k}={v!r}" for k, v in (node.resolved or {}).items())
    return f"{node.name}({params})"


_one_question = threading.Lock()


async def terminal_ask(node: ActionNode) -> bool:
    """Ask on the terminal (``input()`` in a worker thread: the run goes on meanwhile),
    one question at a time."""

    def ask() -> bool:
        with _one_question:
            return _ask_line(node)

    return await anyio.to_thread.run_sync(ask, abandon_on_cancel=True)


def _ask_line(node: ActionNode) -> bool:
    try:
        line = input(f"cortex: approve action {node.id!r}: {describe(node)}? [y/N] ")
    except EOFError:  # no one to ask (stdin closed): not approved
        return False
    return line.strip().lower() in ("y", "yes")


def approver_for(policy: Policy, ask: Approver | None = None) -> Approver:
    """The approver a policy means; ``ask`` is the host's way of asking a person (the
    terminal's ``input()`` when the host has none)."""
    if callable(policy):
        return _calling(policy)
    if policy == "allow":
        return _constant(True)
    if policy == "deny":
        return _constant(False)
    if policy == "ask":
        return ask if ask is not None else terminal_ask
    raise ValueError(
        f"approval must be 'ask', 'allow', 'deny' or a function (node) -> bool; got {policy!r}"
    )


def _constant(answer: bool) -> Approver:
    async def decide(node: ActionNode) -> bool:
        return answer

    return decide


def _calling(policy: Callable[[ActionNode], Any]) -> Approver:
    async def decide(node: ActionNode) -> bool:
        if inspect.iscoroutinefunction(policy):
            return bool(await policy(node))
        # A plain function may block (it may ask someone): not on the run's loop.
        result = await anyio.to_thread.run_sync(policy, node, abandon_on_cancel=True)
        if inspect.isawaitable(result):
            result = await result
        return bool(result)

    return decide
