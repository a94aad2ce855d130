"""The tag dialects: cortex (``<thought>``/``<action>``/``<response>``) and cogency.

One state machine serves both, with a table of which tags mean something in each
state; ``auto`` starts with both tables merged and narrows to one at the first tag
that only one dialect has (or hands over to the sigil parser at a ``§`` marker).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Final

from .actions import build_action, parse_body, quote
from .base import (
    FEED,
    RESPONSE,
    THOUGHT,
    TOP,
    Parser,
    _new,
    _set_thought_text,
    response_delta,
)
from .calls import CallScanner
from .events import (
    ActionReady,
    ActionStart,
    ContextFeedEvent,
    Event,
    ProtocolError,
    ResponseEnd,
    ThoughtDelta,
    ThoughtEnd,
)
from .tags import NEED, Tag, _Need, scan_tag, tag_set

# Parser states (where the next character goes).
S_TEXT, S_ACTION, S_CALLS, S_FORGED = 0, 1, 2, 3

_THOUGHT_OPEN = frozenset(("thought", "think", "thinking"))
_THOUGHT_CLOSE = frozenset(("/thought", "/think", "/thinking"))
_FORGED = frozenset(("result", "results"))

#: Which tags mean something, per dialect and per text sink.
TABLES: Final[dict[str, dict[int, frozenset[str]]]] = {
    "cortex": {
        TOP: _THOUGHT_OPEN | _FORGED | {"action", "response", "context_feed"},
        THOUGHT: _THOUGHT_CLOSE | _FORGED | {"action"},
        RESPONSE: frozenset({"/response"}),
        FEED: frozenset({"/context_feed"}),
    },
    "cogency": {
        TOP: _THOUGHT_OPEN | _FORGED | {"execute", "respond", "end", "/end"},
        THOUGHT: _THOUGHT_CLOSE | _FORGED | {"execute"},
        RESPONSE: frozenset({"/respond"}),
        FEED: frozenset(),
    },
}
TABLES["auto"] = {
    sink: TABLES["cortex"][sink] | TABLES["cogency"][sink]
    for sink in (TOP, THOUGHT, RESPONSE, FEED)
}
_CORTEX_ONLY = frozenset(("thought", "thinking", "action", "response", "context_feed"))
_COGENCY_ONLY = frozenset(("execute", "respond", "end", "/end"))

_NOT_TAG_START = frozenset(" \t\r\n=<>0123456789-")
_BODY_SPECIAL = re.compile(r'["<]')
_STRING_SPECIAL = re.compile(r'["\\]')
_ACTION_CLOSE = "</action>"
_ACTION_CLOSE_LEN = len(_ACTION_CLOSE)
_FALSE = frozenset(("false", "0", "no"))
_TRUE = frozenset(("true", "1", "yes", ""))


class XmlParser(Parser):
    """Parser for the cortex and cogency dialects (and the start of ``auto``)."""

    def __init__(self, dialect: str = "cortex", **limits: Any) -> None:
        super().__init__(dialect, **limits)
        self.dialect = dialect
        self._tables = TABLES[dialect]
        self._known = self._tables[TOP]
        self._state = S_TEXT
        self._fast = 0  # see _update_fast
        self._pending = tag_set(self._known)  # for a tag still arriving
        self._in_thought = False  # an action or forged block interrupted a thought
        # the action being read
        self._act_id = ""
        self._act_type = "tool"
        self._act_mode = "async"
        self._act_skip: ProtocolError | None = None
        self._act_parts: list[str] = []
        self._act_len = 0
        self._act_big = False
        self._in_str = False
        self._esc = False
        # a forged <result(s)> block being skipped
        self._forged_close = ""
        self._forged_name = ""
        self._forged_parts: list[str] = []
        self._forged_len = 0
        self._calls: CallScanner | None = None
        self._feed_id = ""
        self._pending_response_end = False  # cogency: finality known at the next tag
        self._response_deferred = False
        self._handlers: tuple[Callable[[str, int, list[Event]], int], ...] = (
            self._read_text,
            self._read_action,
            self._read_calls,
            self._read_forged,
        )

    # -- feeding ---------------------------------------------------------------

    def feed(self, chunk: str) -> list[Event]:  # noqa: C901 - fast paths inlined on purpose
        # Fast paths for the two commonest chunks: plain text inside a thought or
        # response, and JSON inside an action body with nothing that could end it.
        fast = self._fast
        if fast and chunk.__class__ is str:
            if fast < 3:
                if "<" not in chunk and chunk:
                    total = self._text_total + len(chunk)
                    if total <= self._max_text:
                        self._text_total = total
                        if fast == 1:
                            event = _new(ThoughtDelta)
                            _set_thought_text(event, chunk)
                            return [event]
                        return [response_delta(chunk, self._response_final)]
            elif fast == 3:
                # Without backslashes each quote flips "inside a string"; a "<" can
                # only end the body outside one.
                if "\\" not in chunk:
                    quotes = chunk.count('"')
                    if "<" not in chunk or (not quotes and self._in_str):
                        size = self._act_len + len(chunk)
                        if size <= self._max_action:
                            self._act_len = size
                            self._act_parts.append(chunk)
                            if quotes & 1:
                                self._in_str = not self._in_str
                            return []
            elif ">" not in chunk and "<" not in chunk:
                # A tag still arriving: it stays a possible tag while it fits.
                data = self._buf + chunk
                if self._pending.is_partial(data, 0):
                    self._buf = data
                    return []
        if self._closed or chunk.__class__ is not str:
            self._check_open(chunk)
        if self._buf:
            chunk = self._buf + chunk
            self._buf = ""
        out: list[Event] = []
        pos = 0
        n = len(chunk)
        while pos < n:
            pos = self._handlers[self._state](chunk, pos, out)
        self._update_fast()
        return out

    def _update_fast(self) -> None:
        """Which fast path (if any) the next chunk may take; see ``feed``."""
        fast = 0
        if self._closed:
            pass
        elif self._buf:
            if self._state == S_TEXT and self._buf[0] == "<":
                fast = 4  # a tag arriving; _pending holds its partial pattern
        elif self._state == S_TEXT:
            if not self._fresh and not self._text_over:
                fast = 1 if self._sink == THOUGHT else 2 if self._sink == RESPONSE else 0
        elif self._state == S_ACTION and not self._act_big and not self._esc:
            fast = 3
        self._fast = fast

    def close(self) -> list[Event]:
        if self._closed:
            return []
        out: list[Event] = []
        self._flush_held(out)
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
            self._forged_parts.append(held)
            self._end_forged(out)
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
        start = search = pos
        known = self._known
        while True:
            i = data.find("<", search)
            if i < 0:
                self._emit(data[start:] if start else data, out)
                return len(data)
            # Most "<" in prose ("x < 3") cannot start a tag: reject without scanning.
            tag = None if data[i + 1 : i + 2] in _NOT_TAG_START else scan_tag(data, i, known)
            if tag is None:
                search = i + 1
                continue
            if i > start:
                self._emit(data[start:i], out)
            if tag is NEED:
                self._buf = data[i:]
                self._pending = tag_set(known)
                return len(data)
            assert isinstance(tag, Tag)
            return self._on_tag(tag, out)

    def _on_tag(self, tag: Tag, out: list[Event]) -> int:
        name = tag.name
        if self.dialect == "auto":
            self._decide(name)
        if name in _THOUGHT_OPEN:
            self._resolve_response_end(out, False)
            self._enter(THOUGHT)
            if tag.self_closing:
                self._end_thought(out)
        elif name in _THOUGHT_CLOSE:
            self._end_thought(out)
        elif name == "action":
            self._open_action(tag, out)
        elif name == "execute":
            self._open_calls(tag, out)
        elif name in ("response", "respond"):
            self._open_response(tag, out)
        elif name in ("/response", "/respond"):
            self._end_response(out, self._response_final)
        elif name in _FORGED:
            self._open_forged(tag, out)
        elif name == "context_feed":
            self._open_feed(tag)
        elif name == "/context_feed":
            self._end_feed(out)
        else:  # <end>, </end>
            self._resolve_response_end(out, True)
            if not self._final_seen:
                out.append(ResponseEnd(True))
                self._final_seen = True
            self.boundary = "end"
            self._enter(TOP)
        return tag.end

    def _decide(self, name: str) -> None:
        if name in _CORTEX_ONLY:
            self._set_dialect("cortex")
        elif name in _COGENCY_ONLY:
            self._set_dialect("cogency")

    def _set_dialect(self, dialect: str) -> None:
        self.dialect = dialect
        self._tables = TABLES[dialect]
        self._known = self._tables[self._sink]

    def _enter(self, sink: int) -> None:
        super()._enter(sink)
        self._known = self._tables[sink]

    def _resume(self) -> None:
        """Back to text after an action or forged block: the thought goes on, if any."""
        self._state = S_TEXT
        if self._in_thought:
            self._in_thought = False
            self._sink = THOUGHT
            self._known = self._tables[THOUGHT]
        else:
            self._enter(TOP)

    def _end_thought(self, out: list[Event]) -> None:
        out.append(ThoughtEnd())
        self._enter(TOP)

    # -- responses -------------------------------------------------------------

    def _open_response(self, tag: Tag, out: list[Event]) -> None:
        self._resolve_response_end(out, False)
        self._response_deferred = tag.name == "respond"
        if self._response_deferred:
            final = False  # cogency: decided by what follows </respond>
        else:
            raw = tag.attrs.get("final", "true").strip().lower()
            final = raw not in _FALSE
            if raw not in _FALSE and raw not in _TRUE:
                out.append(
                    ProtocolError(
                        "invalid_field",
                        f'<response final="{tag.attrs["final"][:40]}"> should say "true" '
                        'or "false"; it was read as final="true".',
                    )
                )
        self._response_final = final
        self._enter(RESPONSE)
        if tag.self_closing:
            self._end_response(out, final)

    def _end_response(self, out: list[Event], final: bool) -> None:
        if self._response_deferred:
            self._pending_response_end = True
        else:
            out.append(ResponseEnd(final))
            if final:
                self._final_seen = True
        self._enter(TOP)

    def _resolve_response_end(self, out: list[Event], final: bool) -> None:
        """Cogency: a closed ``<respond>`` is final only if ``<end>`` follows it."""
        if self._pending_response_end:
            self._pending_response_end = False
            out.append(ResponseEnd(final))
            if final:
                self._final_seen = True

    # -- context feeds -----------------------------------------------------------

    def _open_feed(self, tag: Tag) -> None:
        self._feed_id = tag.attrs.get("id", "").strip()
        self._feed_parts = []
        self._enter(FEED)

    def _end_feed(self, out: list[Event]) -> None:
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
                )
            )
        self._enter(TOP)

    # -- actions -----------------------------------------------------------------

    def _open_action(self, tag: Tag, out: list[Event]) -> None:
        attrs = tag.attrs
        self._act_type = attrs.get("type", "tool").strip().lower() or "tool"
        self._act_mode = attrs.get("mode", "async").strip().lower() or "async"
        self._act_id, self._act_skip = self._claim_id(attrs.get("id"))
        self._in_thought = self._sink == THOUGHT
        if self._act_skip is None:
            out.append(ActionStart(self._act_id, self._act_type, self._act_mode, self._in_thought))
        self._act_parts = []
        self._act_len = 0
        self._act_big = False
        self._in_str = False
        self._esc = False
        if tag.self_closing:
            self._finish_action("", out)
        else:
            self._state = S_ACTION

    def _read_action(self, data: str, pos: int, out: list[Event]) -> int:
        """Find ``</action>`` outside JSON strings; keep the body up to it."""
        n = len(data)
        i = pos
        in_str = self._in_str
        if self._esc:
            self._esc = False
            i += 1
        while i < n:
            if in_str:
                m = _STRING_SPECIAL.search(data, i)
                if m is None:
                    break
                k = m.start()
                if data[k] == "\\":
                    if k + 1 >= n:
                        self._esc = True
                        break
                    i = k + 2
                    continue
                in_str = False
                i = k + 1
                continue
            m = _BODY_SPECIAL.search(data, i)
            if m is None:
                break
            k = m.start()
            if data[k] == '"':
                in_str = True
                i = k + 1
                continue
            end = k + _ACTION_CLOSE_LEN
            candidate = data[k:end].lower()
            if candidate == _ACTION_CLOSE:
                self._in_str = False
                self._add_body(data[pos:k], out)
                self._finish_action("".join(self._act_parts), out)
                return end
            if end > n and _ACTION_CLOSE.startswith(candidate):
                self._in_str = False
                self._add_body(data[pos:k], out)
                self._buf = data[k:]
                return n
            i = k + 1
        self._in_str = in_str
        self._add_body(data[pos:] if pos else data, out)
        return n

    def _add_body(self, text: str, out: list[Event]) -> None:
        if self._act_big or not text:
            return
        self._act_len += len(text)
        if self._act_len > self._max_action:
            self._act_big = True
            self._act_parts = []
            if self._act_skip is None:
                self._too_large_action(self._act_id, out)
            return
        self._act_parts.append(text)

    def _finish_action(self, body: str, out: list[Event]) -> None:
        self._act_parts = []
        if self._act_skip is not None:
            out.append(self._act_skip)
        elif not self._act_big:
            fields = parse_body(body, self._act_id)
            if isinstance(fields, ProtocolError):
                out.append(fields)
            else:
                result = build_action(
                    fields,
                    action_id=self._act_id,
                    type=self._act_type,
                    mode=self._act_mode,
                    in_thought=self._in_thought,
                )
                out.append(result if isinstance(result, ProtocolError) else ActionReady(result))
        self._resume()

    def _close_in_action(self, held: str, out: list[Event]) -> None:
        """End of stream inside an action body: maybe a stray quote hid its end tag."""
        body = "".join(self._act_parts) + held
        self._act_parts = []
        cut = body.lower().find(_ACTION_CLOSE)
        if cut < 0 or self._act_big:
            if self._act_skip is not None:
                out.append(self._act_skip)
            elif not self._act_big:
                out.append(self._truncated(self._act_id, body))
            self._resume()
            return
        # An unbalanced quote made us read the real </action> as string content.
        # Now that the stream is over we can see it: end the action there and read on.
        if self._act_skip is not None:
            out.append(self._act_skip)
        else:
            out.append(
                ProtocolError(
                    "invalid_json",
                    f"action {self._act_id!r}: the body has an unclosed string, so its "
                    f"</action> was only found at the end of the stream: "
                    f"{quote(body[:cut].strip())}. It was not run.",
                    self._act_id,
                )
            )
        self._resume()
        rest = body[cut + _ACTION_CLOSE_LEN :]
        pos = 0
        while pos < len(rest):
            pos = self._handlers[self._state](rest, pos, out)
        self._flush_held(out)

    # -- cogency <execute>[...]</execute> ----------------------------------------

    def _open_calls(self, tag: Tag, out: list[Event]) -> None:
        self._resolve_response_end(out, False)
        self._in_thought = self._sink == THOUGHT
        self._calls = CallScanner(self, "<", self._execute_end_at, self._in_thought)
        if tag.self_closing:
            self._end_calls(out)
        else:
            self._state = S_CALLS

    @staticmethod
    def _execute_end_at(data: str, k: int) -> bool | _Need:
        candidate = data[k : k + 10].lower()
        if candidate == "</execute>":
            return True
        if len(candidate) < 10 and "</execute>".startswith(candidate):
            return NEED
        return False

    def _read_calls(self, data: str, pos: int, out: list[Event]) -> int:
        assert self._calls is not None
        k = self._calls.scan(data, pos, out)
        if k is None:
            return len(data)
        self._end_calls(out)
        self.boundary = "execute"
        return k + 10

    def _end_calls(self, out: list[Event]) -> None:
        if self._calls is not None:
            self._calls.finish(out)
            self._calls = None
        self._resume()

    # -- forged results ------------------------------------------------------------

    def _open_forged(self, tag: Tag, out: list[Event]) -> None:
        self._forged_name = tag.name
        self._forged_close = "/" + tag.name
        self._forged_parts = []
        self._forged_len = 0
        self._in_thought = self._sink == THOUGHT
        if tag.self_closing:
            self._end_forged(out)
        else:
            self._state = S_FORGED

    def _read_forged(self, data: str, pos: int, out: list[Event]) -> int:
        known = frozenset((self._forged_close,))
        search = pos
        while True:
            i = data.find("<", search)
            if i < 0:
                self._keep_forged(data[pos:])
                return len(data)
            tag = scan_tag(data, i, known)
            if tag is None:
                search = i + 1
                continue
            self._keep_forged(data[pos:i])
            if tag is NEED:
                self._buf = data[i:]
                return len(data)
            assert isinstance(tag, Tag)
            self._end_forged(out)
            return tag.end

    def _keep_forged(self, text: str) -> None:
        # Only a quote of it goes into the message; don't keep megabytes of it.
        if self._forged_len < 1000:
            self._forged_parts.append(text[:1000])
        self._forged_len += len(text)

    def _end_forged(self, out: list[Event]) -> None:
        text = "".join(self._forged_parts).strip()
        self._forged_parts = []
        out.append(
            ProtocolError(
                "forged_result",
                f"ignored a <{self._forged_name}> block written by the model: results come "
                f"only from running the actions. It said: {quote(text)}",
            )
        )
        self._resume()
