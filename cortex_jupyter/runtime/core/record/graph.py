"""The action graph: nodes, their statuses and the dependency bookkeeping.

Pure and synchronous: the scheduler tells the graph when actions arrive and finish,
and the graph answers which nodes became ready and which must be skipped (and why).
Three kinds of edge make an action wait:

- ``depends_on`` ids written by the model, and an implicit edge to the latest earlier
  action whose ``output_key`` the parameters reference as ``$name`` (data edges: a
  dependency that fails blocks the action, which is then skipped);
- every ``sync`` action still unfinished when an action arrives (order edges: any
  final status releases them).

An id nobody has written yet is waited for until ``resolve_missing()`` (end of the
stream); a cycle is found the moment the action that closes it arrives.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from cortex_jupyter.runtime.core.record.captured import CapturedText

if TYPE_CHECKING:
    from cortex_jupyter.protocol.events import Action
    from cortex_jupyter.runtime.core.events import Progress


class NestedRun(Protocol):
    """The record of a nested agent's run (a ``record.Run``) as its node holds it. The
    graph only keeps it, so it names no more of it than its actions; the record, which
    sits above the graph, is free to know the graph."""

    @property
    def actions(self) -> Mapping[str, ActionNode]: ...


Status = Literal["pending", "awaiting", "running", "done", "failed", "skipped", "cancelled"]
STATUSES: tuple[str, ...] = (
    "pending", "awaiting", "running", "done", "failed", "skipped", "cancelled",
)  # fmt: skip
FINAL_STATUSES: frozenset[str] = frozenset(("done", "failed", "skipped", "cancelled"))

_PAST = {"failed": "failed", "skipped": "was skipped", "cancelled": "was cancelled"}
#: Why a node that never started is skipped when its run is stopped.
NOT_STARTED = "not started: the run was stopped"


@dataclass(eq=False)
class ActionNode:
    """One action of a run and everything that happened to it.

    ``started``/``finished``/``submitted`` are ``time.monotonic()`` readings. ``parent``
    is set on the steps of a workflow. ``subrun`` holds an agent's nested run.
    ``stdout``, ``stderr``, ``logs`` and ``progress`` are what the tool wrote and
    reported while it ran (kept up to ``capture.MAX_KEPT`` characters each; ``dropped``
    counts the characters of each that were not kept), secrets redacted: ``stdout`` and
    ``stderr`` are joined before they are redacted (``captured``).
    """

    id: str
    name: str
    type: str = "tool"
    mode: str = "async"
    action: Action | None = field(default=None, repr=False)
    parent: str | None = None
    depends_on: tuple[str, ...] = ()
    waits_for: tuple[str, ...] = ()
    status: Status = "pending"
    output: Any = field(default=None, repr=False)
    error: str | None = None
    exception: BaseException | None = field(default=None, repr=False)
    submitted: float | None = None
    started: float | None = None
    finished: float | None = None
    attempts: int = 0
    note: str | None = None
    subrun: NestedRun | None = field(default=None, repr=False)
    #: The exact text the model wrote for this action (``ActionReady.source``).
    source: str = field(default="", repr=False)
    #: The parameters with every ``$name`` resolved (what the tool is called with).
    resolved: dict[str, Any] | None = field(default=None, repr=False)
    #: What the tool wrote while it ran (``runtime.scheduler.capture``), never the cell's stream.
    captured_stdout: CapturedText = field(default_factory=CapturedText, repr=False)
    captured_stderr: CapturedText = field(default_factory=CapturedText, repr=False)
    logs: list[str] = field(default_factory=list, repr=False)
    progress: Progress | None = field(default=None, repr=False)
    #: Characters of ``stdout`` / ``stderr`` / ``logs`` past ``capture.MAX_KEPT``.
    dropped: dict[str, int] = field(default_factory=dict, repr=False)

    @property
    def stdout(self) -> str:
        return self.captured_stdout.text()

    @stdout.setter
    def stdout(self, text: str) -> None:
        self.captured_stdout = CapturedText(text)

    @property
    def stderr(self) -> str:
        return self.captured_stderr.text()

    @stderr.setter
    def stderr(self, text: str) -> None:
        self.captured_stderr = CapturedText(text)

    @property
    def output_key(self) -> str | None:
        return self.action.output_key if self.action is not None else None

    @property
    def final(self) -> bool:
        return self.status in FINAL_STATUSES

    @property
    def duration(self) -> float | None:
        if self.started is None or self.finished is None:
            return None
        return self.finished - self.started


@dataclass
class Update:
    """What changed: nodes now ready to start, and nodes skipped with their reason."""

    ready: list[ActionNode] = field(default_factory=list)
    skipped: list[tuple[ActionNode, str]] = field(default_factory=list)

    def extend(self, other: Update) -> None:
        self.ready.extend(other.ready)
        self.skipped.extend(other.skipped)


class Graph:
    """Dependency bookkeeping for the top-level actions of one run."""

    def __init__(self) -> None:
        self.nodes: dict[str, ActionNode] = {}
        self._unmet: dict[str, set[str]] = {}
        self._data_dependents: defaultdict[str, list[str]] = defaultdict(list)
        self._order_dependents: defaultdict[str, list[str]] = defaultdict(list)
        self._ok: dict[str, bool] = {}
        self._output_owner: dict[str, str] = {}
        self._open_sync: dict[str, None] = {}

    def implicit_dependencies(self, references: Iterable[str]) -> list[str]:
        """Ids of earlier actions whose ``output_key`` is among ``references``."""
        return [self._output_owner[r] for r in references if r in self._output_owner]

    def add(
        self,
        node: ActionNode,
        references: Iterable[str] = (),
        output_key: str | None = None,
        *,
        ok: bool = False,
    ) -> Update:
        """Add an arriving action; ``references`` are the ``$names`` its parameters use.
        A node that arrives already final (refused, or restored when a run is resumed)
        releases its data dependents when ``ok``."""
        explicit = node.action.depends_on if node.action is not None else ()
        data = dict.fromkeys([*explicit, *self.implicit_dependencies(references)])
        node.depends_on = tuple(data)
        node.waits_for = tuple(self._open_sync)
        self.nodes[node.id] = node
        if output_key is not None:
            self._output_owner[output_key] = node.id
        if node.mode == "sync" and not node.final:
            self._open_sync[node.id] = None
        if node.final:
            return self.complete(node.id, ok=ok)
        return self._wire(node)

    def _wire(self, node: ActionNode) -> Update:
        update = Update()
        unmet: set[str] = set()
        for dep in node.depends_on:
            if dep in self._ok:
                if not self._ok[dep]:
                    update.extend(self._skip(node, self._blocked_reason(dep)))
                    return update
                continue
            unmet.add(dep)
            self._data_dependents[dep].append(node.id)
        for dep in node.waits_for:
            if dep not in self._ok and dep not in unmet:
                unmet.add(dep)
                self._order_dependents[dep].append(node.id)
        self._unmet[node.id] = unmet
        if node.id in self._data_dependents or node.id in self._order_dependents:
            cycle = self._find_cycle(node.id)
            if cycle:
                reason = "dependency cycle: " + " -> ".join(cycle)
                members = [self.nodes[m] for m in dict.fromkeys(cycle)]
                for member in members:
                    member.status, member.error = "skipped", reason
                    update.skipped.append((member, reason))
                for member in members:
                    update.extend(self.complete(member.id, ok=False))
                return update
        if not unmet:
            del self._unmet[node.id]
            update.ready.append(node)
        return update

    def complete(self, node_id: str, *, ok: bool) -> Update:
        """A node reached a final status; ``ok`` says whether data dependents may run."""
        update = Update()
        work = [(node_id, ok)]
        while work:
            done_id, done_ok = work.pop()
            self._ok[done_id] = done_ok
            self._open_sync.pop(done_id, None)
            self._unmet.pop(done_id, None)
            for dependent in self._data_dependents.pop(done_id, ()):
                node = self.nodes[dependent]
                if node.final or dependent not in self._unmet:
                    continue
                if not done_ok:
                    reason = self._blocked_reason(done_id)
                    node.status, node.error = "skipped", reason
                    update.skipped.append((node, reason))
                    work.append((dependent, False))
                else:
                    self._release(dependent, done_id, update)
            for dependent in self._order_dependents.pop(done_id, ()):
                if not self.nodes[dependent].final and dependent in self._unmet:
                    self._release(dependent, done_id, update)
        return update

    def _release(self, dependent: str, dep: str, update: Update) -> None:
        unmet = self._unmet[dependent]
        unmet.discard(dep)
        if not unmet:
            del self._unmet[dependent]
            update.ready.append(self.nodes[dependent])

    def _skip(self, node: ActionNode, reason: str) -> Update:
        node.status, node.error = "skipped", reason
        update = self.complete(node.id, ok=False)
        update.skipped.insert(0, (node, reason))
        return update

    def _blocked_reason(self, dep: str) -> str:
        node = self.nodes.get(dep)
        how = _PAST.get(node.status, "did not succeed") if node is not None else "did not succeed"
        return f"depends on {dep!r}, which {how}"

    def _find_cycle(self, start: str) -> list[str]:
        """A path start -> ... -> start along unmet edges, or [] when there is none."""
        parent: dict[str, str] = {}
        stack = [start]
        while stack:
            current = stack.pop()
            for dep in self._unmet.get(current, ()):
                if dep == start:
                    chain = [current]
                    while chain[-1] != start:
                        chain.append(parent[chain[-1]])
                    return [*reversed(chain), start]
                if dep in self._unmet and dep not in parent:
                    parent[dep] = current
                    stack.append(dep)
        return []

    def missing(self) -> dict[str, list[str]]:
        """Ids waited for that never arrived -> the ids of the nodes waiting for them."""
        return {
            dep: [w for w in waiters if w in self._unmet]
            for dep, waiters in self._data_dependents.items()
            if dep not in self.nodes and any(w in self._unmet for w in waiters)
        }

    def resolve_missing(self) -> Update:
        """End of the stream: actions waiting for ids that never appeared are skipped."""
        update = Update()
        for dep, waiters in self.missing().items():
            del self._data_dependents[dep]
            for waiter in waiters:
                node = self.nodes[waiter]
                if not node.final:
                    update.extend(
                        self._skip(node, f"depends on {dep!r}, which never appeared in the stream")
                    )
        return update

    @property
    def waiting(self) -> list[str]:
        """Ids of nodes still waiting for a dependency."""
        return list(self._unmet)
