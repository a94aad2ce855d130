"""Approval questions of running actions, answered from the cell's thread.

Its own module because both the run (which asks, on its loop) and the views (which
answer: a button, or ``input()`` in the text view) hold it, and it is the one piece of
a session that several threads touch at once.
"""

from __future__ import annotations

import threading
from typing import Any

from cortex_jupyter.runtime.scheduler.approval import Approver, Decision


class Approvals:
    """The approval questions of running actions, answered from the cell's thread: a
    button in the view, or ``input()`` in the text view.

    A question is keyed by its run and its node's path in that run (``agent/inner`` for a
    nested agent's action), never by the action id alone: two cells' ``a1`` are two
    questions, and a row answers only the one it shows. A question that has ended (its
    node was answered, timed out or was stopped, or its run ended) takes no answer.
    """

    def __init__(self) -> None:
        self._pending: dict[tuple[str, str], Decision] = {}
        #: Answers given before their question was registered (the node's "awaiting"
        #: reaches the view just before the run starts waiting): kept for it.
        self._early: dict[tuple[str, str], bool] = {}
        self._ended: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    def asker(self, run_id: str) -> Approver:
        """``RunHooks.ask`` for the run ``run_id``."""

        async def ask(node: Any) -> bool:  # the run's loop
            return await self._ask((run_id, str(node.id)))

        return ask

    async def _ask(self, key: tuple[str, str]) -> bool:
        decision = Decision()
        with self._lock:
            self._ended.discard(key)
            self._pending[key] = decision
            early = self._early.pop(key, None)
        if early is not None:
            decision.set(early)
        try:
            return await decision.wait()
        finally:
            with self._lock:
                if self._pending.get(key) is decision:
                    del self._pending[key]
                self._ended.add(key)

    def answer(self, run_id: str, node_id: str, approved: bool) -> bool:  # any thread
        """Answer the question about ``node_id`` of the run ``run_id``; False when it has
        ended (already answered, timed out, or the run was stopped)."""
        key = (run_id, node_id)
        with self._lock:
            decision = self._pending.get(key)
            if decision is None:
                if key in self._ended:
                    return False
                self._early[key] = bool(approved)
                return True
        decision.set(approved)
        return True

    def asked(self, run_id: str, node_id: str) -> bool:
        """Whether the question about ``node_id`` of ``run_id`` was put (waiting or ended)."""
        with self._lock:
            key = (run_id, node_id)
            return key in self._pending or key in self._ended

    def ended(self, run_id: str, node_id: str) -> bool:
        """Whether the question about ``node_id`` of ``run_id`` was asked and has ended."""
        with self._lock:
            return (run_id, node_id) in self._ended

    def waiting(self) -> list[tuple[str, str]]:
        with self._lock:
            return list(self._pending)
