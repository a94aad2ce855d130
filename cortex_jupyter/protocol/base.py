"""What every dialect's parser shares: text emission, ids, limits and finality.

Text is emitted the moment it is known to be text. Two whitespace rules keep blocks
clean without delaying anything visible: a block's leading whitespace is not part of
its text, and loose text between blocks is trimmed at both ends (a run of whitespace
there is held until something visible follows it, so whitespace-only gaps between
blocks make no events). Both depend only on the text, never on where the stream was
split, which is what makes any chunking give the same events.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import ClassVar, TypeVar

from .actions import build_action, call_fields, parse_body, quote, with_source
from .calls import CallHooks
from .deltas import response_delta, thought_delta
from .events import Action, ActionReady, ActionStart, Event, ProtocolError, TextDelta
from .ids import Ids
from .tags import NEED, Need

_Found = TypeVar("_Found")

#: Largest action body, in characters (1 MiB).
MAX_ACTION_CHARS = 1 << 20
#: Most text (thought, response, feeds, loose text) one run may carry (10 MiB).
MAX_TEXT_CHARS = 10 << 20

# Where emitted text goes.
TOP, THOUGHT, RESPONSE, FEED = 0, 1, 2, 3
# What ``Parser.open_block`` calls the blocks text can be inside.
_OPEN_KINDS = {THOUGHT: "thought", RESPONSE: "response"}


class ParserClosedError(RuntimeError):
    """Raised when ``feed`` is called after ``close``: a parser reads one stream."""

    def __init__(self) -> None:
        super().__init__("this parser was closed; create a new Parser for a new stream")


class Parser:
    """An incremental, pure parser for one model stream in one protocol dialect.

    ``Parser(dialect="cortex")`` (or ``"sigil"``, ``"cogency"``, ``"hermes"``,
    ``"auto"``) returns the dialect's parser. ``feed(chunk)`` returns the events that
    chunk completes; ``close()`` ends the stream and returns the rest. Any split of the same text
    gives the same events once consecutive text deltas of one block are joined.
    Bad input never raises: it becomes an ``error`` event and parsing goes on.

    ``taken_ids`` are action ids already used in this run (by earlier turns): an
    action reusing one runs under a new id (``r1~2``, with ``original_id="r1"``), a
    repeat within this stream is ``duplicate_id``, and generated ids never collide.
    """

    dialect = "cortex"
    #: dialect name -> implementing class; filled in by the package ``__init__``.
    _dialects: ClassVar[dict[str, type[Parser]]] = {}

    def __new__(cls, dialect: str = "cortex", **_: object) -> Parser:
        if cls is not Parser:
            return super().__new__(cls)
        impl = Parser._dialects.get(dialect)
        if impl is None:
            choices = ", ".join(sorted(Parser._dialects))
            raise ValueError(f"unknown protocol dialect {dialect!r}; choose one of: {choices}")
        return super().__new__(impl)

    def feed(self, chunk: str) -> list[Event]:
        """Parse the next piece of the stream; the events it completes, in order."""
        raise NotImplementedError

    def close(self) -> list[Event]:
        """The stream ended: flush held text and close whatever is still open."""
        raise NotImplementedError

    def __init__(
        self,
        dialect: str = "cortex",
        *,
        max_action_chars: int = MAX_ACTION_CHARS,
        max_text_chars: int = MAX_TEXT_CHARS,
        taken_ids: Iterable[str] = (),
    ) -> None:
        for limit_name, limit in (
            ("max_action_chars", max_action_chars),
            ("max_text_chars", max_text_chars),
        ):
            if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
                raise ValueError(f"{limit_name} must be a positive whole number, not {limit!r}")
        self._buf = ""  # text held back: a possible half-arrived tag or marker
        self._sink = TOP  # where text goes now
        self._fresh = True  # nothing visible emitted yet in the current block
        self._hold = ""  # whitespace waiting for something visible after it
        self._response_final = True
        self._loose_response = False  # hermes: text outside any block is the response
        self._pending_response_end = False  # a response whose finality what follows decides
        self._feed_parts: list[str] = []
        self._text_room = max_text_chars  # of the run's text limit, still unused
        self._text_over = False
        self._max_text = max_text_chars
        self._max_action = max_action_chars
        self._ids = Ids(taken_ids)
        self._final_seen = False
        self._closed = False
        #: Set when the stream marks the end of a turn: ``"execute"`` (sigil's
        #: ``§EXECUTE:``, cogency's ``</execute>``) or ``"end"`` (``§END:``, ``<end>``).
        self.boundary: str | None = None

    @property
    def open_block(self) -> str | None:
        """The kind of block the text read so far ends inside: ``"thought"``,
        ``"response"`` or ``"action"`` (an action body, a call list or a tool call), or
        ``None`` between blocks (loose text, even hermes's, which no tag opened). What a
        cut reply leaves open is this, not what a scan of its text finds
        (``runtime.loop.resume``): a tag quoted inside a response is text."""
        return _OPEN_KINDS.get(self._sink)

    def continue_from(self, other: Parser) -> None:
        """Read on where ``other`` stopped (``auto`` handing over to another dialect):
        the same ids, text budget and final answer."""
        self._ids = other._ids
        self._text_room = other._text_room
        self._text_over = other._text_over
        self._final_seen = other._final_seen

    # -- text ----------------------------------------------------------------

    def _emit(self, text: str, out: list[Event]) -> None:
        """Send ``text`` to the current block (a block's leading whitespace is dropped)."""
        if self._fresh:
            text = text.lstrip()
            if not text:
                return
            self._fresh = False
        sink = self._sink
        if sink == TOP:
            # Loose text between blocks: whitespace only counts between visible text.
            if self._hold:
                text = self._hold + text
                self._hold = ""
            if text[-1].isspace():
                body = text.rstrip()
                self._hold = text[len(body) :]
                if not body:
                    return
                text = body
        room = self._text_room - len(text)
        self._text_room = room
        if room < 0:  # past the run's text limit: what still fits, then the report, once
            if self._text_over:
                return
            text = text[: max(room + len(text), 0)]
            if not text:
                self._report_overflow(out)
                return
        if sink == THOUGHT:
            out.append(thought_delta(text))
        elif sink == RESPONSE:
            out.append(response_delta(text, self._response_final))
        elif sink == TOP:
            out.append(self._loose(text))
        else:
            self._feed_parts.append(text)
        if room < 0:
            self._report_overflow(out)

    def _text_until(
        self,
        data: str,
        pos: int,
        out: list[Event],
        candidates: re.Pattern[str],
        judge: Callable[[str, int], _Found | Need | None],
    ) -> tuple[int, _Found | Need | None]:
        """Emit the text of ``data[pos:]`` up to the first marker: the first place
        ``candidates`` matches that ``judge`` does not reject (None). Returns that
        place and the verdict; on NEED the rest is held back for the next chunk, and
        without a marker all of it was text: ``(len(data), None)``."""
        start = search = pos
        while True:
            m = candidates.search(data, search)
            if m is None:
                self._emit(data[start:] if start else data, out)
                return len(data), None
            i = m.start()
            found = judge(data, i)
            if found is None:
                search = i + 1
                continue
            if i > start:
                self._emit(data[start:i], out)
            if found is NEED:
                self._buf = data[i:]
            return i, found

    def _loose(self, text: str) -> Event:
        """Text outside any block: shown as it is, or (hermes) the response."""
        if self._loose_response:
            self._pending_response_end = True
            return response_delta(text, False)
        return TextDelta(text)

    def _report_overflow(self, out: list[Event]) -> None:
        self._text_over = True
        out.append(
            ProtocolError(
                "too_large",
                f"the run's text passed the limit of {self._max_text:,} characters; "
                "further thought and response text is not shown. Actions are still "
                "read and run.",
                source=f"[the text past the limit of {self._max_text:,} characters was not kept]",
            )
        )

    def _enter(self, sink: int) -> None:
        """Start a new block (or a new stretch of loose text)."""
        self._sink = sink
        self._fresh = True
        self._hold = ""

    # -- ids and actions ------------------------------------------------------

    def _claim_id(self, raw: str | None) -> tuple[str, ProtocolError | None, str | None]:
        """(id, the error that stops the action if one does, the model's id if renamed)."""
        given = raw.strip() if raw else ""
        claimed = self._ids.claim(given) if given else self._ids.generate()
        action_id = claimed or given
        original = given if given and action_id != given else None
        if self._final_seen:
            message = (
                f"action {action_id!r} came after the final response, so it was not run "
                "(the answer was already given)."
            )
            return action_id, ProtocolError("action_after_final", message, action_id), original
        if claimed is None:
            message = (
                f"a second action used the id {given!r}; ids must be unique in a reply, "
                "so the second one was not run."
            )
            return given, ProtocolError("duplicate_id", message, given), None
        return action_id, None, original

    def _call_hooks(self) -> CallHooks:
        """What a call list scanner needs from its parser."""
        return CallHooks(
            self._start_call,
            self._finish_call,
            self._too_large_action,
            self._truncated,
            self._max_action,
        )

    def _start_call(self, out: list[Event], in_thought: bool) -> tuple[str, ProtocolError | None]:
        """Open a call of the list dialects (sigil, cogency) or a hermes ``<tool_call>``:
        a generated id, tool, async."""
        action_id, skip, _ = self._claim_id(None)
        if skip is None:
            out.append(ActionStart(action_id, "tool", "async", in_thought))
        return action_id, skip

    def _finish_call(
        self, text: str, action_id: str, in_thought: bool, out: list[Event], source: str
    ) -> None:
        """A complete call: its action, or the error that refuses it (with ``source``)."""
        result = self._call_action(text, action_id, in_thought)
        if isinstance(result, ProtocolError):
            out.append(with_source(result, source))
        else:
            out.append(ActionReady(result, source))

    @staticmethod
    def _call_action(text: str, action_id: str, in_thought: bool) -> Action | ProtocolError:
        fields = parse_body(text, action_id)
        if isinstance(fields, ProtocolError):
            return fields
        found = call_fields(fields, action_id)
        if isinstance(found, ProtocolError):
            return found
        fields, key = found
        return build_action(
            fields,
            action_id=action_id,
            type="tool",
            mode="async",
            in_thought=in_thought,
            params_key=key,
        )

    def _too_large_action(self, action_id: str, out: list[Event], source: str) -> None:
        out.append(
            ProtocolError(
                "too_large",
                f"action {action_id!r}: its body passed the limit of "
                f"{self._max_action:,} characters, so it was not run. Reading goes on "
                "after its end.",
                action_id,
                source,
            )
        )

    @staticmethod
    def _truncated(action_id: str, text: str, source: str) -> ProtocolError:
        return ProtocolError(
            "truncated_action",
            f"the stream ended inside action {action_id!r} before it was complete, so "
            f"it was not run. Received: {quote(text.strip())}",
            action_id,
            source,
        )

    def _with_held(self, chunk: str) -> str:
        """``chunk`` after the text held back from the last one (a possible half tag
        or marker). Refuses a closed parser and a chunk that is not text."""
        if self._closed or chunk.__class__ is not str:
            self._check_open(chunk)
        held = self._buf
        if held:
            self._buf = ""
            return held + chunk
        return chunk

    def _check_open(self, chunk: str) -> None:
        if self._closed:
            raise ParserClosedError()
        if not isinstance(chunk, str):
            raise TypeError(f"Parser.feed takes str chunks, not {type(chunk).__name__}")
