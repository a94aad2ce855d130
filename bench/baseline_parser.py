"""The comparison baseline: the Cortex parser a competent engineer writes first.

A plain character-by-character state machine: every character of every chunk
goes through one Python loop iteration and is appended to a buffer. No bulk
scanning (``str.find``), no regexes on the hot path, no slicing tricks. It is
deliberately *unoptimised* but *correct* on the benchmark corpus, so that the
benchmark's "faster than the baseline" line means something: the real parser
must beat the obvious approach without giving up its results.

What it handles (enough for ``bench/corpus.py`` and the contract's shape):

* ``<thought>`` (aliases ``<think>``, ``<thinking>``) ... any of the three closing tags;
* ``<action type=.. mode=.. id=..>`` + body up to the first ``</action>``
  *outside JSON strings* (string/escape tracking), actions inside thoughts;
* ``<response [final="false"]>`` ... ``</response>`` where everything inside
  is text;
* text outside blocks as ``TextDelta``; deltas are flushed once per ``feed`` and
  only a possible half-arrived tag is held back;
* the real parser's whitespace rule (``Parser._emit`` in
  ``cortex_jupyter/protocol/base.py``), without which the joined texts could not
  be compared: a block's leading whitespace is not part of its text; loose text
  outside blocks also loses its trailing whitespace (held until something
  visible follows). An action inside a thought does not end the thought, so a
  thought that has not shown anything yet still drops leading whitespace after it.

What it leaves out on purpose (the real parser's job, not needed to time the
corpus): context feeds, forged ``<result>`` detection, ``action_after_final``,
size limits and most field validation. Bodies that are not a JSON object with a
string ``name`` become a ``ProtocolError`` rather than being dropped.
"""

from __future__ import annotations

import json
import re
from typing import Any

# The events module alone: the baseline shares the real parser's vocabulary, not its code.
from cortex_jupyter.protocol import events as ev

__all__ = ["BaselineParser"]

_OUTSIDE, _THOUGHT, _RESPONSE, _BODY = "outside", "thought", "response", "body"

# Tags that may start in each text state. Entries without a closing ``>`` take
# attributes: they are complete once followed by whitespace or ``>``.
_OPEN_THOUGHT = ("<thought>", "<think>", "<thinking>")
_TAGS: dict[str, tuple[str, ...]] = {
    _OUTSIDE: (*_OPEN_THOUGHT, "<action", "<response"),
    _THOUGHT: ("</thought>", "</think>", "</thinking>", "<action"),
    _RESPONSE: ("</response>",),
}
_CLOSE_ACTION = "</action>"
_ATTR = re.compile(r"""([A-Za-z_][\w-]*)\s*=\s*(?:"([^"]*)"|'([^']*)')""")


