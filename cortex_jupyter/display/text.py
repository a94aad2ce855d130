"""Plain text: the run streamed to a terminal, and a final text/plain summary.

For front ends without widgets (a terminal IPython, a script, a log) the stream reads
as it happens: thought and response text as they arrive, and one line per action status
change (``[running] search (a1)``, ``[done 0.42 s] search (a1) -> {...}``). What a tool
prints, logs or reports while it runs goes on lines of its own under its node, each
prefixed with the node's id and a mark (``|`` stdout, ``!`` stderr, ``~`` a log line or
warning, ``%`` progress, ``>`` a generator's latest value), never into the middle of
the streamed text. Control characters the model or a tool wrote are replaced, so that
text cannot drive the terminal (ANSI escapes) or break a log line.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from cortex_jupyter.runtime.core.cost.prices import fmt_usd
from cortex_jupyter.runtime.core.values.answer import fill_references

from .nodes import NodeView
from .state import ViewState
from .theme import clean, fmt_count, fmt_duration, fmt_k, shorten, style_for
from .typed import typed_shows, typed_text

_OUTPUT_CHARS = 120
#: A status line waits for the streaming text's line to end; past this many characters
#: on one line it goes out at the next space (the line is broken there).
_HOLD_COLUMNS = 160
_BLOCK_LABELS = {"thought": "[thought] ", "response": "[response] "}
#: Progress and partial-value lines of one action: at most one a second (and the last).
_REPORT_INTERVAL = 1.0
_MARKS = {"stdout": "|", "stderr": "!", "logs": "~", "progress": "%", "partial": ">"}


def header_parts(state: ViewState, now: float | None = None) -> list[str]:
    """The header's fields: model, turn, state word, elapsed, tokens, tokens/s, counts."""
    parts = [clean(state.model) or "model"]
    if state.turn > 1:
        parts.append(f"turn {state.turn}")
    parts.append(state.phase)
    parts.append(fmt_duration(state.elapsed(now)))
    tokens = f"{'~' if state.estimated else ''}{fmt_count(state.tokens)} tokens"
    if state.prompt_tokens is not None:
        cached = f", {fmt_count(state.cached_tokens)} cached" if state.cached_tokens else ""
        tokens += f" ({fmt_count(state.prompt_tokens)} in{cached})"
    parts.append(tokens)
    if state.priced:
        parts.append(cost_text(state))
    rate = state.tokens_per_second(now)
    if rate is not None:
        parts.append(f"{rate:.0f} tok/s")
    context = state.context()
    if context is not None:
        used, budget, estimated = context
        over = " (over)" if state.context_over or used > budget else ""
        parts.append(f"ctx {'~' if estimated else ''}{fmt_k(used)}/{fmt_k(budget)}{over}")
    counts = state.counts()
    if counts:
        parts.append(", ".join(f"{n} {status}" for status, n in counts.items()))
    return parts


def cost_text(state: ViewState) -> str:
    """The run's cost as the header shows it: ``$0.0004``; ``cost unknown`` when a price
    is not known (never $0); ``$0 (local)``, ``$0 (no model)`` for what costs nothing."""
    if state.cost is None:
        return "cost unknown"
    if state.cost == 0 and state.free:
        return f"$0 ({state.free})"
    return fmt_usd(state.cost)


def status_line(node: NodeView, depth: int = 0) -> str:
    """One line for a node's current status, as the stream prints it."""
    who = f"{clean(node.label)} ({clean(node.id)})"
    duration = fmt_duration(node.duration(None))
    pad = "  " * depth
    if node.status == "running" and node.retry_error:
        wait = f" in {node.retry_in:.2f} s" if node.retry_in is not None else ""
        return f"{pad}[retry{wait}] {who}: {_one_line(node.retry_error)}"
    if node.status == "done":
        out = f" -> {_one_line(node.output, _OUTPUT_CHARS)}" if node.output is not None else ""
        return f"{pad}[done {duration}] {who}{out}"
    if node.status in ("failed", "skipped", "cancelled"):
        timing = f" {duration}" if duration and node.status != "skipped" else ""
        reason = f": {_one_line(node.error)}" if node.error else ""
        return f"{pad}[{node.status}{timing}] {who}{reason}"
    if node.status == "awaiting":
        params = f": {_one_line(node.resolved, _OUTPUT_CHARS)}" if node.resolved else ""
        return f"{pad}[awaiting approval] {who}{params}"
    return f"{pad}[{node.status}] {who}"


def _one_line(text: str | None, limit: int = 500) -> str:
    return shorten(clean(text or ""), limit)


