"""View state: everything a person sees of a run, reduced from its events.

State flows one way (ARCHITECTURE.md, "Layers"): parser events and runtime events go
into ``ViewState.apply`` (or ``reduce``), renderers read the state, nothing here calls
back into the runtime. The reducer is pure apart from mutating the state it is given, so
it can be fed live from a session, replayed from a transcript (``from_run``) or driven
by hand in a test.

Three things shape it:

- **Never raise on odd input.** Events for ids nobody announced, statuses arriving out of
  order, a ``Turn`` event whose fields we have not seen yet: the state absorbs them. A
  display that crashes mid-run hides the very failure the user needs to see.
- **Per-part versions.** ``versions[part]`` goes up whenever that part changes, for the
  parts in ``PARTS``; a widget view remembers the versions it last drew and redraws only
  the parts that moved (``changed_since``). Time-dependent text (elapsed, a running
  node's duration) is not a change: ``ticking`` says when a view should redraw on a clock.
- **Stable layout.** Each top-level node gets a (layer, slot) grid position when it
  appears and keeps it: later nodes only take free slots, so the graph never jumps while
  the model is still writing. A node placed on its opening tag (before its dependencies
  are known) may move once, when its body arrives.

Nested events (an agent's sub-run, forwarded in ``Nested``) become child nodes of the
agent's node with ids ``"<parent>/<inner id>"``, so ids of different sub-runs never
collide; workflow steps are child nodes through ``ActionStatus.parent``.

Each node's own fields, and how one event changes them, are ``nodes.py``'s (``NodeView``;
what a tool writes while it runs is kept there, bounded). Every change to a node moves
its own ``version``, so a view showing one node (the inspector) knows when to redraw it
without comparing its content.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cortex_jupyter.runtime.core.record.graph import ActionNode, Graph
from cortex_jupyter.runtime.core.record.run import joined
from cortex_jupyter.runtime.core.values.variables import find_references

from .nodes import (
    Layout,
    NodeView,
    event_time,
    take_nested_text,
    take_output,
    take_status,
)
from .typed import TypedAnswer

if TYPE_CHECKING:
    from cortex_jupyter.runtime.core.record.run import Run

PARTS: tuple[str, ...] = ("header", "thought", "graph", "details", "response", "output")

# Error codes that concern an action id but not the node already shown under that id.
_NOT_THE_NODE = frozenset(("duplicate_id",))
#: The token metrics a run sums over every request (``runtime.core.cost.budget.charge``).
_TOKENS = frozenset(("prompt_tokens", "completion_tokens", "cached_tokens"))
# The header's word for a run a limit stopped, by its end status or its interrupt's reason.
_STOPPED = {
    "truncated": "truncated",
    "token limit": "truncated",
    "turn_limit": "turn limit",
    "turn limit": "turn limit",
    "budget": "budget",
    "answer did not fit": "failed",  # a typed answer that never fit its type
}


@dataclass
class Segment:
    """A stretch of the model's stream spent writing one kind of block (for the timeline).

    ``kind`` is ``thought``, ``response``, ``text`` or ``action`` (an action tag, with its
    ``id``).
    """

    kind: str
    start: float
    end: float
    id: str | None = None


@dataclass
class _Scope:
    """Where events land: the top-level run, or an agent's sub-run under node ``parent``.

    ``graph`` is the runtime's own dependency graph of that run's actions, fed the same
    actions: a node's edges are the ones the scheduler waits on, by its rule (explicit
    ids, and the latest earlier action whose ``output_key`` a ``$name`` uses).
    """

    prefix: str = ""
    parent: str | None = None
    graph: Graph = field(default_factory=Graph)


@dataclass(eq=False)
class ViewState:
    """The display's model of one run (see the module docstring).

    Construct with the model's name (and a start time, else the first event's time is
    used), then ``apply`` every event in order. Renderers read the fields and properties
    and pass their own ``now`` for anything that grows with time.
    """

    model: str = ""
    started: float | None = None
    turn: int = 1
    nodes: dict[str, NodeView] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    segments: list[Segment] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    #: The part of ``prompt_tokens`` the server read from its prompt cache (None: none).
    cached_tokens: int | None = None
    #: What the run's requests cost in US dollars, nested agents' included (None: a
    #: price is not known); ``priced`` counts them, ``free`` says why they cost nothing.
    cost: float | None = 0.0
    priced: int = 0
    free: str = ""
    final: bool | None = None
    end_status: str | None = None
    interrupted: str | None = None
    _stopped_by: str | None = field(default=None, repr=False)  # the interrupt's reason
    ended: float | None = None
    stream_open: bool = True
    clock: float | None = None
    first_text: float | None = None
    last_text: float | None = None
    text_chars: int = 0
    context_tokens: int | None = None
    context_budget: int | None = None
    context_counted: bool = False
    context_over: bool = False
    refused: dict[int, str] = field(default_factory=dict)
    #: A typed run's answer (``typed.py``): its current text goes there, not to ``body``.
    typed: TypedAnswer | None = None
    version: int = 0
    versions: dict[str, int] = field(default_factory=lambda: dict.fromkeys(PARTS, 0))
    layout: Layout = field(default_factory=Layout, repr=False)
    _thought: list[str] = field(default_factory=list, repr=False)
    _response: list[str] = field(default_factory=list, repr=False)
    _text: list[str] = field(default_factory=list, repr=False)
    _body: list[str] = field(default_factory=list, repr=False)
    _body_kind: str | None = field(default=None, repr=False)
    _answer: list[tuple[str, str]] = field(default_factory=list, repr=False)
    _block_open: dict[str, bool] = field(default_factory=dict, repr=False)
    #: An action was just taken out of the thought: the line break after it is its own
    #: (the text goes on from the line before, without an empty line where it was).
    _thought_gap: bool = field(default=False, repr=False)
    _open_tag: Segment | None = field(default=None, repr=False)
    _scopes: dict[str, _Scope] = field(default_factory=lambda: {"": _Scope()}, repr=False)
    _nested_ended: set[tuple[str, str]] = field(default_factory=set, repr=False)
    #: The rate's sums over finished turns that streamed text (see tokens_per_second),
    #: and the current turn's text span, characters and usage.
    _rate: list[float] = field(default_factory=lambda: [0.0, 0.0], repr=False)
    _turn_span: list[float] = field(default_factory=list, repr=False)
    _turn_chars: int = field(default=0, repr=False)
    _turn_usage: int | None = field(default=None, repr=False)
    _in_turn: bool = field(default=True, repr=False)  # False from a turn's end to the next

    # ---- text ---------------------------------------------------------------------

    @property
    def thought(self) -> str:
        return joined(self._thought)

    @property
    def response(self) -> str:
        """The text of the model's response blocks, one after the other."""
        return joined(self._response)

    @property
    def text(self) -> str:
        """What the model wrote outside any block."""
        return joined(self._text)

    @property
    def body(self) -> str:
        """The markdown shown as the answer: response blocks and outside text, in order.

        Only ever appended to, so an incremental markdown renderer can cache its head.
        """
        return joined(self._body)

    # ---- derived header fields ----------------------------------------------------

    @property
    def phase(self) -> str:
        """The header's state word."""
        if self.end_status == "failed":  # a failed model interrupts the run first
            return "failed"
        # A run the token limit or the turn limit stopped says so: nothing interrupted it.
        stopped = _STOPPED.get(self.end_status or "") or _STOPPED.get(self._stopped_by or "")
        if stopped is not None:
            return stopped
        if self.interrupted is not None or self.end_status in ("cancelled", "interrupted"):
            return "interrupted"
        if self.end_status is not None:
            return "done"
        if self.stream_open:
            return "streaming"
        return "running actions"

    @property
    def ticking(self) -> bool:
        """Whether something on screen changes with the clock (elapsed, running nodes)."""
        if self.end_status is None:
            return True
        return any(n.status == "running" for n in self.nodes.values())

    @property
    def estimated(self) -> bool:
        """True when the completion token count is a guess from characters (no usage yet)."""
        return self.completion_tokens is None

    @property
    def tokens(self) -> int:
        """Completion tokens: the server's count when it sent one, else ~4 chars a token."""
        if self.completion_tokens is not None:
            return self.completion_tokens
        return math.ceil(self.text_chars / 4)

    def elapsed(self, now: float | None = None) -> float:
        if "elapsed" in self.metrics and self.end_status is not None:
            return self.metrics["elapsed"]
        if self.started is None:
            return 0.0
        end = self.ended if self.ended is not None else (now if now is not None else self.clock)
        return max((end or self.started) - self.started, 0.0)

    def tokens_per_second(self, now: float | None = None) -> float | None:
        """Tokens over the time spent streaming them: each turn's text span (first to
        last text), summed; a turn of tool calls only streams no text, so neither its
        tokens nor its time count, and neither do the waits between turns."""
        tokens, seconds = self._rate
        if self._turn_span:
            first, last = self._turn_span
            end = now if self.stream_open and now is not None and now > last else last
            tokens += self._turn_tokens()
            seconds += end - first
        return tokens / seconds if seconds > 0.05 else None

    def _turn_tokens(self) -> float:
        """The current turn's tokens: the server's count once it came, else ~4 chars."""
        if self._turn_usage is not None:
            return self._turn_usage
        return math.ceil(self._turn_chars / 4)

    def _close_turn_rate(self) -> None:
        if self._turn_span:
            first, last = self._turn_span
            self._rate[0] += self._turn_tokens()
            self._rate[1] += last - first
        self._turn_span, self._turn_chars, self._turn_usage = [], 0, None

    def context(self) -> tuple[int, int, bool] | None:
        """``(tokens, budget, estimated)`` of the context the model was last sent, or None
        before the first ``context`` event: the server's count (``context_tokens``
        metric) when it sent one for that turn, else the runtime's estimate."""
        if self.context_budget is None or self.context_tokens is None:
            return None
        return self.context_tokens, self.context_budget, not self.context_counted

    def counts(self) -> dict[str, int]:
        """Top-level nodes per shown status, in a stable order."""
        out: dict[str, int] = {}
        for node_id in self.order:
            node = self.nodes[node_id]
            if node.parent is None:
                out[node.shown_status] = out.get(node.shown_status, 0) + 1
        return out

    def depth(self, node: NodeView) -> int:
        """How many shown parents ``node`` has (workflow steps, a sub-run's actions):
        its indentation; at most 8."""
        depth, parent = 0, node.parent
        while parent is not None and parent in self.nodes and depth < 8:
            depth, parent = depth + 1, self.nodes[parent].parent
        return depth

    def top_level(self) -> list[NodeView]:
        return [self.nodes[i] for i in self.order if self.nodes[i].parent is None]

    def edges(self) -> list[tuple[str, str, str]]:
        """``(from, to, kind)`` for every dependency between shown nodes; kind is
        ``depends_on`` or ``reference`` (a ``$name`` use of an earlier output)."""
        out = []
        for node_id in self.order:
            node = self.nodes[node_id]
            for dep in node.depends_on:
                if dep in self.nodes:
                    kind = "reference" if dep in node.references else "depends_on"
                    out.append((dep, node_id, kind))
        return out

    def changed_since(self, seen: Mapping[str, int]) -> set[str]:
        """The parts whose version moved past ``seen`` (a view's last drawn versions)."""
        return {part for part, v in self.versions.items() if seen.get(part, -1) != v}

    # ---- the reducer --------------------------------------------------------------

    def apply(self, event: Any, at: float | None = None) -> None:
        """Fold one event (parser or runtime) into the state; never raises on odd input.

        ``at`` is when the event was seen (``time.monotonic()``); runtime events carry
        their own ``time``, parser events need ``at`` for the timeline and tokens/s.
        """
        when = at if at is not None else event_time(event)
        if when is None:
            when = self.clock if self.clock is not None else 0.0
        if self.clock is None or when > self.clock:
            self.clock = when
        if self.started is None:
            self.started = when
        try:
            self._apply(event, when, self._scopes[""])
        except Exception as exc:  # odd input must not break the display of the run
            self.errors.append(f"display could not show a {_kind(event)} event: {exc!r}")
            self._touch("details")

    def _apply(self, event: Any, at: float, scope: _Scope) -> None:
        kind = _kind(event)
        handler = _HANDLERS.get(kind)
        if handler is not None:
            handler(self, event, at, scope)

    def _touch(self, *parts: str) -> None:
        self.version += 1
        for part in parts:
            self.versions[part] += 1

    def _changed(self, node: NodeView, *parts: str) -> None:
        """``node`` changed (its own version moves), and so did ``parts``."""
        node.version += 1
        self._touch(*parts)

    # text -------------------------------------------------------------------------

    def _on_text(self, event: Any, at: float, scope: _Scope) -> None:
        kind, text = _kind(event), str(getattr(event, "text", ""))
        if scope.parent is not None:
            self._nested_text(scope.parent, kind, text)
            return
        if not text:
            return
        self._stream_time(kind, at)
        self.text_chars += len(text)
        self._turn_chars += len(text)
        self._turn_span[:] = [self._turn_span[0] if self._turn_span else at, at]
        if kind == "thought" and self._thought_gap:
            text = self._close_gap(text)
            if not text:
                return
        if kind == "thought":
            if not self._block_open.get("thought") and self._thought:
                self._thought.append("\n\n")
            self._block_open["thought"] = True
            self._thought.append(text)
            self._touch("thought", "header")
            return
        if kind == "response":
            self._block_open["response"] = True
            self._response.append(text)
        else:
            self._text.append(text)
        if self.typed is not None:  # the answer may be the object: drawn by ``typed``
            self._answer.append((kind, text))
            self.typed.feed(text)
            self._touch("output", "header")
            return
        self._append_body(kind, text)
        self._touch("response", "header")

    def _append_body(self, kind: str, text: str) -> None:
        """Add to the answer, starting a new markdown block when the source changes."""
        new_block = kind != self._body_kind or (
            kind == "response" and not self._block_open.get("body_response")
        )
        if new_block:
            if kind == "text":
                text = text.lstrip()  # whitespace between tags is not part of an answer
                if not text:
                    return
            if self._body:
                self._body.append(_separator(self._body[-1]))
            self._body_kind = kind
            self._block_open["body_response"] = kind == "response"
        self._body.append(text)

    def _nested_text(self, parent: str, kind: str, text: str) -> None:
        node = self.nodes.get(parent)
        if node is None or kind == "text":
            return
        new_block = (parent, kind) in self._nested_ended  # a new block of the sub-run's
        self._nested_ended.discard((parent, kind))
        if take_nested_text(node, kind, text, new_block):
            self._changed(node, "graph")

    def _stream_time(self, kind: str, at: float) -> None:
        if self.first_text is None:
            self.first_text = at
        start = self.last_text if self.last_text is not None else at
        self.last_text = at
        last = self.segments[-1] if self.segments else None
        if last is not None and last.kind == kind and last.id is None:
            last.end = at
        else:
            self.segments.append(Segment(kind, start, at))

    def _on_block_end(self, event: Any, at: float, scope: _Scope) -> None:
        if scope.parent is not None:
            self._nested_ended.add((scope.parent, _kind(event).removesuffix("_end")))
            return
        kind = _kind(event)
        if kind == "thought_end":
            self._block_open["thought"] = False
            return
        self._block_open["response"] = False
        self._block_open["body_response"] = False
        final = bool(getattr(event, "final", True))
        if not final:
            self._interim()
        elif self.typed is not None:
            self._close_answer()
        self.final = final
        if final and self.stream_open:
            self.stream_open = False
            self._touch("header")

    # actions ----------------------------------------------------------------------

    def _node(self, scope: _Scope, raw_id: str, at: float, parent: str | None = None) -> NodeView:
        """The node for ``raw_id`` in ``scope``, created (and placed) when new."""
        node_id = scope.prefix + raw_id
        node = self.nodes.get(node_id)
        if node is not None:
            return node
        parent_id = scope.prefix + str(parent) if parent else scope.parent
        owner = self.nodes.get(parent_id) if parent_id is not None else None
        # A child of a node we never saw is drawn as a top-level node rather than lost.
        node = NodeView(id=node_id, parent=parent_id if owner is not None else None, seen=at)
        self.nodes[node_id] = node
        self.order.append(node_id)
        if owner is not None:
            owner.children.append(node_id)
        else:
            self.layout.place(node, ())
        return node

    def _on_action_start(self, event: Any, at: float, scope: _Scope) -> None:
        raw_id = str(getattr(event, "id", ""))
        if scope.prefix + raw_id in self.nodes:
            return  # a second tag reusing an id: the parser reports duplicate_id
        node = self._node(scope, raw_id, at)
        node.type = str(getattr(event, "type", node.type))
        node.mode = str(getattr(event, "mode", node.mode))
        node.in_thought = bool(getattr(event, "in_thought", False))
        node.streaming = True
        if scope.parent is None:
            self._interim()
            self._open_tag = Segment("action", self.last_text or at, at, raw_id)
            self.segments.append(self._open_tag)
        self._changed(node, "graph", "header")

    def _close_tag(self, raw_id: str | None, at: float, scope: _Scope) -> None:
        tag = self._open_tag
        if scope.parent is None and tag is not None and tag.id == raw_id:
            tag.end = at
            self.last_text = max(self.last_text or at, at)
            self._open_tag = None

    def _close_gap(self, text: str) -> str:
        """``text`` after an action taken out of the thought, without the line break that
        ended the action's line (when the line before it ended too)."""
        if not (self._thought and self._thought[-1].endswith("\n")):
            self._thought_gap = False
            return text
        rest = text.lstrip("\r\n")
        if rest:
            self._thought_gap = False
        return rest

    def _on_action(self, event: Any, at: float, scope: _Scope) -> None:
        action = event.action
        raw_id = str(action.id)
        self._close_tag(raw_id, at, scope)
        node = self._node(scope, raw_id, at)
        if node.name and not node.streaming:
            return  # a duplicate; the first action under this id stands
        node.name, node.type, node.mode = str(action.name), str(action.type), str(action.mode)
        node.parameters = action.parameters if isinstance(action.parameters, Mapping) else {}
        node.output_key = action.output_key
        node.in_thought = bool(action.in_thought)
        if node.in_thought and scope.parent is None:
            self._thought_gap = True
        node.streaming = False
        node.source = str(getattr(event, "source", "") or "")
        if scope.parent is None:  # the body counts towards the estimated tokens written
            self.text_chars += len(node.name) + len(repr(node.parameters)) + 40
        self._edges(node, action, scope)
        if node.parent is None and node.depends_on:
            self.layout.release(node)
            self.layout.place(node, [self.nodes[d] for d in node.depends_on if d in self.nodes])
        self._changed(node, "graph", "header")

    def _edges(self, node: NodeView, action: Any, scope: _Scope) -> None:
        """``node``'s dependencies, as the runtime's graph draws them (``_Scope``), and
        which ``$name`` made each implicit one."""
        names = sorted(find_references(node.parameters))
        owners = scope.graph.implicit_dependencies  # before this action is added
        node.refs = tuple((name, scope.prefix + o) for name in names for o in owners([name]))
        added = ActionNode(id=str(action.id), name=node.name, action=action)
        scope.graph.add(added, names, action.output_key)
        explicit = {scope.prefix + str(d) for d in action.depends_on}
        node.depends_on = tuple(scope.prefix + d for d in added.depends_on)
        node.references = tuple(d for d in node.depends_on if d not in explicit)

    def _on_error(self, event: Any, at: float, scope: _Scope) -> None:
        raw_id = getattr(event, "id", None)
        message = str(getattr(event, "message", "")) or str(getattr(event, "code", "error"))
        code = str(getattr(event, "code", ""))
        self._close_tag(raw_id, at, scope)
        source = str(getattr(event, "source", "") or "")
        if raw_id is None or code in _NOT_THE_NODE:
            where = f"{scope.parent}: " if scope.parent else ""
            if source:
                self.refused[len(self.errors)] = source
            self.errors.append(f"{where}{message}")
            self._touch("details")
            return
        node = self._node(scope, str(raw_id), at)
        node.streaming = False
        node.status, node.error = "failed", message
        if source:
            node.source = source
        node.finished = node.finished if node.finished is not None else at
        self._changed(node, "graph", "details", "header")

    def _on_status(self, event: Any, at: float, scope: _Scope) -> None:
        status = str(getattr(event, "status", "pending"))
        node = self._node(scope, str(event.id), at, getattr(event, "parent", None))
        if status == "pending" and node.final:
            return  # the runtime's bookkeeping for a node the parser already failed
        if take_status(node, event, at):
            self._changed(node, "graph", "header", "details")
        else:
            self._changed(node, "graph", "header")
        if status == "done" and node.output_key and scope.parent is None:
            self._touch("response")  # a $name in the response may now show its value

    def _on_output(self, event: Any, at: float, scope: _Scope) -> None:
        """What a running tool wrote: kept on its node, the newest of it bounded."""
        node = self._node(scope, str(event.id), at, getattr(event, "parent", None))
        if take_output(node, event):
            self._changed(node, "graph")
        else:
            node.version += 1
            self.version += 1

    def _on_context(self, event: Any, at: float, scope: _Scope) -> None:
        """What the model was sent this turn, against the context budget."""
        if scope.parent is not None:
            return
        self.context_tokens = int(getattr(event, "tokens", 0))
        self.context_budget = int(getattr(event, "budget", 0)) or None
        self.context_counted = False
        self.context_over = bool(getattr(event, "over", False))
        self._touch("header")

    # run-level --------------------------------------------------------------------

    def _on_metric(self, event: Any, at: float, scope: _Scope) -> None:
        name, value = str(event.name), float(event.value)
        target = getattr(event, "id", None)
        if name in _TOKENS and target is None and scope.parent is not None:
            self._count_tokens(name, int(value))  # a nested agent's request: the run's too
        if scope.parent is not None or target is not None:
            node = self.nodes.get(scope.prefix + str(target)) if target else None
            node = node or self.nodes.get(scope.parent or "")
            if node is not None:
                node.metrics[name] = node.metrics.get(name, 0.0) + value
                self._changed(node, "graph")
            return
        # Token metrics arrive once per request (``runtime.core.cost.budget.charge``): a run's
        # total is their sum, its nested agents' included.
        if name in _TOKENS:
            self._count_tokens(name, int(value))
        if name == "completion_tokens" and self._in_turn:
            # a turn's reply (not a summary asked between turns)
            self._turn_usage = (self._turn_usage or 0) + int(value)
        elif name == "context_tokens":  # the server's count of what this turn sent
            self.context_tokens, self.context_counted = int(value), True
        self.metrics[name] = value
        self._touch("header")

    def _count_tokens(self, name: str, count: int) -> None:
        if name == "prompt_tokens":
            self.prompt_tokens = (self.prompt_tokens or 0) + count
        elif name == "completion_tokens":
            self.completion_tokens = (self.completion_tokens or 0) + count
        else:
            self.cached_tokens = (self.cached_tokens or 0) + count
        self._touch("header")

    def _on_cost(self, event: Any, at: float, scope: _Scope) -> None:
        """One request's price: a nested agent's counts towards the run's, as it is paid."""
        usd = getattr(event, "usd", None)
        usd = float(usd) if isinstance(usd, int | float) else None
        self.cost = None if self.cost is None or usd is None else self.cost + usd
        free = str(getattr(event, "free", "") or "")
        self.free = free if free and (not self.priced or self.free == free) else ""
        self.priced += 1
        self._touch("header")

    def _on_interrupt(self, event: Any, at: float, scope: _Scope) -> None:
        if scope.parent is not None:
            return
        reason = str(getattr(event, "reason", "interrupted"))
        self._stopped_by = reason
        error = getattr(event, "error", None)
        # Said once: a reason that already names what stopped the run ("the model's
        # stream failed: ...") goes without its label in front ("stream failed").
        said = bool(error) and reason.lower() in str(error).lower()
        self.interrupted = str(error) if said else f"{reason}: {error}" if error else reason
        self.stream_open = False
        self.errors.append(f"run {self.interrupted}")
        self._touch("header", "details")

    def _on_end(self, event: Any, at: float, scope: _Scope) -> None:
        if scope.parent is not None:
            return
        self._close_answer()
        self.end_status = str(getattr(event, "status", "completed"))
        self.ended = float(getattr(event, "time", at))
        self.stream_open = False
        self._touch("header")
        # A node whose body never arrived (Stop cut the stream inside its tag) has no
        # runtime status and would be left looking live. (Other unfinished nodes are the
        # runtime's: fire_and_forget actions may still be running after the end.)
        for node in self.nodes.values():
            if node.streaming and not node.final and node.parent is None:
                node.streaming = False
                node.status = "cancelled"
                node.error = node.error or "the run ended before this action could run"
                node.finished = node.finished if node.finished is not None else self.ended
                self._changed(node, "graph", "details")

    def _on_turn(self, event: Any, at: float, scope: _Scope) -> None:
        if scope.parent is not None:
            return
        for name in ("turn", "number", "index"):
            value = getattr(event, name, None)
            if isinstance(value, int) and not isinstance(value, bool):
                self.turn = value
                break
        model = getattr(event, "model", None)
        if isinstance(model, str) and model:
            self.model = model
        self._close_turn_rate()
        self._next_answer(self.turn)
        self.stream_open = self._in_turn = True
        self._block_open.clear()
        self._touch("header")

    def _on_turn_end(self, event: Any, at: float, scope: _Scope) -> None:
        """The model finished a turn's reply; with ``results`` another turn follows."""
        if scope.parent is None:
            self._close_answer()
            self._in_turn = False
        if scope.parent is None and self.stream_open:
            self.stream_open = False
            self._touch("header")

    def _on_nested(self, event: Any, at: float, scope: _Scope) -> None:
        parent = scope.prefix + str(event.parent)
        inner = self._scopes.get(parent + "/")
        if inner is None:
            inner = self._scopes[parent + "/"] = _Scope(prefix=parent + "/", parent=parent)
        self._apply(event.event, at, inner)

    def _on_context_feed(self, event: Any, at: float, scope: _Scope) -> None:
        self.metrics["context_feeds"] = self.metrics.get("context_feeds", 0) + 1

    # a typed answer (typed.py) -------------------------------------------------------

    def _on_output_expected(self, event: Any, at: float, scope: _Scope) -> None:
        if scope.parent is not None:
            return  # a sub-run's answer is its node's output
        schema = getattr(event, "schema", None)
        self.typed = TypedAnswer(str(getattr(event, "type", "")), schema, turn=self.turn)
        self._touch("output")

    def _on_output_checked(self, event: Any, at: float, scope: _Scope) -> None:
        if scope.parent is not None or self.typed is None:
            return
        self.typed.check(event)
        self._touch("output", "header")

    def _interim(self) -> None:
        """The answer so far was an interim message (an action follows it): it is shown
        as text, like any reply's, and the answer starts again."""
        if self.typed is None or not self._answer:
            return
        for kind, text in self._answer:
            self._append_body(kind, text)
        self._answer.clear()
        self.typed.restart()
        self._touch("response", "output")

    def _close_answer(self) -> None:
        """The reply ended: a number at the answer's end is whole now."""
        if self.typed is not None and not self.typed.complete:
            self.typed.close()
            self._touch("output")

    def _next_answer(self, turn: int) -> None:
        """A new turn (a retry): the last answer's text before its JSON stays, as text;
        its object is replaced by the new answer's (its check's errors are kept)."""
        if self.typed is None:
            return
        split = self.typed.split()
        kept = split.prose if split.started else self.typed.text
        if kept.strip():
            self._block_open["body_response"] = False
            self._append_body("response", kept)
            self._touch("response")
        self._answer.clear()
        self.typed.restart(turn)
        self._touch("output")

    def close_stream(self, at: float | None = None) -> None:
        """The model's stream ended (the session knows; no event says it): the state
        word moves from "streaming" to "running actions" until the run ends."""
        if at is not None and (self.clock is None or at > self.clock):
            self.clock = at
        if self.stream_open:
            self.stream_open = False
            self._touch("header")


