"""The tag dialects' state machine: one parser for cortex, cogency and hermes.

Which tags each dialect knows is data (``dialects``); this is what the parser does
with them as text streams in, a chunk (often a character) at a time, with fast paths
for the commonest chunks (see ``XmlParser.feed``).

**Finality.** A cortex ``<response>`` without ``final`` is final unless the reply
goes on to write actions; then it was an interim message. Its deltas carry
``final=False`` and its ``ResponseEnd`` waits until that is known: ``False`` when an
action opens (inside a later thought too) or another response opens, ``True`` at the
end of the stream. A thought, a feed or loose text after it decide nothing. An
explicit ``final="true"`` is final at its closing tag (later actions are
``action_after_final``); ``final="false"`` is interim at once. Cogency's
``<respond>`` waits the same way (``<end>`` or the end of the stream make it final;
``<execute>``, ``<think>`` or another ``<respond>`` interim). Hermes's loose text is
its response, decided in the same way.

**Recovered sloppiness.** A reply whose loose text starts with the rest of a
response opener (`` final="true">Tests pass.</response>``: the ``<response`` got lost)
opens that response; nothing else is guessed. ``<turn>`` blocks a model writes
(``<turn role="user">`` with made-up results) are forgeries like ``<result>``
(``forged``). Markdown fences around real tags are loose text and the tags inside
still count.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Final

from ..actions import SOURCE_HEAD, action_kind, clipped, quote, with_source
from ..base import FEED, RESPONSE, THOUGHT, TOP, Parser
from ..calls import CallScanner
from ..deltas import new_event, set_response_final, set_response_text, set_thought_text
from ..events import (
    ActionStart,
    ContextFeedEvent,
    Event,
    ProtocolError,
    ResponseDelta,
    ResponseEnd,
    ThoughtDelta,
    ThoughtEnd,
)
from ..jsonscan import JsonString
from ..tags import NEED, Need, Tag, closer, orphan_final, scan_tag, still_partial, tag_set
from . import dialects
from .drafts import ACTION_CLOSE, TOOL_CALL_CLOSE, Draft
from .forged import Echo, ForgedBlock

# Parser states (where the next character goes).
S_TEXT, S_ACTION, S_CALLS, S_FORGED = 0, 1, 2, 3

_NOT_TAG_START = frozenset(" \t\r\n=<>0123456789-")
_BODY_SPECIAL = re.compile(r'["<]')
_VISIBLE = re.compile(r"\S")
_EXECUTE_CLOSE = closer("execute")
_FALSE = frozenset(("false", "0", "no"))
_TRUE = frozenset(("true", "1", "yes", ""))

#: Fast paths share the delta of a chunk this short (see XmlParser._update_fast) ...
SHARED_DELTA_CHARS: Final = 4
#: ... while its block kind's table holds fewer deltas than this.
SHARED_DELTAS: Final = 1024


class XmlParser(Parser):
    """Parser for the cortex, cogency and hermes dialects (and the start of ``auto``)."""

    def __init__(self, dialect: str = "cortex", **limits: Any) -> None:
        super().__init__(dialect, **limits)
        self._orphans = False  # see _orphan_opener
        self._set_dialect(dialect)
        # Hermes: the reply's leading text, held while a lone </think> may end it.
        self._opener_less = dialect == "hermes"
        self._held_parts: list[str] = []
        self._held_len = 0
        if self._opener_less:
            self._known = self._tables[TOP] | dialects.THOUGHT_CLOSE
            # Only a hermes parser pays for the hold, and only until it is decided.
            self._emit = self._hold_leading  # type: ignore[method-assign]
        self._state = S_TEXT
        self._fast = 0  # see _update_fast
        self._pending = tag_set(self._known)  # for a tag still arriving
        self._in_thought = False  # an action or forged block interrupted a thought
        # the action being read
        self._draft = Draft("", "", ACTION_CLOSE)
        self._act_parts: list[str] = []
        self._act_room = self._max_action  # characters the body may still take
        self._act_big = False
        self._act_head = ""  # the start of a body too large to keep
        # Fast paths 1 and 2 share deltas (see _update_fast): the current block's table,
        # and the tables for thoughts and for responses by their finality.
        self._thought_deltas: dict[str, Event] = {}
        self._response_deltas: tuple[dict[str, Event], dict[str, Event]] = ({}, {})
        self._deltas = self._thought_deltas
        self._closing = ""  # fast path 5: the plain closing tag of the action being read
        self._closing_len = 0
        self._string = JsonString()  # where the action body's JSON stands
        self._forged: ForgedBlock | None = None  # a forged block being skipped
        self._echo: Echo | None = None  # a result block quoted inside a response
        self._calls: CallScanner | None = None
        self._feed_id = ""
        self._feed_open = ""
        self._response_deferred = False  # the open response's finality waits (see above)
        self._tag_so_far: str | None = None  # a held tag the fast path found partial
        self._on: dict[str, Callable[[Tag, list[Event]], None]] = {
            **dict.fromkeys(dialects.THOUGHT_OPEN, self._open_thought),
            **dict.fromkeys(dialects.THOUGHT_CLOSE, self._close_thought),
            **dict.fromkeys(dialects.FORGED_TAGS, self._open_forged),
            "action": self._open_action,
            "tool_call": self._open_tool_call,
            "execute": self._open_calls,
            "response": self._open_response,
            "respond": self._open_response,
            "/response": self._close_response,
            "/respond": self._close_response,
            "context_feed": self._open_feed,
            "/context_feed": self._close_feed,
            **dict.fromkeys(("/" + name for name in dialects.RESPONSE_FORGED), self._close_echo),
            "end": self._on_end,
            "/end": self._on_end,
        }
        self._handlers: tuple[Callable[[str, int, list[Event]], int], ...] = (
            self._read_text,
            self._read_action,
            self._read_calls,
            self._read_forged,
        )

    @property
    def open_block(self) -> str | None:
        if self._state in (S_ACTION, S_CALLS):
            return "action"
        if self._state == S_FORGED:
            return None  # a forged block is skipped, never carried on
        return super().open_block

    # -- feeding ---------------------------------------------------------------

    def feed(self, chunk: str) -> list[Event]:  # noqa: C901 - fast paths inlined on purpose
        # Fast paths for the commonest chunks (see _update_fast for when each applies).
        # At one character per chunk every attribute lookup here shows in the total:
        # each branch does the least that keeps its answer the slow path's answer.
        fast = self._fast
        if fast and chunk.__class__ is str:
            if fast <= 2:  # thought (1) or response (2) text: most chunks of most replies
                deltas = self._deltas
                event = deltas.get(chunk)
                if event is None and "<" not in chunk and chunk:
                    if fast == 1:
                        event = new_event(ThoughtDelta)
                        set_thought_text(event, chunk)
                    else:  # a response's deltas carry its finality
                        event = new_event(ResponseDelta)
                        set_response_text(event, chunk)
                        set_response_final(event, self._response_final)
                    if len(chunk) <= SHARED_DELTA_CHARS and len(deltas) < SHARED_DELTAS:
                        deltas[chunk] = event
                if event is not None:
                    room = self._text_room - len(chunk)
                    if room >= 0:
                        self._text_room = room
                        return [event]
            elif fast == 3:  # an action body
                # Without backslashes each quote flips "inside a string"; a "<" can
                # only end the body outside one. Most chunks hold neither quote nor
                # backslash (a model's JSON, one token at a time): they only add up.
                if (
                    '"' not in chunk
                    and "\\" not in chunk
                    and ("<" not in chunk or self._string.inside)
                ):
                    room = self._act_room - len(chunk)
                    if room >= 0:
                        self._act_room = room
                        self._act_parts.append(chunk)
                        return []
                elif "\\" not in chunk:
                    quotes = chunk.count('"')
                    if "<" not in chunk or (not quotes and self._string.inside):
                        room = self._act_room - len(chunk)
                        if room >= 0:
                            self._act_room = room
                            self._act_parts.append(chunk)
                            if quotes & 1:
                                string = self._string
                                string.inside = not string.inside
                            return []
            elif fast == 4:
                # An opening or closing tag still arriving in text: it stays a possible
                # tag while it fits. A known name's prefix ("<act", "</thou") is a set
                # lookup; past the name, still_partial and then the pattern decide.
                if ">" not in chunk and "<" not in chunk:
                    buf = self._buf
                    data = buf + chunk
                    if (
                        data in self._pending.heads
                        or (buf is self._tag_so_far and still_partial(buf, chunk, data))
                        or self._pending.is_partial(data, 0)
                    ):
                        self._buf = self._tag_so_far = data
                        return []
            else:  # fast == 5
                # An action's closing tag arriving: while it is a prefix of the plain
                # tag ("</act") it can only be held, as Closer.at would answer.
                data = self._buf + chunk
                if len(data) < self._closing_len and self._closing.startswith(data):
                    self._buf = data
                    return []
        if self._buf or self._closed or chunk.__class__ is not str:
            chunk = self._with_held(chunk)  # (most chunks need none of it)
        out: list[Event] = []
        pos = 0
        n = len(chunk)
        while pos < n:
            pos = self._handlers[self._state](chunk, pos, out)
        self._update_fast()
        return out

    def _update_fast(self) -> None:
        """Which fast path (if any) the next chunk may take; see ``feed``.

        In the order ``feed`` tries them: 1, text in a thought that has shown
        something, and 2, text in a response (for both ``_deltas`` is the block's
        table of shared deltas, see below; one comparison finds either); 3, an action
        body; 4, a tag arriving in text (``_pending`` holds its patterns); 5, an
        action's closing tag arriving.

        Deltas are immutable, so equal ones may be one object: a short chunk seen
        again in the same kind of block (a character, a common token) gets the delta
        built the first time. Building a frozen event costs more than all the rest of
        a fast path; the tables are per parser and bounded (``SHARED_DELTAS``).
        """
        fast = 0
        state = self._state
        if self._closed:
            pass
        elif self._buf:
            if state == S_TEXT and self._buf[0] == "<":
                fast = 4
            elif state == S_ACTION and not self._act_big:
                literal = self._draft.closer.literal
                if literal.startswith(self._buf):
                    self._closing, self._closing_len = literal, len(literal)
                    fast = 5
        elif state == S_TEXT:
            if not self._fresh and not self._text_over:
                sink = self._sink
                if sink == THOUGHT:
                    self._deltas = self._thought_deltas
                    fast = 1
                elif sink == RESPONSE and self._echo is None:  # not inside a forged block
                    self._deltas = self._response_deltas[self._response_final]
                    fast = 2
        elif state == S_ACTION and not self._act_big and not self._string.escaped:
            fast = 3
        self._fast = fast

    def close(self) -> list[Event]:
        if self._closed:
            return []
        out: list[Event] = []
        self._flush_held(out)
        if self._opener_less:
            self._decide_opener_less(False, out)
        self._close_blocks(out)
        self._closed = True
        self._fast = 0
        return out

    def _flush_held(self, out: list[Event]) -> None:
        """End of stream: what was held back as a possible tag is what it is."""
        held, self._buf = self._buf, ""
        state = self._state
        if state == S_ACTION:
            self._close_in_action(held, out)
        elif state == S_CALLS:
            assert self._calls is not None
            self._calls.add_tail(held, out)
            self._end_calls(out)
        elif state == S_FORGED:
            assert self._forged is not None
            self._forged.keep(held)
            self._end_forged(out, "")
        elif held:
            self._emit(held, out)

    def _close_blocks(self, out: list[Event]) -> None:
        sink = self._sink
        if sink == THOUGHT:
            out.append(ThoughtEnd())
        elif sink == RESPONSE:
            self._end_response(out, self._response_final)
        elif sink == FEED:
            self._end_feed(out)
        self._resolve_response_end(out, True)
        self._enter(TOP)

    # -- text ------------------------------------------------------------------

    def _read_text(self, data: str, pos: int, out: list[Event]) -> int:
        if self._orphans and self._fresh and self._sink == TOP and data[pos] != "<":
            end = self._orphan_opener(data, pos, out)
            if end >= 0:
                return end
        start = search = pos
        known = self._known
        while True:
            i = data.find("<", search)
            if i < 0:
                if self._echo is not None:
                    self._echo.add(data[start:])
                self._emit(data[start:] if start else data, out)
                return len(data)
            # Most "<" in prose ("x < 3") cannot start a tag: reject without scanning.
            tag = None if data[i + 1 : i + 2] in _NOT_TAG_START else scan_tag(data, i, known)
            if tag is None:
                search = i + 1
                continue
            if i > start:
                if self._echo is not None:
                    self._echo.add(data[start:i])
                self._emit(data[start:i], out)
            if tag is NEED:
                self._buf = data[i:]
                self._pending = tag_set(known)
                return len(data)
            assert isinstance(tag, Tag)
            return self._on_tag(tag, out)

    def _orphan_opener(self, data: str, pos: int, out: list[Event]) -> int:
        """At the start of loose text, a ``final="...">`` whose ``<response`` was lost
        opens that response. The index to read on from, or -1 when there is none."""
        m = _VISIBLE.search(data, pos)
        if m is None or data[m.start()] not in "fF":
            return -1
        j = m.start()
        found = orphan_final(data, j)
        if found is None:
            return -1
        if found is NEED:
            self._buf = data[j:]
            return len(data)
        assert isinstance(found, tuple)
        if self.dialect == "auto":
            self._set_dialect("cortex")
        self._resolve_response_end(out, False)
        self._response_deferred = False
        self._response_final = found[0]
        self._enter(RESPONSE)
        return found[1]

    def _hold_leading(self, text: str, out: list[Event]) -> None:
        """``_emit`` while a hermes reply's leading text is undecided."""
        self._held_parts.append(text)
        self._held_len += len(text)
        if self._held_len > dialects.OPENERLESS_HOLD:
            self._decide_opener_less(False, out)

    def _decide_opener_less(self, thought: bool, out: list[Event]) -> None:
        """The held leading text of a hermes reply is now known: the thought (a lone
        ``</think>`` came) or loose text, the response."""
        self._opener_less = False
        del self._emit  # the class's own again
        held = "".join(self._held_parts)
        self._held_parts, self._held_len = [], 0
        if thought and held.strip():
            self._enter(THOUGHT)
        else:
            self._known = self._tables[self._sink]
        if held:
            self._emit(held, out)

    def _on_tag(self, tag: Tag, out: list[Event]) -> int:
        if self._opener_less:
            lone_close = tag.name in dialects.THOUGHT_CLOSE
            self._decide_opener_less(lone_close, out)
            if lone_close and self._sink != THOUGHT:
                return tag.end  # an empty thought: the tag alone shows nothing
        if self.dialect == "auto":
            dialect = dialects.decided_by(tag.name)
            if dialect is not None:
                self._set_dialect(dialect)
        self._on[tag.name](tag, out)
        return tag.end

    def _set_dialect(self, dialect: str) -> None:
        self.dialect = dialect
        self._tables = dialects.TABLES[dialect]
        self._known = self._tables[self._sink]
        self._loose_response = dialect == "hermes"
        self._orphans = dialect in ("cortex", "auto")

    def _enter(self, sink: int) -> None:
        super()._enter(sink)
        self._known = self._tables[sink]
        self._echo = None

    def _resume(self) -> None:
        """Back to text after an action or forged block: the thought goes on, if any."""
        self._state = S_TEXT
        if self._in_thought:
            self._in_thought = False
            self._sink = THOUGHT
            self._known = self._tables[THOUGHT]
        else:
            self._enter(TOP)

    def _open_thought(self, tag: Tag, out: list[Event]) -> None:
        if self.dialect == "cogency":
            self._resolve_response_end(out, False)
        self._enter(THOUGHT)
        if tag.self_closing:
            self._end_thought(out)

    def _close_thought(self, tag: Tag, out: list[Event]) -> None:
        self._end_thought(out)

    def _end_thought(self, out: list[Event]) -> None:
        out.append(ThoughtEnd())
        self._enter(TOP)

    def _on_end(self, tag: Tag, out: list[Event]) -> None:
        """Cogency's ``<end>``: the task is complete."""
        self._resolve_response_end(out, True)
        if not self._final_seen:
            out.append(ResponseEnd(True))
            self._final_seen = True
        self.boundary = "end"
        self._enter(TOP)

    # -- responses -------------------------------------------------------------

    def _open_response(self, tag: Tag, out: list[Event]) -> None:
        self._resolve_response_end(out, False)
        declared = tag.attrs.get("final")
        if declared is None and "final" in tag.flags:
            declared = "true"
        # Cogency's <respond> and a <response> without final: decided by what follows.
        self._response_deferred = tag.name == "respond" or declared is None
        final = False
        if declared is not None and not self._response_deferred:
            final = self._declared_final(declared, tag.text, out)
        self._response_final = final
        self._enter(RESPONSE)
        if tag.self_closing:
            self._end_response(out, final)

    @staticmethod
    def _declared_final(declared: str, tag_text: str, out: list[Event]) -> bool:
        value = declared.strip().lower()
        if value not in _FALSE and value not in _TRUE:
            out.append(
                ProtocolError(
                    "invalid_field",
                    f'<response final="{declared[:40]}"> should say "true" or "false"; '
                    'it was read as final="true".',
                    source=tag_text,
                )
            )
        return value not in _FALSE

    def _close_response(self, tag: Tag, out: list[Event]) -> None:
        self._end_response(out, self._response_final)

    def _end_response(self, out: list[Event], final: bool) -> None:
        if self._response_deferred:
            self._pending_response_end = True
        else:
            out.append(ResponseEnd(final))
            if final:
                self._final_seen = True
        self._enter(TOP)

    def _resolve_response_end(self, out: list[Event], final: bool) -> None:
        """A response waiting for its finality gets it now (see the module docstring)."""
        if self._pending_response_end:
            self._pending_response_end = False
            out.append(ResponseEnd(final))
            if final:
                self._final_seen = True

    # -- context feeds -----------------------------------------------------------

    def _open_feed(self, tag: Tag, out: list[Event]) -> None:
        self._feed_id = tag.attrs.get("id", "").strip()
        self._feed_open = tag.text
        self._feed_parts = []
        self._enter(FEED)

    def _close_feed(self, tag: Tag, out: list[Event]) -> None:
        self._end_feed(out, tag.text)

    def _end_feed(self, out: list[Event], close_text: str = "") -> None:
        text = "".join(self._feed_parts)
        self._feed_parts = []
        if self._feed_id:
            out.append(ContextFeedEvent(self._feed_id, text))
        else:
            out.append(
                ProtocolError(
                    "invalid_field",
                    '<context_feed> needs an id attribute, as in <context_feed id="news">; '
                    f"this one was ignored: {quote(text)}",
                    source=self._feed_open + text + close_text,
                )
            )
        self._enter(TOP)

    # -- actions -----------------------------------------------------------------

    def _open_action(self, tag: Tag, out: list[Event]) -> None:
        self._resolve_response_end(out, False)  # a response before an action was interim
        attrs = tag.attrs
        type_, mode, problem = action_kind(attrs, tag.flags)
        action_id, skip, original = self._claim_id(attrs.get("id"))
        in_thought = self._sink == THOUGHT
        if skip is None:
            out.append(ActionStart(action_id, type_, mode, in_thought))
        draft = Draft(action_id, tag.text, ACTION_CLOSE, in_thought, type_, mode)
        draft.name = attrs.get("name", "").strip() or None
        draft.problem, draft.skip, draft.original_id = problem, skip, original
        self._begin_body(draft, tag, out)

    def _open_tool_call(self, tag: Tag, out: list[Event]) -> None:
        self._resolve_response_end(out, False)  # text before a tool call was interim
        in_thought = self._sink == THOUGHT
        action_id, skip = self._start_call(out, in_thought)
        draft = Draft(action_id, tag.text, TOOL_CALL_CLOSE, in_thought, call=True, skip=skip)
        self._begin_body(draft, tag, out)

    def _begin_body(self, draft: Draft, tag: Tag, out: list[Event]) -> None:
        self._draft = draft
        self._in_thought = draft.in_thought
        self._act_parts = []
        self._act_room = self._max_action
        self._act_big = False
        self._act_head = ""
        self._string = JsonString()
        if tag.self_closing:
            self._finish_action("", "", out)
        else:
            self._state = S_ACTION

    def _read_action(self, data: str, pos: int, out: list[Event]) -> int:
        """Find the closing tag outside JSON strings; keep the body up to it."""
        n = len(data)
        i = pos
        string = self._string
        while True:
            k = string.find(data, i, _BODY_SPECIAL)
            if k < 0:
                break
            end = self._draft.closer.at(data, k)
            if end is None:
                i = k + 1
                continue
            self._add_body(data[pos:k], out)
            if end is NEED:
                self._buf = data[k:]
                return n
            assert isinstance(end, int)
            self._finish_action("".join(self._act_parts), data[k:end], out)
            return end
        self._add_body(data[pos:] if pos else data, out)
        return n

    def _add_body(self, text: str, out: list[Event]) -> None:
        if self._act_big or not text:
            return
        self._act_room -= len(text)
        limit = self._max_action
        if self._act_room < 0:
            self._act_big = True
            self._act_head = ("".join(self._act_parts) + text)[: min(SOURCE_HEAD, limit)]
            self._act_parts = []
            draft = self._draft
            if draft.skip is None:
                self._too_large_action(draft.id, out, self._body_source("", ""))
            return
        self._act_parts.append(text)

    def _body_source(self, body: str, close_text: str) -> str:
        """The action as the model wrote it (shortened when it was too large)."""
        if self._act_big:
            body = clipped(self._act_head, self._max_action)
        return self._draft.open_text + body + close_text

    def _finish_action(self, body: str, close_text: str, out: list[Event]) -> None:
        self._act_parts = []
        draft = self._draft
        source = self._body_source(body, close_text)
        if draft.skip is not None:
            out.append(with_source(draft.skip, source))
        elif self._act_big:
            pass  # reported as too_large when it passed the limit
        elif draft.call:
            self._finish_call(body, draft.id, draft.in_thought, out, source)
        else:
            out.append(draft.event(body, source, self._ids))
        self._resume()

    def _close_in_action(self, held: str, out: list[Event]) -> None:
        """End of stream inside an action body: maybe a stray quote hid its end tag."""
        body = "".join(self._act_parts) + held
        self._act_parts = []
        draft = self._draft
        found = None if self._act_big else draft.closer.find(body)
        if found is None:
            source = self._body_source(body, "")
            if draft.skip is not None:
                out.append(with_source(draft.skip, source))
            elif not self._act_big:
                out.append(self._truncated(draft.id, body, source))
            self._resume()
            return
        # An unbalanced quote made us read the real closing tag as string content.
        # Now that the stream is over we can see it: end the action there and read on.
        cut, end = found
        source = draft.open_text + body[:end]
        if draft.skip is not None:
            out.append(with_source(draft.skip, source))
        else:
            out.append(
                ProtocolError(
                    "invalid_json",
                    f"action {draft.id!r}: the body has an unclosed string, so its "
                    f"{body[cut:end]} was only found at the end of the stream: "
                    f"{quote(body[:cut].strip())}. It was not run.",
                    draft.id,
                    source,
                )
            )
        self._resume()
        rest = body[end:]
        pos = 0
        while pos < len(rest):
            pos = self._handlers[self._state](rest, pos, out)
        self._flush_held(out)

    # -- cogency <execute>[...]</execute> ----------------------------------------

    def _open_calls(self, tag: Tag, out: list[Event]) -> None:
        self._resolve_response_end(out, False)
        self._in_thought = self._sink == THOUGHT
        self._calls = CallScanner(self._call_hooks(), "<", self._execute_end_at, self._in_thought)
        if tag.self_closing:
            self._end_calls(out)
        else:
            self._state = S_CALLS

    @staticmethod
    def _execute_end_at(data: str, k: int) -> bool | Need:
        end = _EXECUTE_CLOSE.at(data, k)
        return end if end is NEED else end is not None

    def _read_calls(self, data: str, pos: int, out: list[Event]) -> int:
        assert self._calls is not None
        k = self._calls.scan(data, pos, out)
        if k is None:
            self._buf = self._calls.take_held()
            return len(data)
        end = _EXECUTE_CLOSE.at(data, k)
        assert isinstance(end, int)
        self._end_calls(out)
        self.boundary = "execute"
        return end

    def _end_calls(self, out: list[Event]) -> None:
        if self._calls is not None:
            self._calls.finish(out)
            self._calls = None
        self._resume()

    # -- forged results ------------------------------------------------------------

    def _open_forged(self, tag: Tag, out: list[Event]) -> None:
        if self._sink == RESPONSE:
            self._open_echo(tag, out)
            return
        self._forged = ForgedBlock(tag, self._max_action)
        self._in_thought = self._sink == THOUGHT
        if tag.self_closing:
            self._end_forged(out, "")
        else:
            self._state = S_FORGED

    def _read_forged(self, data: str, pos: int, out: list[Event]) -> int:
        assert self._forged is not None
        i, tag = self._forged.read(data, pos)
        if tag is None:
            return len(data)
        if tag is NEED:
            self._buf = data[i:]
            return len(data)
        assert isinstance(tag, Tag)
        self._end_forged(out, tag.text)
        return tag.end

    def _end_forged(self, out: list[Event], close_text: str) -> None:
        assert self._forged is not None
        out.append(self._forged.error(close_text))
        self._forged = None
        self._resume()

    def _open_echo(self, tag: Tag, out: list[Event]) -> None:
        """A result block inside a response: the response is the model's own text, so
        it stays text (prose may well name ``<result>``), but a whole block, once its
        closing tag comes, is flagged as forged (see ``forged``)."""
        self._emit(tag.text, out)
        if tag.self_closing:
            return
        self._echo = Echo(tag.text, tag.name)
        # A later opening tag starts over (an unclosed "`<result>`" in prose is not one).
        self._known = self._tables[RESPONSE] | {self._echo.close}

    def _close_echo(self, tag: Tag, out: list[Event]) -> None:
        self._emit(tag.text, out)
        echo, self._echo = self._echo or Echo("", tag.name[1:]), None
        self._known = self._tables[self._sink]
        out.append(echo.error(tag))