class TextRenderer:
    """Writes a run to ``write`` as its events arrive (see the module docstring).

    ``feed(event, at)`` takes parser and runtime events; it keeps its own ``ViewState``
    (``.state``) to know node names and timings.
    """

    def __init__(
        self, write: Callable[[str], None], state: ViewState | None = None, model: str = ""
    ) -> None:
        self.state = state if state is not None else ViewState(model=model)
        self._write = write
        self._block: str | None = None
        self._at_line_start = True
        self._column = 0  # characters written since the last line break
        self._held: list[str] = []  # status lines waiting for the text's line to end
        self._last_line: dict[str, str] = {}  # node id -> its last status line
        self._open_lines: dict[tuple[str, str], str] = {}  # (node, stream) -> unended line
        self._reported: dict[tuple[str, str], float] = {}  # (node, progress|partial) -> when
        self._unreported: dict[tuple[str, str], str] = {}  # held back by the interval
        self._noted: dict[str, str] = {}  # node id -> the note its line said

    def feed(self, event: Any, at: float | None = None) -> None:
        self.state.apply(event, at)
        inner, prefix, depth = _unwrap(event)
        kind = getattr(inner, "kind", "")
        if depth == 0 and kind in ("thought", "response", "text"):
            self._text(kind, str(getattr(inner, "text", "")))
        elif depth == 0 and kind in ("thought_end", "response_end"):
            self._release()
            self._block = None
        elif depth == 0 and kind == "turn":
            self._end_line()  # a turn's text never runs on into the next turn's
        elif kind == "action_status":
            node = self.state.nodes.get(prefix + str(getattr(inner, "id", "")))
            if node is not None and node.final:
                self._flush_output(node)
            if node is not None and self._worth_a_line(node, inner):
                self._node_line(node)
        elif kind == "action_output":
            node = self.state.nodes.get(prefix + str(getattr(inner, "id", "")))
            if node is not None:
                self._output(node, inner, self.state.clock or 0.0)
        elif kind == "error":
            self._error(inner, prefix, depth)
        elif depth == 0 and kind == "interrupt":
            self._release()
            self._line(f"[{self.state.phase}] {clean(self.state.interrupted or '')}")
        elif depth == 0 and kind == "end":
            for node in list(self.state.nodes.values()):
                self._flush_output(node)
            self._release()
            self._line("[end] " + " · ".join(header_parts(self.state)))

    def _worth_a_line(self, node: NodeView, event: Any) -> bool:
        note = getattr(event, "note", None)
        if note and self._noted.get(node.id) != note:  # once, however many events carry it
            self._noted[node.id] = note
            self._line(f"[note] {clean(node.label)} ({clean(node.id)}): {_one_line(node.note)}")
        # "pending" is bookkeeping (every node starts there); a first "running" after a
        # retry wait repeats what the retry line said.
        status = getattr(event, "status", "")
        return status != "pending" and not (
            status == "running" and node.attempt > 1 and not getattr(event, "error", None)
        )

    def _error(self, event: Any, prefix: str, depth: int) -> None:
        raw_id = getattr(event, "id", None)
        node = self.state.nodes.get(prefix + str(raw_id)) if raw_id is not None else None
        message = _one_line(str(getattr(event, "message", "")))
        if node is not None and node.status == "failed" and node.error == str(event.message):
            self._node_line(node)
        else:
            self._line("  " * depth + f"[error] {message}")

    def _node_line(self, node: NodeView) -> None:
        """A node's status line, unless it says exactly what its last one said (the
        parser and the runtime both report an action the parser rejected)."""
        line = status_line(node, self.state.depth(node))
        if self._last_line.get(node.id) != line:
            self._last_line[node.id] = line
            self._line(line)

    # ---- what tools wrote ---------------------------------------------------------

    def _output(self, node: NodeView, event: Any, at: float) -> None:
        """Lines a tool wrote, under its node: whole lines only (the rest waits for its
        line break or the node's end); progress and partial values at most once a
        second each."""
        for stream in ("stdout", "stderr"):
            text = str(getattr(event, stream, "") or "")
            if text:
                key = (node.id, stream)
                lines = (self._open_lines.pop(key, "") + text).split("\n")
                if lines[-1]:
                    self._open_lines[key] = lines[-1]
                self._captured_lines(node, stream, lines[:-1])
        for entry in getattr(event, "logs", ()) or ():
            for line in str(entry).splitlines() or [""]:
                self._captured(node, "logs", line)
        progress = getattr(event, "progress", None)
        if progress is not None:
            final = progress.total is not None and progress.done >= progress.total
            self._report(node, "progress", str(progress), at, force=final)
        partial = getattr(event, "partial", None)
        if partial is not None:
            self._report(node, "partial", str(partial), at)

    def _report(self, node: NodeView, what: str, text: str, at: float, force: bool = False) -> None:
        key = (node.id, what)
        last = self._reported.get(key)
        if force or last is None or at - last >= _REPORT_INTERVAL:
            self._reported[key] = at
            self._unreported.pop(key, None)
            self._captured(node, what, text)
        else:
            self._unreported[key] = text

    def _flush_output(self, node: NodeView) -> None:
        """The node ended: what it wrote without a final line break, and its last
        progress or value if the interval held it back, go out before its status."""
        for stream in ("stdout", "stderr"):
            rest = self._open_lines.pop((node.id, stream), None)
            if rest:
                self._captured(node, stream, rest)
        for what in ("progress", "partial"):
            held = self._unreported.pop((node.id, what), None)
            if held is not None:
                self._captured(node, what, held)

    def _captured_lines(self, node: NodeView, what: str, lines: list[str]) -> None:
        """Whole lines a tool wrote, as ``_captured`` writes each, in one write (a tool
        may print 100,000 lines: one batch of them is one text, not a call a line)."""
        if not lines:
            return
        if len(lines) == 1 or (not self._at_line_start and self._block is not None):
            for line in lines:  # held after the text line being written, one by one
                self._captured(node, what, line)
            return
        head = f"{'  ' * (self.state.depth(node) + 1)}{clean(node.id)} {_MARKS[what]} "
        # ``clean`` keeps line breaks and replaces a character by one: once for all.
        body = clean("\n".join(line.rstrip() for line in lines))
        if not self._at_line_start:
            self._emit("\n")
        self._emit(head + body.replace("\n", "\n" + head) + "\n")
        self._block = None if self._block == "text" else self._block

    def _captured(self, node: NodeView, what: str, text: str) -> None:
        pad = "  " * (self.state.depth(node) + 1)
        self._line(f"{pad}{clean(node.id)} {_MARKS[what]} {clean(text.rstrip())}")

    def _text(self, kind: str, text: str) -> None:
        if not text:
            return
        if self._block != kind:
            self._release()
            self._block = kind
            # A new block starts on a line of its own (an answer after a thought too).
            if not self._at_line_start:
                self._emit("\n")
            label = _BLOCK_LABELS.get(kind)
            if label is not None:
                self._emit(label)
        text = clean(text)
        if self._held:
            # Status lines go out where the text's line ends (or, on a very long line,
            # at a space), never in the middle of a word.
            cut = text.rfind("\n") + 1
            if not cut and self._column + len(text) > _HOLD_COLUMNS:
                cut = text.rfind(" ") + 1
            if cut:
                self._emit(text[:cut])
                self._release()
                text = text[cut:]
        if text:
            self._emit(text)

    def _line(self, line: str) -> None:
        if not self._at_line_start and self._block is not None:
            self._held.append(line)  # a text line is being written: after it
            return
        if not self._at_line_start:
            self._emit("\n")
        self._emit(line + "\n")
        self._block = None if self._block == "text" else self._block

    def _end_line(self) -> None:
        """End the streamed text's line: held status lines go out, the next text
        starts on a fresh line."""
        self._release()
        if not self._at_line_start:
            self._emit("\n")
        self._block = None

    def _release(self) -> None:
        """Write the held status lines now, on lines of their own."""
        held, self._held = self._held, []
        block, self._block = self._block, None
        for line in held:
            self._line(line)
        self._block = None if block == "text" else block

    def _emit(self, text: str) -> None:
        self._write(text)
        self._at_line_start = text.endswith("\n")
        cut = text.rfind("\n")
        self._column = len(text) - cut - 1 if cut >= 0 else self._column + len(text)