class BaselineParser:
    """Same ``feed(chunk) -> list[Event]`` / ``close() -> list[Event]`` shape as the real parser."""

    def __init__(self) -> None:
        self._state = _OUTSIDE
        self._text: list[str] = []  # text of the current block not yet emitted
        self._fresh = True  # nothing visible emitted yet in the current block
        self._hold = ""  # loose text's trailing whitespace, waiting for visible text
        self._tag = ""  # a possible tag, from its "<" (held back until decided)
        self._attrs: list[str] | None = None  # attributes of an opening tag being read
        self._attr_quote = ""  # quote char while inside an attribute value
        self._tag_name = ""  # "<action" or "<response" while reading attributes
        self._body: list[str] = []
        self._in_string = False
        self._escape = False
        self._close_match = 0  # how much of "</action>" the body has matched
        self._action_return = _OUTSIDE  # the state an action body returns to
        self._action_attrs: dict[str, str] = {}
        self._final = True  # the current response's `final` attribute
        self._seen_ids: set[str] = set()
        self._auto_id = 0

    # -- public -----------------------------------------------------------------

    def feed(self, chunk: str) -> list[ev.Event]:
        out: list[ev.Event] = []
        for ch in chunk:
            self._step(ch, out)
        self._flush(out)
        return out

    def close(self) -> list[ev.Event]:
        out: list[ev.Event] = []
        if self._attrs is not None:  # an opening tag never finished: it was text
            self._text.append(self._tag_name + "".join(self._attrs))
            self._attrs = None
        if self._tag:
            self._text.append(self._tag)
            self._tag = ""
        if self._state == _BODY:
            body = "".join(self._body) + _CLOSE_ACTION[: self._close_match]
            aid = self._action_attrs.get("id")
            out.append(
                ev.ProtocolError(
                    "truncated_action", f"stream ended inside action: {body[:80]!r}", aid
                )
            )
            self._state = self._action_return
        self._flush(out)
        if self._state == _THOUGHT:
            out.append(ev.ThoughtEnd())
        elif self._state == _RESPONSE:
            out.append(ev.ResponseEnd(self._final))
        self._enter(_OUTSIDE)
        return out

    # -- the state machine ------------------------------------------------------------

    def _step(self, ch: str, out: list[ev.Event]) -> None:
        if self._state == _BODY:
            self._body_char(ch, out)
        elif self._attrs is not None:
            self._attr_char(ch, out)
        elif self._tag:
            self._tag_char(ch, out)
        elif ch == "<":
            self._tag = "<"
        else:
            self._text.append(ch)

    def _tag_char(self, ch: str, out: list[ev.Event]) -> None:
        candidate = self._tag + ch
        tags = _TAGS[self._state]
        # A tag that takes attributes is complete at whitespace or ">".
        if (
            self._tag in ("<action", "<response")
            and self._tag in tags
            and (ch.isspace() or ch == ">")
        ):
            self._tag_name = self._tag
            self._tag = ""
            self._attrs = [] if ch == ">" else [ch]
            if ch == ">":
                self._open_tag(out)
            return
        if any(t.startswith(candidate) for t in tags):
            if candidate in tags and candidate.endswith(">"):
                self._tag = ""
                self._simple_tag(candidate, out)
            else:
                self._tag = candidate
            return
        # Not a tag after all: it was text; the current char may start a new tag.
        self._text.append(self._tag)
        self._tag = ""
        self._step(ch, out)

    def _attr_char(self, ch: str, out: list[ev.Event]) -> None:
        assert self._attrs is not None
        if self._attr_quote:
            if ch == self._attr_quote:
                self._attr_quote = ""
        elif ch in "\"'":
            self._attr_quote = ch
        elif ch == ">":
            self._open_tag(out)
            return
        self._attrs.append(ch)

    def _simple_tag(self, tag: str, out: list[ev.Event]) -> None:
        self._flush(out)
        if self._state == _OUTSIDE:  # an opening thought tag
            self._enter(_THOUGHT)
        elif self._state == _THOUGHT:
            out.append(ev.ThoughtEnd())
            self._enter(_OUTSIDE)
        else:  # </response>
            out.append(ev.ResponseEnd(self._final))
            self._enter(_OUTSIDE)

    def _open_tag(self, out: list[ev.Event]) -> None:
        assert self._attrs is not None
        attrs = {
            m.group(1): m.group(2) if m.group(2) is not None else m.group(3)
            for m in _ATTR.finditer("".join(self._attrs))
        }
        self._attrs = None
        self._flush(out)
        if self._tag_name == "<response":
            self._final = attrs.get("final", "true").strip().lower() != "false"
            self._enter(_RESPONSE)
            return
        if "id" not in attrs:
            self._auto_id += 1
            attrs["id"] = f"action_{self._auto_id}"
        self._action_attrs = attrs
        self._action_return = self._state
        self._state = _BODY
        self._body = []
        self._in_string = self._escape = False
        self._close_match = 0
        out.append(
            ev.ActionStart(
                attrs["id"],
                attrs.get("type", "tool"),
                attrs.get("mode", "async"),
                in_thought=self._action_return == _THOUGHT,
            )
        )

    def _body_char(self, ch: str, out: list[ev.Event]) -> None:
        if self._in_string:
            self._body.append(ch)
            if self._escape:
                self._escape = False
            elif ch == "\\":
                self._escape = True
            elif ch == '"':
                self._in_string = False
            return
        if ch == _CLOSE_ACTION[self._close_match]:
            self._close_match += 1
            if self._close_match == len(_CLOSE_ACTION):
                self._finish_action(out)
            return
        if self._close_match:  # a partial "</action>" that was body after all
            self._body.append(_CLOSE_ACTION[: self._close_match])
            self._close_match = 0
            if ch == "<":
                self._close_match = 1
                return
        self._body.append(ch)
        if ch == '"':
            self._in_string = True

    def _finish_action(self, out: list[ev.Event]) -> None:
        body = "".join(self._body).strip()
        self._body = []
        if self._action_return == _THOUGHT:
            self._state = _THOUGHT  # the thought goes on, held whitespace and all
        else:
            self._enter(_OUTSIDE)
        attrs = self._action_attrs
        aid = attrs["id"]
        if body.startswith("```"):  # a body wrapped in a markdown code fence
            body = body.split("\n", 1)[1] if "\n" in body else ""
            body = body.rstrip().removesuffix("```")
        try:
            data: Any = json.loads(body)
        except ValueError as exc:
            out.append(ev.ProtocolError("invalid_json", f"action {aid}: {exc}: {body[:80]!r}", aid))
            return
        if not isinstance(data, dict):
            out.append(
                ev.ProtocolError(
                    "body_not_object", f"action {aid}: body is not an object: {body[:80]!r}", aid
                )
            )
            return
        if not isinstance(data.get("name"), str):
            out.append(
                ev.ProtocolError(
                    "missing_name", f"action {aid}: no string 'name': {body[:80]!r}", aid
                )
            )
            return
        atype, mode = attrs.get("type", "tool"), attrs.get("mode", "async")
        if atype not in ev.ACTION_TYPES:
            out.append(
                ev.ProtocolError("unknown_type", f"action {aid}: unknown type {atype!r}", aid)
            )
            return
        if mode not in ev.ACTION_MODES:
            out.append(
                ev.ProtocolError("unknown_mode", f"action {aid}: unknown mode {mode!r}", aid)
            )
            return
        if aid in self._seen_ids:
            out.append(ev.ProtocolError("duplicate_id", f"action {aid}: duplicate id", aid))
            return
        self._seen_ids.add(aid)
        out.append(
            ev.ActionReady(
                ev.Action(
                    id=aid,
                    name=data["name"],
                    type=atype,
                    mode=mode,
                    parameters=data.get("parameters") or {},
                    output_key=data.get("output_key"),
                    depends_on=tuple(data.get("depends_on") or ()),
                    timeout=data.get("timeout"),
                    retry=data.get("retry", 0),
                    on_error=data.get("on_error", "fail"),
                    in_thought=self._action_return == _THOUGHT,
                )
            )
        )

    def _enter(self, state: str) -> None:
        """Start a new block (or a new stretch of loose text)."""
        self._state = state
        self._fresh = True
        self._hold = ""

    def _flush(self, out: list[ev.Event]) -> None:
        """Emit the pending text of the current block as one delta (whitespace rule above)."""
        if not self._text:
            return
        text = "".join(self._text)
        self._text = []
        if self._fresh:
            text = text.lstrip()
            if not text:
                return
            self._fresh = False
        if self._state == _OUTSIDE:
            text = self._hold + text
            visible = text.rstrip()
            self._hold = text[len(visible) :]
            if not visible:
                return
            text = visible
        if self._state == _THOUGHT:
            out.append(ev.ThoughtDelta(text))
        elif self._state == _RESPONSE:
            out.append(ev.ResponseDelta(text, self._final))
        else:
            out.append(ev.TextDelta(text))
