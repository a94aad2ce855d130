"""A typed answer (``Agent(output_type=T)``, ``--output T``) as the view shows it.

In a typed run the answer is a JSON value, bare or in one ```json fence. While the model
writes it, the view shows the object filling in, as the inspector's collapsible tree
(``rich.tree_html``), not as JSON characters; once the runtime has validated it
(``OutputChecked``), the object it validated, or what did not fit.

- **What is the answer.** The text (response and outside text) of the current turn since
  its last action. Text a turn wrote before an action was an interim message: it goes to
  the answer's markdown like any other (``ViewState``), and so does everything of an
  untyped run. A new turn (a retry) starts a new answer, which replaces the object shown.
- **Text before the JSON** (``Here it is:`` before the fence) is shown as text; the fence's
  opening line is dropped as it arrives (a trailing backtick or two is held back: it may
  be a fence's start).
- **Parsed when drawn, not per delta.** ``feed`` only appends; ``partial`` joins and
  parses the text when a view asks (at most ~25 times a second), with pydantic-core's
  partial JSON mode (``from_json(..., allow_partial="trailing-strings")``: a string still
  being written is kept, an unfinished key or literal is left out). The last parse is
  kept until the text grows, so a static copy drawn after the live view costs nothing.
- **Only values that are written.** A number at the very end of the text may still grow
  (``1`` of ``1e-05``): it is left out until something follows it. So every leaf shown is
  a prefix of the final one.
- **Secrets.** The tree shows every leaf through ``secrets.Repr`` (redacted); the string
  still being written may end with a secret's first characters, so its edge is hidden
  (``secrets.hide_edges``) until the object is checked.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic_core import from_json

from cortex_jupyter.runtime.core.trust import secrets

from .rich import pre, tree_html
from .theme import FONT, MONO, MUTED_VAR, esc, shorten, style_for

FENCE = "```"
#: Characters that may start a bare JSON value (``t``/``f``/``n`` only as a literal).
_VALUE_START = frozenset('{["-0123456789')
_LITERALS = ("true", "false", "null")
#: A number may still be growing when the text ends with one of these.
_NUMBER_CHARS = frozenset("0123456789.eE+-")
#: Longest error line shown, and how many of them.
_ERROR_CHARS, _ERRORS_SHOWN = 300, 8
#: Characters of the object's text form the static copy keeps.
TEXT_CHARS = 20_000
#: No value parsed yet.
_NOTHING: Any = object()
#: The text is not JSON (not merely unfinished): it is shown as text.
_INVALID: Any = object()


@dataclass(frozen=True)
class Split:
    """An answer's text cut in three: ``prose`` before the JSON (shown as text), the
    ``json`` text so far (fence stripped), and whether the JSON has ``started``."""

    prose: str
    json: str
    started: bool


def split_answer(text: str) -> Split:
    """Where the JSON starts in an answer's text (see the module docstring): a bare
    object or array from the first character on (a ``"```"`` inside it is data), else
    one fence's content, else a bare value, else a line that opens an object."""
    stripped = text.lstrip()
    fence = text.find(FENCE)
    if stripped[:1] in ("{", "[") or fence < 0:
        start = _bare_start(text)
        if start is None:  # a backtick or two at the end may be a fence's beginning
            return Split(text.rstrip("`"), "", False)
        return Split(text[:start], text[start:], True)
    line_end = text.find("\n", fence + len(FENCE))
    if line_end < 0:  # the fence's opening line is still arriving
        return Split(text[:fence], "", False)
    body = text[line_end + 1 :]
    close = 0 if body.startswith(FENCE) else body.find("\n" + FENCE)
    return Split(text[:fence], body if close < 0 else body[:close], True)


def _bare_start(text: str) -> int | None:
    """Where a bare JSON value starts: at the first non-blank character when it can
    start one (the whole answer is the value), else at a line that opens an object."""
    stripped = text.lstrip()
    if stripped:
        first = stripped[0]
        word = stripped[:5]
        if first in _VALUE_START or any(lit.startswith(word) for lit in _LITERALS):
            return len(text) - len(stripped)
    at = text.find("\n{")
    return None if at < 0 else at + 1


