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
automation. ``approve_timeout`` seconds without an answer deny it, and end the question
(a terminal's ``input()`` included).

A nested agent (a named ``Agent`` run as a ``type="agent"`` action) runs under its
caller's rules with its own added (``Rules.within``): its caller's ``approve`` names and
policies hold inside it too, and its own can only ask for more. Each question names its
action by path (``agent/inner``); a host keys its answers by the run and that path.
"""

from __future__ import annotations

import builtins
import contextvars
import inspect
import os
import queue
import select
import sys
import threading
import types
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import anyio
import anyio.to_thread

from cortex_jupyter.runtime.core.values.coerce import is_bool

if TYPE_CHECKING:
    from cortex_jupyter.runtime.core.record.graph import ActionNode

__all__ = [
    "APPROVAL_MODES", "Approver", "Decision", "Rules", "Verdict", "approver_for", "ask_line",
    "terminal_ask", "under", "who",
]  # fmt: skip

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


#: One question on the terminal at a time (two ``input()`` calls would share one line).
_one_question = threading.Lock()
#: How often a waiting question looks whether it has ended (timeout, Stop).
POLL = 0.05


async def terminal_ask(node: ActionNode) -> bool:
    """Ask on the terminal, one question at a time, in a worker thread (the run goes on
    meanwhile). When the run stops waiting (``approve_timeout``, Stop) the question ends
    too: its thread leaves, so a later question is not stuck behind it."""
    ended = threading.Event()

    def ask() -> bool:
        with _one_question:
            question = f"cortex: approve action {node.id!r}: {describe(node)}? [y/N] "
            try:
                return bool(ask_line(question, ended.is_set))
            except EOFError:  # no one to ask (stdin closed): not approved
                return False

    try:
        return await anyio.to_thread.run_sync(ask, abandon_on_cancel=True)
    finally:
        ended.set()


def ask_line(question: str, ended: Callable[[], bool], poll: float = POLL) -> bool | None:
    """Ask a yes/no question on the terminal and wait for the answer, or until
    ``ended()`` (the run stopped waiting: ``approve_timeout``, Stop); ``None`` then.

    A real terminal is read with ``select``, so an ended question leaves nothing behind.
    Any other ``input()`` (a kernel's, which asks the front end; a test's) runs in a
    daemon thread that is no longer waited for once the question has ended. Raises what
    ``input()`` raised (``EOFError``: no one can answer).
    """
    if _plain_terminal():
        return _select_line(question, ended, poll)
    box: queue.SimpleQueue[tuple[bool, BaseException | None]] = queue.SimpleQueue()

    def read() -> None:
        try:
            box.put((_yes(input(question)), None))
        except BaseException as exc:  # handed to the asking thread
            box.put((False, exc))

    # A copy of the context: a kernel's input() finds the cell it answers to in it.
    context = contextvars.copy_context()
    threading.Thread(target=context.run, args=(read,), daemon=True, name="cortex-ask").start()
    while True:
        try:
            answer, error = box.get(timeout=poll)
        except queue.Empty:
            if ended():
                return None
            continue
        if error is not None:
            raise error
        return answer


def _plain_terminal() -> bool:
    """Whether ``input()`` is Python's own, reading a terminal that ``select`` can watch."""
    stdin = sys.stdin
    try:
        return (
            os.name == "posix"
            and isinstance(builtins.input, types.BuiltinFunctionType)
            and stdin is not None
            and stdin.isatty()
            and stdin.fileno() >= 0
        )
    except (AttributeError, OSError, ValueError):  # a replaced or closed stdin
        return False


def _select_line(question: str, ended: Callable[[], bool], poll: float) -> bool | None:
    sys.stdout.write(question)
    sys.stdout.flush()
    while True:
        typed = select.select([sys.stdin], [], [], poll)[0]
        # Read after the wait too: a line typed once this question ended is the next one's.
        if ended():
            sys.stdout.write("\n")
            return None
        if typed:
            break
    line = sys.stdin.readline()
    if not line:
        raise EOFError
    return _yes(line)


def _yes(line: str) -> bool:
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


@dataclass(frozen=True)
class Verdict:
    """An approval's answer and who gave it (``by``: "the user", "the rule NAME", "the
    policy approval='deny'"): false when denied, so it reads as the bool it replaces."""

    approved: bool
    by: str

    def __bool__(self) -> bool:
        return self.approved


#: Who answers when a person is asked (buttons in a notebook, ``input()``).
ASKED = "the user"


def who(approver: Approver) -> str:
    """Who ``approver`` speaks for (``_labelled``); a person when it does not say."""
    return str(getattr(approver, "cortex_who", ASKED))


def _labelled(approver: Approver, by: str) -> Approver:
    approver.cortex_who = by  # type: ignore[attr-defined]
    return approver


def rule_name(policy: Callable[..., Any]) -> str:
    """How a policy function is named in a denial: its name (``no_mass_mail``)."""
    name = getattr(policy, "__name__", None)
    return str(name) if name else type(policy).__name__


def _constant(answer: bool) -> Approver:
    async def decide(node: ActionNode) -> bool:
        return answer

    return _labelled(decide, f"the policy approval={'allow' if answer else 'deny'!r}")


def _calling(policy: Callable[[ActionNode], Any]) -> Approver:
    async def decide(node: ActionNode) -> bool:
        if inspect.iscoroutinefunction(policy):
            return _approves(await policy(node))
        # A plain function may block (it may ask someone): not on the run's loop.
        result = await anyio.to_thread.run_sync(policy, node, abandon_on_cancel=True)
        if inspect.isawaitable(result):
            result = await result
        return _approves(result)

    return _labelled(decide, f"the rule {rule_name(policy)}")


def _approves(answer: Any) -> bool:
    """An approval function's answer: True or False (numpy's too; None is a no). Anything
    else is refused, never read as truthy: ``"no"`` would approve."""
    if answer is None:
        return False
    if is_bool(answer):
        return bool(answer)
    raise TypeError(f"the approval function answered {answer!r:.60}, not True or False")


@dataclass(frozen=True)
class Rules:
    """An agent's approval rules as one value: the tools that wait (``names``, besides
    those marked ``approve=True``), the policies that must all say yes (``fixed``: allow,
    deny or functions; ``asks``: a person is asked too, through ``ask``, the host's way of
    asking, ``None`` for the terminal), and the seconds to wait (``timeout``).

    A nested agent runs under its caller's rules with its own added (``within``): it can
    name more tools, add a policy and shorten the wait, never loosen any of them, so an
    agent that must not send mail cannot have a helper agent send it.
    """

    names: frozenset[str] = frozenset()
    fixed: tuple[Approver, ...] = ()
    asks: bool = True
    timeout: float | None = None
    ask: Approver | None = None

    @classmethod
    def of(
        cls,
        policy: Policy,
        *,
        names: Collection[str] = (),
        timeout: float | None = None,
        ask: Approver | None = None,
    ) -> Rules:
        """One agent's own rules (``Agent(approve=names, approval=policy, ...)``)."""
        asks = policy == "ask"
        fixed = () if asks or policy == "allow" else (approver_for(policy),)
        return cls(frozenset(names), fixed, asks, timeout, ask)

    def within(
        self, parent: str, policy: Policy, *, names: Collection[str] = (),
        timeout: float | None = None,
    ) -> Rules:  # fmt: skip
        """The rules of a nested agent run as the action ``parent``: these, then its own.
        Its questions name their actions by path (``parent/inner``), so an answer meant
        for the caller's ``a1`` never reaches the nested run's ``a1``."""
        own = Rules.of(policy)
        return Rules(
            names=self.names | frozenset(names),
            fixed=tuple(under(parent, a) for a in self.fixed) + own.fixed,
            asks=self.asks or own.asks,
            timeout=min((t for t in (self.timeout, timeout) if t is not None), default=None),
            ask=under(parent, self.ask if self.ask is not None else terminal_ask),
        )

    def approver(self) -> Callable[[ActionNode], Awaitable[Verdict]]:
        """Yes only when every policy says yes: the fixed ones first (a ``deny`` never
        bothers the person), then, once, the person. The ``Verdict`` names who decided:
        the first that said no, else the last that said yes."""
        steps = [*self.fixed]
        if self.asks:
            steps.append(self.ask if self.ask is not None else terminal_ask)

        async def decide(node: ActionNode) -> Verdict:
            for step in steps:
                if not await step(node):
                    return Verdict(False, who(step))
            return Verdict(True, who(steps[-1]) if steps else "the policy approval='allow'")

        return decide


class _Under:
    """An action of a nested run as its caller names it: ``id`` is ``parent/inner``;
    everything else is the node's own."""

    def __init__(self, parent: str, node: ActionNode) -> None:
        self.id = f"{parent}/{node.id}"
        self._node = node

    def __getattr__(self, name: str) -> Any:
        return getattr(self._node, name)


def under(parent: str, approver: Approver) -> Approver:
    """``approver``, about a nested run's actions under their path (``researcher/a1``)."""

    async def asking(node: ActionNode) -> bool:
        return await approver(cast("ActionNode", _Under(parent, node)))

    return _labelled(asking, who(approver))
