"""One action as the display knows it: its node, the events that change it, its place.

Apart from ``state.py`` (the run-level view: text, header, timeline, the order of
nodes) because this is the per-node half of the reducer: each function here takes one
``NodeView`` and the event for it and changes that node alone, so the rules of a node
(what a status event brings, how much of a tool's output is kept, how a nested agent's
text is cut) read in one place. The node's status vocabulary is the runtime's
(``runtime.core.record.graph``: ``FINAL_STATUSES``); the view adds only "starting", a node whose
body is still streaming.

What a tool writes while it runs (``ActionOutput``: stdout, stderr, log lines, progress,
a generator's partial value) is kept on its node, bounded (the newest ``KEEP_TEXT``
characters of each stream, ``KEEP_LOG_LINES`` log lines): the view shows the latest of it
live, and the run record (``_cortex.actions[id]``) keeps all of it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from cortex_jupyter.runtime.core.events import Progress
from cortex_jupyter.runtime.core.record.graph import FINAL_STATUSES
from cortex_jupyter.runtime.core.trust import secrets

#: Characters of a nested agent's thought and of its response a node keeps.
MAX_NESTED_TEXT = 4000
#: Characters of a node's captured stdout and of its stderr the view keeps (the newest).
KEEP_TEXT = 16_000
#: Log lines (logging records, warnings) a node keeps for the view (the newest).
KEEP_LOG_LINES = 200
_LAST_LINE = 200
_LAST_LINE_WINDOW = 8192  # characters at the end of a batch its last line is looked for in


@dataclass
class NodeView:
    """One action as the display knows it.

    ``status`` is one of the runtime's node statuses; ``streaming`` is true from the
    opening tag until the body arrives (shown as "starting"). Times are
    ``time.monotonic()`` readings: ``seen`` when the node first appeared, ``started`` /
    ``finished`` from the runtime. ``depends_on`` holds every dependency (explicit and
    ``$name`` ones), ``references`` just the implicit ``$name`` ones, and ``refs`` which
    ``$name`` made each of those edges (``("page_3", "f3")``).

    ``parameters`` are the ones the model wrote (``$name`` unresolved); ``resolved`` is
    the runtime's short JSON of what the tool is called with. ``source`` is the exact
    text the model wrote for the action (or, for a refused one, the refused text).
    ``stdout`` / ``stderr`` / ``logs`` are the newest of what the tool wrote (``dropped``
    counts the characters or lines let go), ``progress`` its last report, ``partial`` a
    generator's latest value, ``last_line`` the newest line of any of them. ``attempts``
    lists each failed attempt with its error.
    """

    # What the model wrote.
    id: str
    name: str = ""
    type: str = "tool"
    mode: str = "async"
    parameters: Mapping[str, Any] = field(default_factory=dict)
    output_key: str | None = None
    in_thought: bool = False
    source: str = ""
    # Where it sits: its edges (the runtime graph's), its family, its grid place.
    depends_on: tuple[str, ...] = ()
    references: tuple[str, ...] = ()
    refs: tuple[tuple[str, str], ...] = ()
    parent: str | None = None
    children: list[str] = field(default_factory=list)
    layer: int | None = None
    slot: int | None = None
    # What happened to it (a runtime status, ``runtime.core.record.graph.STATUSES``), and when.
    status: str = "pending"
    streaming: bool = False
    resolved: str | None = None
    error: str | None = None
    output: str | None = None
    note: str | None = None
    attempt: int = 0
    attempts: list[tuple[int, str]] = field(default_factory=list)
    retry_in: float | None = None
    retry_error: str | None = None
    seen: float | None = None
    awaited: float | None = None
    started: float | None = None
    finished: float | None = None
    # What it wrote and measured while it ran (an agent: its sub-run's text).
    stdout: str = ""
    stderr: str = ""
    logs: list[str] = field(default_factory=list)
    dropped: dict[str, int] = field(default_factory=dict)
    progress: Progress | None = None
    partial: str | None = None
    last_line: str = ""
    metrics: dict[str, float] = field(default_factory=dict)
    thought: str = ""
    response: str = ""
    version: int = 0

    @property
    def shown_status(self) -> str:
        """The status word drawn on the node ("starting" while its body streams)."""
        return "starting" if self.streaming and self.status == "pending" else self.status

    @property
    def label(self) -> str:
        return self.name or self.id

    @property
    def final(self) -> bool:
        return self.status in FINAL_STATUSES

    def duration(self, now: float | None) -> float | None:
        """Run time so far: started to finished, or to ``now`` while running."""
        if self.started is None:
            return None
        end = self.finished if self.finished is not None else now
        return None if end is None else max(end - self.started, 0.0)


class Layout:
    """Append-only grid placement: longest-path layers, barycentre slots.

    A node's layer is one more than the deepest placed dependency; its slot is the free
    slot nearest the mean slot of those dependencies (the barycentre heuristic, applied
    once per node as it arrives instead of over the whole graph, which would move nodes).
    """

    def __init__(self) -> None:
        self._taken: dict[int, set[int]] = {}

    def place(self, node: NodeView, deps: Iterable[NodeView]) -> None:
        placed = [d for d in deps if d.layer is not None and d.slot is not None]
        layer = 1 + max((d.layer for d in placed if d.layer is not None), default=-1)
        slots = [d.slot for d in placed if d.slot is not None]
        target = round(sum(slots) / len(slots)) if slots else 0
        taken = self._taken.setdefault(layer, set())
        slot = _nearest_free(taken, target)
        taken.add(slot)
        node.layer, node.slot = layer, slot

    def release(self, node: NodeView) -> None:
        if node.layer is not None and node.slot is not None:
            self._taken.get(node.layer, set()).discard(node.slot)
        node.layer = node.slot = None


def _nearest_free(taken: set[int], target: int) -> int:
    for distance in range(len(taken) + 1):
        for slot in (target - distance, target + distance):
            if slot >= 0 and slot not in taken:
                return slot
    return max(taken, default=-1) + 1  # unreachable: len(taken)+1 candidates above


def take_status(node: NodeView, event: Any, at: float) -> bool:
    """Fold an ``action_status`` event into ``node``; returns whether what the details
    list shows of it changed."""
    status = str(getattr(event, "status", "pending"))
    name, type_ = getattr(event, "name", None), getattr(event, "type", None)
    if name and (not node.name or node.name == "?"):
        node.name = str(name)
    if type_:
        node.type = str(type_)
    before = details_key(node)
    node.status = status
    node.attempt = int(getattr(event, "attempt", 0) or node.attempt)
    note = getattr(event, "note", None)
    if note:
        node.note = str(note)
    parameters = getattr(event, "parameters", None)
    if parameters:
        node.resolved = str(parameters)
    when = event_time(event)
    _status_fields(node, event, status, at if when is None else when)
    return details_key(node) != before


def _status_fields(node: NodeView, event: Any, status: str, when: float) -> None:
    error = getattr(event, "error", None)
    if status == "awaiting":
        node.streaming = False
        node.awaited = when
    elif status == "running":
        node.streaming = False
        if node.started is None:
            node.started = when
        node.retry_in = getattr(event, "retry_in", None)
        node.retry_error = str(error) if error else None
        if error:  # the attempt before this one failed
            _add_attempt(node, max(node.attempt, 1), str(error))
    elif status in FINAL_STATUSES:
        node.streaming = False
        node.finished = when
        node.retry_in = node.retry_error = None
        if status == "done":
            node.error = None
        elif error:
            node.error = str(error)
            if status == "failed" and node.attempt:
                _add_attempt(node, node.attempt, node.error)
        output = getattr(event, "output", None)
        if output is not None:
            node.output = str(output)


def take_output(node: NodeView, event: Any) -> bool:
    """What a running tool wrote (an ``action_output`` event), kept on ``node``, the
    newest of it bounded; returns whether its box in the graph changed (it shows the
    newest line and the progress; the rest is the inspector's)."""
    shown = (node.last_line, node.progress)
    for stream in ("stdout", "stderr"):
        text = str(getattr(event, stream, "") or "")
        if text:
            kept = getattr(node, stream) + text
            if len(kept) > KEEP_TEXT:
                node.dropped[stream] = node.dropped.get(stream, 0) + len(kept) - KEEP_TEXT
                kept = secrets.tail(kept, KEEP_TEXT)  # no part of a secret at the cut
            setattr(node, stream, kept)
            node.last_line = _last_line(text) or node.last_line
    logs = [str(line) for line in getattr(event, "logs", ()) or ()]
    if logs:
        node.logs.extend(logs)
        extra = len(node.logs) - KEEP_LOG_LINES
        if extra > 0:
            node.dropped["logs"] = node.dropped.get("logs", 0) + extra
            del node.logs[:extra]
        node.last_line = _last_line(logs[-1]) or node.last_line
    progress = getattr(event, "progress", None)
    if isinstance(progress, Progress):
        node.progress = progress
    partial = getattr(event, "partial", None)
    if partial is not None:
        node.partial = str(partial)
        node.last_line = _last_line(node.partial) or node.last_line
    return (node.last_line, node.progress) != shown


def take_nested_text(node: NodeView, kind: str, text: str, new_block: bool) -> bool:
    """A nested agent's thought or response, added to its agent's ``node`` (a new
    block of it a paragraph), up to ``MAX_NESTED_TEXT``; returns whether it was."""
    if new_block and str(getattr(node, kind, "")):
        text = "\n\n" + text
    if kind == "thought" and len(node.thought) < MAX_NESTED_TEXT:
        node.thought = _nested_kept(node.thought + text)
    elif kind == "response" and len(node.response) < MAX_NESTED_TEXT:
        node.response = _nested_kept(node.response + text)
    else:
        return False
    return True


def details_key(node: NodeView) -> tuple[Any, ...]:
    """What of a node the details list shows: a change here redraws the list."""
    return (node.final and node.status, node.error, node.note, node.retry_error)


def _add_attempt(node: NodeView, attempt: int, error: str) -> None:
    if (attempt, error) not in node.attempts:
        node.attempts.append((attempt, error))


def _nested_kept(text: str) -> str:
    """A nested agent's text as kept: past the limit no more is added, so its end is a
    cut (secrets redacted, none of one left at it)."""
    if len(text) < MAX_NESTED_TEXT:
        return text
    return secrets.hide_edges(secrets.redact(text), start=False)


def _last_line(text: str) -> str:
    """The newest non-blank line of ``text`` (a piece of a stream, which may start or
    end inside a secret), cut for a box in the graph; no part of a secret shown. Looked
    for in the text's last ``_LAST_LINE_WINDOW`` characters first (a batch of output may
    be a MiB: redacting and splitting all of it for its last line cost 10 ms a batch),
    past that window's first line (which may have begun before it)."""
    if len(text) > _LAST_LINE_WINDOW:
        window = secrets.hide_edges(secrets.redact(text[-_LAST_LINE_WINDOW:]))
        for line in reversed(window.splitlines()[1:]):
            if line.strip():
                return secrets.head(line.strip(), _LAST_LINE)
    for line in reversed(secrets.hide_edges(secrets.redact(text)).splitlines()):
        if line.strip():
            return secrets.head(line.strip(), _LAST_LINE)
    return ""


def event_time(event: Any) -> float | None:
    """The time a runtime event carries (parser events carry none)."""
    value = getattr(event, "time", None)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
