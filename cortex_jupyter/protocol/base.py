"""What every dialect's parser shares: text emission, ids, limits and finality.

Text is emitted the moment it is known to be text. Two whitespace rules keep blocks
clean without delaying anything visible: a block's leading whitespace is not part of
its text, and loose text between blocks is trimmed at both ends (a run of whitespace
there is held until something visible follows it, so whitespace-only gaps between
blocks make no events). Both depend only on the text, never on where the stream was
split, which is what makes any chunking give the same events.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

from .actions import build_action, parse_body, quote
from .events import (
    ActionReady,
    ActionStart,
    Event,
    ProtocolError,
    ResponseDelta,
    TextDelta,
    ThoughtDelta,
)

#: Largest action body, in characters (1 MiB).
MAX_ACTION_CHARS = 1 << 20
#: Most text (thought, response, feeds, loose text) one run may carry (10 MiB).
MAX_TEXT_CHARS = 10 << 20

_new = object.__new__
_set_thought_text = ThoughtDelta.__dict__["text"].__set__
_set_response_text = ResponseDelta.__dict__["text"].__set__
_set_response_final = ResponseDelta.__dict__["final"].__set__


# Text deltas are most of the events; building them without the frozen dataclass's
# __init__ halves their cost, and the result is the same frozen instance.
def thought_delta(text: str) -> ThoughtDelta:
    event: ThoughtDelta = _new(ThoughtDelta)
    _set_thought_text(event, text)
    return event


def response_delta(text: str, final: bool) -> ResponseDelta:
    event: ResponseDelta = _new(ResponseDelta)
    _set_response_text(event, text)
    _set_response_final(event, final)
    return event


# Where emitted text goes.
TOP, THOUGHT, RESPONSE, FEED = 0, 1, 2, 3


class ParserClosedError(RuntimeError):
    """Raised when ``feed`` is called after ``close``: a parser reads one stream."""

    def __init__(self) -> None:
        super().__init__("this parser was closed; create a new Parser for a new stream")


class Parser:
    """An incremental, pure parser for one model stream in one protocol dialect.

    ``Parser(dialect="cortex")`` (or ``"sigil"``, ``"cogency"``, ``"auto"``) returns
    the dialect's parser. ``feed(chunk)`` returns the events that chunk completes;
    ``close()`` ends the stream and returns the rest. Any split of the same text
    gives the same events once consecutive text deltas of one block are joined.
    Bad input never raises: it becomes an ``error`` event and parsing goes on.

    ``taken_ids`` are action ids already used in this run (by earlier turns), so a
    repeat is reported as ``duplicate_id`` and generated ids never collide.
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
        self._feed_parts: list[str] = []
        self._text_total = 0
        self._text_over = False
        self._max_text = max_text_chars
        self._max_action = max_action_chars
        self._taken: set[str] = set(taken_ids)
        self._auto_n = 0
        self._final_seen = False
        self._closed = False
        #: Set when the stream marks the end of a turn: ``"execute"`` (sigil's
        #: ``§EXECUTE:``, cogency's ``</execute>``) or ``"end"`` (``§END:``, ``<end>``).
        self.boundary: str | None = None

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
        total = self._text_total + len(text)
        self._text_total = total
        if total > self._max_text:
            text = self._clip_text(text, out)
            if not text:
                return
        if sink == THOUGHT:
            out.append(thought_delta(text))
        elif sink == RESPONSE:
            out.append(response_delta(text, self._response_final))
        elif sink == TOP:
            out.append(TextDelta(text))
        else:
            self._feed_parts.append(text)

    def _clip_text(self, text: str, out: list[Event]) -> str:
        """Keep what fits under the run's text limit; report the overflow once."""
        if self._text_over:
            return ""
        self._text_over = True
        room = self._max_text - (self._text_total - len(text))
        kept = text[: max(room, 0)]
        if kept:
            self._emit_raw(kept, out)
        out.append(
            ProtocolError(
                "too_large",
                f"the run's text passed the limit of {self._max_text:,} characters; "
                "further thought and response text is not shown. Actions are still "
                "read and run.",
            )
        )
        return ""

    def _emit_raw(self, text: str, out: list[Event]) -> None:
        sink = self._sink
        if sink == THOUGHT:
            out.append(ThoughtDelta(text))
        elif sink == RESPONSE:
            out.append(ResponseDelta(text, self._response_final))
        elif sink == TOP:
            out.append(TextDelta(text))
        else:
            self._feed_parts.append(text)

    def _enter(self, sink: int) -> None:
        """Start a new block (or a new stretch of loose text)."""
        self._sink = sink
        self._fresh = True
        self._hold = ""

    # -- ids and actions ------------------------------------------------------

    def _new_id(self) -> str:
        while True:
            self._auto_n += 1
            candidate = f"auto-{self._auto_n}"
            if candidate not in self._taken:
                self._taken.add(candidate)
                return candidate

    def _claim_id(self, raw: str | None) -> tuple[str, ProtocolError | None]:
        """An id for a new action, and the error that stops it, if one does."""
        given = raw.strip() if raw else ""
        if self._final_seen:
            action_id = given or self._new_id()
            return action_id, ProtocolError(
                "action_after_final",
                f"action {action_id!r} came after the final response, so it was not run "
                "(the answer was already given).",
                action_id,
            )
        if not given:
            return self._new_id(), None
        if given in self._taken:
            return given, ProtocolError(
                "duplicate_id",
                f"a second action used the id {given!r}; ids must be unique in a run, "
                "so the second one was not run.",
                given,
            )
        self._taken.add(given)
        return given, None

    def _start_call(self, out: list[Event], in_thought: bool) -> tuple[str, ProtocolError | None]:
        """Open a call of the list dialects (sigil, cogency): generated id, tool, async."""
        if self._final_seen:
            return self._claim_id(None)
        action_id = self._new_id()
        out.append(ActionStart(action_id, "tool", "async", in_thought))
        return action_id, None

    def _finish_call(self, text: str, action_id: str, in_thought: bool, out: list[Event]) -> None:
        fields = parse_body(text, action_id)
        if isinstance(fields, ProtocolError):
            out.append(fields)
            return
        key = "parameters" if "args" not in fields and "parameters" in fields else "args"
        result = build_action(
            fields,
            action_id=action_id,
            type="tool",
            mode="async",
            in_thought=in_thought,
            params_key=key,
        )
        out.append(result if isinstance(result, ProtocolError) else ActionReady(result))

    def _too_large_action(self, action_id: str, out: list[Event]) -> None:
        out.append(
            ProtocolError(
                "too_large",
                f"action {action_id!r}: its body passed the limit of "
                f"{self._max_action:,} characters, so it was not run. Reading goes on "
                "after its end.",
                action_id,
            )
        )

    @staticmethod
    def _truncated(action_id: str, text: str) -> ProtocolError:
        return ProtocolError(
            "truncated_action",
            f"the stream ended inside action {action_id!r} before it was complete, so "
            f"it was not run. Received: {quote(text.strip())}",
            action_id,
        )

    def _check_open(self, chunk: str) -> None:
        if self._closed:
            raise ParserClosedError()
        if not isinstance(chunk, str):
            raise TypeError(f"Parser.feed takes str chunks, not {type(chunk).__name__}")