_HANDLERS: dict[str, Any] = {
    "thought": ViewState._on_text,
    "response": ViewState._on_text,
    "text": ViewState._on_text,
    "thought_end": ViewState._on_block_end,
    "response_end": ViewState._on_block_end,
    "action_start": ViewState._on_action_start,
    "action": ViewState._on_action,
    "error": ViewState._on_error,
    "context_feed": ViewState._on_context_feed,
    "action_status": ViewState._on_status,
    "action_output": ViewState._on_output,
    "context": ViewState._on_context,
    "metric": ViewState._on_metric,
    "cost": ViewState._on_cost,
    "interrupt": ViewState._on_interrupt,
    "end": ViewState._on_end,
    "turn": ViewState._on_turn,
    "turn_end": ViewState._on_turn_end,
    "nested": ViewState._on_nested,
    "output_expected": ViewState._on_output_expected,
    "output_checked": ViewState._on_output_checked,
}


def reduce(state: ViewState, event: Any, at: float | None = None) -> None:
    """Fold ``event`` into ``state`` (``ViewState.apply`` as a function)."""
    state.apply(event, at)


def from_run(run: Run, model: str = "") -> ViewState:
    """The view state of a recorded (or replayed) run, from its timed events."""
    state = ViewState(model=model, started=run.started)
    for event, at in zip(run.events, run.event_times, strict=False):
        state.apply(event, at)
    if run.ended is not None and state.ended is None:
        state.ended = run.ended
    return state


def _separator(before: str) -> str:
    """What makes the next text start a new markdown block after ``before``."""
    if before.endswith("\n\n"):
        return ""
    return "\n" if before.endswith("\n") else "\n\n"


def _kind(event: Any) -> str:
    return str(getattr(event, "kind", type(event).__name__))