def _unwrap(event: Any) -> tuple[Any, str, int]:
    """A nested event's innermost event, the id prefix of its sub-run, its depth."""
    prefix, depth = "", 0
    while getattr(event, "kind", "") == "nested":
        prefix += f"{event.parent}/"
        depth += 1
        event = event.event
    return event, prefix, depth


def render_text(
    state: ViewState, now: float | None = None, values: Mapping[str, Any] | None = None
) -> str:
    """The whole run as text/plain: header, thought, actions, errors, response.

    ``values`` fill ``$name`` references in the response, as the rendered view does.
    """
    out = [" · ".join(["cortex", *header_parts(state, now)])]
    if state.thought.strip():
        out += ["", "Thought:", _indent(clean(state.thought.strip()))]
    nodes = [state.nodes[i] for i in state.order]
    if nodes:
        out += ["", "Actions:"]
        for node in nodes:
            style = style_for(node.shown_status)
            line = status_line(node, 1 + state.depth(node))
            out.append(line.replace("[", f"{style.icon} [", 1))
    if state.errors:
        out += ["", "Errors:"]
        out += [f"  - {_one_line(error, 2000)}" for error in state.errors]
    if state.body.strip():
        body = state.body.strip()
        if values is not None:
            body = fill_references(body, values)[0]
        out += ["", "Response:", clean(body)]
    if typed_shows(state.typed):
        assert state.typed is not None
        out += ["", clean(typed_text(state.typed))]
    return "\n".join(out) + "\n"


def _indent(text: str, pad: str = "  ") -> str:
    return "\n".join(pad + line if line else line for line in text.split("\n"))