def parse_partial(text: str, complete: bool = False) -> Any:
    """The value ``text`` (a JSON prefix) holds so far, ``_NOTHING`` when none yet, or
    ``_INVALID`` when it is not JSON (see the module docstring: a number at the end is
    left out until it is ``complete``, the reply having ended)."""
    try:
        value = from_json(text, allow_partial="trailing-strings")
    except ValueError as exc:  # unfinished (at its end) or not JSON at all
        return _NOTHING if "EOF" in str(exc) else _INVALID
    if complete or text[-1:] not in _NUMBER_CHARS:
        return value
    if _is_number(value):
        return _NOTHING
    place = _last_place(value)
    if place is not None and _is_number(place[0][place[1]]):
        del place[0][place[1]]
    return value


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _last_place(value: Any) -> tuple[Any, Any] | None:
    """``(container, key)`` of the last leaf in document order, or None."""
    place = None
    for _ in range(10_000):  # JSON nests at most a few thousand deep (jiter's limit)
        if isinstance(value, dict) and value:
            key = next(reversed(value))
        elif isinstance(value, list) and value:
            key = len(value) - 1
        else:
            return place
        place, value = (value, key), value[key]
    return place


def _edge_hidden(value: Any) -> Any:
    """``value`` with the end of its last string (the one still being written) hidden
    when it is a secret's beginning."""
    if isinstance(value, str):
        return secrets.hide_edges(value, start=False)
    place = _last_place(value)
    if place is not None and isinstance(place[0][place[1]], str):
        place[0][place[1]] = secrets.hide_edges(place[0][place[1]], start=False)
    return value


@dataclass
class TypedAnswer:
    """What a view knows of a typed run's answer (``ViewState.typed``)."""

    type: str
    schema: Any = None
    turn: int = 0
    attempt: int = 0
    ok: bool | None = None  # the last check's verdict (None: none yet)
    value: Any = None  # the checked object's JSON form
    errors: tuple[str, ...] = ()
    checked_turn: int | None = None
    #: The reply holding the answer has ended: what it wrote is all there is.
    complete: bool = False
    _failed: Any = field(default=_NOTHING, repr=False)  # the object that did not fit
    _chunks: list[str] = field(default_factory=list, repr=False)
    _parsed: tuple[int, Split, Any] | None = field(default=None, repr=False)

    @property
    def text(self) -> str:
        return "".join(self._chunks)

    def feed(self, text: str) -> None:
        """More of the current answer's text (cheap: parsed only when drawn)."""
        self._chunks.append(text)
        self.complete = False

    def restart(self, turn: int | None = None) -> None:
        """A new answer begins (a new turn, or text after an action): the old one goes."""
        if turn is not None:
            self.turn = turn
        self._chunks.clear()
        self._parsed = None
        self.complete = False

    def close(self) -> None:
        """The reply ended (its response block closed, its turn or the run ended)."""
        if not self.complete:
            self.complete = True
            self._parsed = None

    def check(self, event: Any) -> None:
        self.attempt = int(getattr(event, "attempt", self.attempt + 1))
        self.ok = bool(getattr(event, "ok", False))
        self.value = getattr(event, "value", None)
        self.errors = tuple(str(e) for e in getattr(event, "errors", ()) or ())
        self.checked_turn = int(getattr(event, "turn", self.turn) or self.turn)
        self._failed = _NOTHING if self.ok else self.partial()

    @property
    def pending(self) -> bool:
        """Whether an answer newer than the last check has begun (a retry's)."""
        if self.checked_turn is not None and self.turn <= self.checked_turn:
            return False
        return self.split().started

    def split(self) -> Split:
        return self._parse()[0]

    def partial(self) -> Any:
        """The current answer's object so far (``_NOTHING`` before it starts)."""
        return self._parse()[1]

    def _parse(self) -> tuple[Split, Any]:
        size = sum(len(c) for c in self._chunks)
        if self._parsed is not None and self._parsed[0] == size:
            return self._parsed[1], self._parsed[2]
        text = self.text
        self._chunks[:] = [text] if text else []  # joined once, not on every redraw
        split = split_answer(text)
        value = parse_partial(split.json, self.complete) if split.started else _NOTHING
        if value is _NOTHING and self._parsed is not None and self._parsed[2] is not _INVALID:
            value = self._parsed[2]  # a parse that fails mid-token keeps the last one
        self._parsed = (size, split, value)
        return split, value

    def shown(self) -> tuple[Any, bool]:
        """``(object, checked)``: the object to show and whether it is the checked one;
        ``_NOTHING`` when nothing is written yet."""
        if self.ok is not None and not self.pending:
            return (self.value, True) if self.ok else (self._failed, False)
        value = self.partial()
        if value is _NOTHING or value is _INVALID:
            return value, False
        return _edge_hidden(_copy(value)), False

    def shown_errors(self) -> tuple[str, ...]:
        return () if self.ok is not False or self.pending else self.errors


def _copy(value: Any) -> Any:
    """A copy of the last path of ``value`` (the part ``_edge_hidden`` may change)."""
    if isinstance(value, dict):
        out = dict(value)
        if out:
            key = next(reversed(out))
            out[key] = _copy(out[key])
        return out
    if isinstance(value, list):
        items = list(value)
        if items:
            items[-1] = _copy(items[-1])
        return items
    return value


# ---- drawing ---------------------------------------------------------------------------


def typed_shows(answer: TypedAnswer | None) -> bool:
    """Whether a typed answer has something to show (text, an object, a verdict)."""
    if answer is None:
        return False
    split = answer.split()
    return bool(split.started or split.prose.strip() or answer.ok is not None)


def typed_html(answer: TypedAnswer, *, live: bool = True) -> str:
    """The typed answer: text before the JSON, the object as a tree, what did not fit.
    ``live``: the text may still grow (its end may be a secret's beginning)."""
    split = answer.split()
    value, checked = answer.shown()
    parts = []
    # A text answer (``--output str``) is its own value: shown once, as the value.
    prose = "" if checked and not split.started else split.prose.strip()
    if prose:
        text = secrets.redact(prose)
        if live and not split.started:
            text = secrets.hide_edges(text, start=False)
        parts.append(
            f'<div style="white-space:pre-wrap;word-break:break-word;margin:2px 0">'
            f"{esc(text)}</div>"
        )
    if value is _INVALID:  # not JSON: what the model wrote, as text
        parts.append(_title(answer, False))
        text = secrets.redact(split.json)  # before the edge: a whole secret goes first
        parts.append(pre(secrets.hide_edges(text, start=False) if live else text))
    elif value is not _NOTHING:
        parts.append(_title(answer, checked))
        parts.append(tree_html(value) if isinstance(value, Mapping | list) else pre(_scalar(value)))
    elif split.started:  # an answer that has begun but holds no value yet
        parts.append(_title(answer, False))
    parts.append(_errors(answer.type, answer.shown_errors()))
    return (
        f'<div class="cortex-typed" style="font-family:{esc(FONT)};font-size:12.5px;'
        f'margin:2px 0">{"".join(parts)}</div>'
    )


def _title(answer: TypedAnswer, checked: bool) -> str:
    if checked:
        word = "the answer"
    elif answer.ok is False and not answer.pending:
        word = "the answer, which did not fit"
    else:
        word = "the answer, as it is written"
    return (
        f'<div style="color:{MUTED_VAR};font-family:{esc(MONO)}">'
        f"{esc(shorten(answer.type, 200))} · {esc(word)}</div>"
    )


def _scalar(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False) if isinstance(value, str) else repr(value)


def _errors(type_name: str, errors: tuple[str, ...]) -> str:
    if not errors:
        return ""
    style = style_for("failed")
    rows = "".join(f"<li>{esc(shorten(e, _ERROR_CHARS))}</li>" for e in errors[:_ERRORS_SHOWN])
    more = len(errors) - _ERRORS_SHOWN
    if more > 0:
        rows += f"<li>… {more:,} more</li>"
    return (
        f'<div class="cortex-typed-errors" style="background:{style.fill};color:{style.ink};'
        f'border-left:3px solid {style.stroke};border-radius:4px;padding:2px 10px;margin:2px 0">'
        f"{style.icon} It does not fit {esc(shorten(type_name, 200))}:"
        f'<ul style="margin:0;padding-left:1.2em">{rows}</ul></div>'
    )


def typed_text(answer: TypedAnswer) -> str:
    """The typed answer as text (the static copy's text/plain): the object as indented
    JSON, secrets redacted before the cut, then what did not fit."""
    value, checked = answer.shown()
    prose = secrets.redact(answer.split().prose.strip())
    lines = [prose] if prose else []
    if value is _INVALID:
        written = secrets.head(secrets.redact(answer.split().json), TEXT_CHARS)
        lines += [f"Answer ({answer.type}), not JSON:", written]
    elif value is not _NOTHING:
        try:
            dumped = json.dumps(secrets.redact_value(value), indent=2, ensure_ascii=False)
        except (TypeError, ValueError):
            dumped = secrets.safe_repr(value, limit=TEXT_CHARS)
        state = "" if checked else " (not checked)"
        shown = secrets.head(secrets.redact(dumped), TEXT_CHARS)
        lines += [f"Answer ({answer.type}){state}:", shown]
    errors = answer.shown_errors()
    if errors:
        lines += ["It does not fit:", *(f"  - {shorten(e, _ERROR_CHARS)}" for e in errors)]
    return "\n".join(lines)
