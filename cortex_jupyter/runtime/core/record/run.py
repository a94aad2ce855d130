"""The run record: everything one run did, kept as it happened, and its JSONL transcript.

A ``Run`` holds every event (the parser's and the runtime's, with the time each was
seen), the action nodes, the thought/response/text, the variables bound and the
notes the runtime left (refused variable names...). ``to_jsonl()`` writes a transcript
— a header, one line per event, then the final state of every node and the variables;
``Run.from_jsonl()`` reads it back into an equivalent record (outputs that were not
JSON come back as their short repr). ``load_events()`` gives the timed events alone,
to feed a display or a scheduler again.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import os
import time
import uuid
from collections import ChainMap
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeVar, cast, get_args

from cortex_jupyter.protocol.actions import too_deep
from cortex_jupyter.protocol.events import (
    Action,
    ActionReady,
    Event,
    ProtocolError,
    ResponseDelta,
    ResponseEnd,
    TextDelta,
    ThoughtDelta,
    event_to_dict,
)
from cortex_jupyter.runtime.core.cost.prices import total
from cortex_jupyter.runtime.core.errors import TranscriptError
from cortex_jupyter.runtime.core.events import (
    RUN_EVENT_TYPES,
    AnyEvent,
    Cost,
    Metric,
    Nested,
    OutputChecked,
    Progress,
    Turn,
    TurnEnd,
)
from cortex_jupyter.runtime.core.model.chunks import ModelChunk
from cortex_jupyter.runtime.core.record.graph import NOT_STARTED, STATUSES, ActionNode
from cortex_jupyter.runtime.core.record.joining import joined_where_secret
from cortex_jupyter.runtime.core.trust.bounded import failed
from cortex_jupyter.runtime.core.trust.secrets import Repr, clip, redact, redact_value, shorten
from cortex_jupyter.runtime.core.values.answer import fill

TRANSCRIPT_FORMAT = "cortex_jupyter.run"
TRANSCRIPT_VERSION = 1
MAX_JSON_OUTPUT = 1 << 20
_TURN_BREAK = "\n\n"  # between the text of one agent turn and the next
_BLOCK_BREAK = "\n\n"  # between two response blocks: separate paragraphs

_R = TypeVar("_R", bound="Run")
_PARSER_EVENT_TYPES: dict[str, type[Any]] = {cls.kind: cls for cls in get_args(Event)}
_CHUNK_TYPES = frozenset(cls.kind for cls in get_args(ModelChunk))
_repr = Repr(limit=160, items=8)  # bounded, secrets redacted before its cuts
_NODE_FIELDS = (
    "name", "type", "mode", "parent", "status", "error", "submitted", "started", "finished",
    "attempts", "note", "stdout", "stderr", "source",
)  # fmt: skip


def summarize(value: Any) -> str:
    """A short one-line repr of any value (for events and non-JSON outputs), secrets
    redacted before it is cut: it is what the view shows of an output. Bounded: it never
    makes the full repr of a large value (``runtime.core.trust.bounded``)."""
    try:
        return _repr.repr(value).replace("\n", " ")
    except Exception as exc:  # a broken __repr__ must not break the run record
        return failed(value, "repr", exc)


def brief_json(value: Any, limit: int = 600) -> str:
    """``value`` as JSON where it is JSON (a short repr for what is not), cut to
    ``limit`` characters, secrets redacted: how parameters are shown."""
    try:
        shown = _head(value, limit)
        text = json.dumps(shown, ensure_ascii=False, default=summarize, allow_nan=True)
    except Exception:  # not JSON, or an object whose items(), __iter__... raise
        text = summarize(value)
    return shorten(text, limit)


def _head(value: Any, limit: int, depth: int = 0) -> Any:
    """The part of a JSON-like ``value`` whose JSON starts as the whole value's does, for
    its first ``limit`` characters: strings, lists and dicts cut to ``limit`` (so a
    huge parameter is never dumped whole just to show its start)."""
    if isinstance(value, str):  # redacted, then cut: no part of a secret at the cut
        return clip(value, limit + 1)[0]
    if depth > 32:
        return value
    if isinstance(value, dict):
        return {k: _head(v, limit, depth + 1) for k, v in itertools.islice(value.items(), limit)}
    if isinstance(value, list | tuple):
        return [_head(v, limit, depth + 1) for v in itertools.islice(value, limit)]
    return value


def user_path(path: str | os.PathLike[str]) -> Path:
    """``path`` as a person means it: ``~`` is their home, ``$VAR`` an environment
    variable (an unknown one is kept as written)."""
    return Path(os.path.expanduser(os.path.expandvars(os.fspath(path))))


class OutputRepr(str):
    """The short repr standing in for an output that was not JSON (in a replayed run)."""

    __slots__ = ()


def kept(node: ActionNode) -> bool:
    """Whether a resumed run keeps ``node`` as it ended rather than running it again.

    An action that ended on its own (done, failed, skipped by a refusal or a denial) is
    kept; one the stop caught (pending, awaiting, running, cancelled, skipped because
    the run stopped or because of a dependency, which is decided again) runs again, and
    so does a ``done`` one whose output was not kept whole: its stand-in (``OutputRepr``:
    a value that was not JSON in a transcript, or one the store held redacted) is not
    the value its ``output_key`` bound.
    """
    if node.status == "done":
        return not isinstance(node.output, OutputRepr)
    if node.status == "skipped":
        reason = node.error or ""
        return reason != NOT_STARTED and not reason.startswith("depends on ")
    return node.status == "failed"


def to_json_value(value: Any) -> tuple[Any, bool]:
    """(value, False) when ``value`` is JSON (and neither huge nor nested deeper than
    ``MAX_JSON_DEPTH``), else (short repr, True). Never raises: a value whose own
    methods raise is shown by its short repr (or says its repr failed)."""
    if isinstance(value, OutputRepr):
        return str(value), True
    if isinstance(value, str) and str.__len__(value) > MAX_JSON_OUTPUT:
        return summarize(value), True  # not a copy of all of it first
    try:
        text = json.dumps(value, allow_nan=False)
    except Exception:  # not JSON, or an object whose items(), __iter__... raise
        return summarize(value), True
    if len(text) > MAX_JSON_OUTPUT or too_deep(text):
        return summarize(value), True
    return json.loads(text), False


@dataclass(eq=False)
class _Block:
    """One response block (or a plain-text answer): its text and whether it was final
    (``None`` while nothing has said so)."""

    parts: list[str] = field(default_factory=list)
    final: bool | None = None


@dataclass(eq=False, repr=False)
class Run:
    """One run: its events, action nodes, text and variables (the notebook's ``_cortex``).

    ``answer`` is what a person reads as the run's answer; ``response`` the raw text the
    model wrote in response blocks. ``reach`` is what ``$name`` in the answer may show
    besides the run's own outputs (the names the model could reach, and the context
    feeds); the runtime sets it when the run starts.
    """

    id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    actions: dict[str, ActionNode] = field(default_factory=dict)
    events: list[AnyEvent] = field(default_factory=list)
    event_times: list[float] = field(default_factory=list, repr=False)
    variables: dict[str, Any] = field(default_factory=dict, repr=False)
    errors: list[ProtocolError] = field(default_factory=list, repr=False)
    notes: list[str] = field(default_factory=list, repr=False)
    started: float = field(default_factory=time.monotonic)
    ended: float | None = None
    status: str = "running"
    final: bool | None = None
    model: str | None = None
    turns: int = 0
    reason: str | None = None
    #: The validated answer object of a typed run (``Agent(output_type=T)``); None when
    #: the run is not typed or its answer never fit. A run read back from a transcript
    #: has the object's JSON form here (the type itself is not in the transcript).
    output: Any = field(default=None, repr=False)
    _thought: list[str] = field(default_factory=list, repr=False)
    _response: list[str] = field(default_factory=list, repr=False)
    _text: list[str] = field(default_factory=list, repr=False)
    _breaks: list[list[str]] = field(default_factory=list, repr=False)
    _turn_text: list[str] = field(default_factory=list, repr=False)
    _blocks: list[_Block] = field(default_factory=list, repr=False)
    _open: _Block | None = field(default=None, repr=False)
    _retrying: bool = field(default=False, repr=False)  # a typed answer was sent back
    reach: Mapping[str, Any] | None = field(default=None, repr=False)
    #: Whose words a reason uses for what to do next: "api" (``Agent.continue_run``,
    #: ``max_turns=``) or "magic" (``%cortex continue``, ``--max-turns``).
    words: ClassVar[str] = "api"

    @property
    def thought(self) -> str:
        return joined(self._thought)

    @property
    def response(self) -> str:
        """The raw text of every response block, interim ones included, as the model
        wrote it (``$name`` unfilled); blocks are separate paragraphs. The answer a
        person reads is ``answer``."""
        return joined(self._response)

    @property
    def final_response(self) -> str:
        """The answer as the model wrote it (``$name`` not filled): ``answer``'s source."""
        finals = [b for b in self._blocks if b.final]
        if not finals and self._blocks and self._blocks[-1].final is None:
            finals = self._blocks[-1:]  # cut off before anything decided: what arrived
        return _BLOCK_BREAK.join(t for t in (joined(b.parts).strip() for b in finals) if t)

    @property
    def answer(self) -> str:
        """The final answer as the view shows it: the final response blocks (interim
        replies of earlier turns, and a response followed by actions, left out), or the
        reply itself when it was plain text, with each ``$name`` that has a value
        filled in whole (``runtime.core.values.answer``'s rule: math stays math)."""
        source = self.final_response
        if "$" not in source:
            return source
        values: Mapping[str, Any] = self.variables
        if self.reach is not None:
            values = ChainMap(self.variables, self.reach)  # type: ignore[arg-type]
        return fill(source, values)

    @property
    def text(self) -> str:
        """Text the model wrote outside any block."""
        return joined(self._text)

    @property
    def usage(self) -> dict[str, int]:
        """Tokens the model reported for every request of the run (its turns, its ``llm``
        actions, its context summaries, its nested agents'), the same requests ``cost``
        and the budget count: ``prompt_tokens``, ``completion_tokens``, and
        ``cached_tokens`` (the part of ``prompt_tokens`` the server read from its prompt
        cache, priced lower) when the server reported any."""
        totals = {"prompt_tokens": 0, "completion_tokens": 0, "cached_tokens": 0}
        for event in map(_unnest, self.events):
            if isinstance(event, Metric) and event.name in totals:
                totals[event.name] += int(event.value)
        if not totals["cached_tokens"]:
            del totals["cached_tokens"]
        return totals

    @property
    def costs(self) -> list[Cost]:
        """Each request's price, in order, its nested agents' included."""
        return [event for event in map(_unnest, self.events) if isinstance(event, Cost)]

    @property
    def cost(self) -> float | None:
        """What the run cost in US dollars, its nested agents' requests included: the sum
        of each request's price (``runtime.core.cost.prices``); None when any request's price is
        not known (never 0 for a price not known), and for a record of turns that kept no
        prices (a transcript older than prices)."""
        costs = self.costs
        if not costs and self.turns:
            return None
        return total(c.usd for c in costs)

    @property
    def cost_note(self) -> str:
        """How the cost was priced (whose prices, of which date), or why it is not known:
        each distinct note of the run's requests, one per line."""
        return "\n".join(dict.fromkeys(c.note for c in self.costs if c.note))

    def record(self, event: AnyEvent, at: float | None = None) -> None:
        """Append an event, and keep the text fields up to date.

        Thought, response and loose text accumulate over the turns of an agent run; a
        blank line separates what one turn wrote from the next.
        """
        self.events.append(event)
        self.event_times.append(time.monotonic() if at is None else at)
        if isinstance(event, ThoughtDelta):
            self._append(self._thought, event.text)
        elif isinstance(event, ResponseDelta):
            self._response_text(event.text)
        elif isinstance(event, TextDelta):
            self._append(self._text, event.text)
            self._turn_text.append(event.text)
        elif isinstance(event, ResponseEnd):
            self.final = event.final
            if self._open is not None:
                self._open.final = event.final
                self._open = None
        elif isinstance(event, ProtocolError):
            self.errors.append(event)
        elif isinstance(event, OutputChecked):
            # The JSON form; a live run puts the object itself here right after.
            self.output = event.value if event.ok else None
            self._retrying = not event.ok
        elif isinstance(event, Turn):
            if self._retrying:  # the answer that did not fit was not the answer after all
                self._retrying = False
                for block in self._blocks:
                    block.final = False if block.final else block.final
            self.turns = max(self.turns, event.number)
            if event.model is not None:
                self.model = event.model
            self._turn_text = []
            if not event.cut:
                self._breaks = [self._thought, self._text]
            # A reply that reads on inside a cut response goes on in its block.
            self._open = self._blocks[-1] if event.cut == "response" and self._blocks else None
        elif isinstance(event, TurnEnd) and event.answer:
            # A plain-text reply is the answer: the text becomes the response as well.
            answer = "".join(self._turn_text).strip()
            if answer:
                self._response_text(answer)
                assert self._open is not None
                self._open.final, self._open = True, None
                self.final = True

    def _response_text(self, text: str) -> None:
        """A response delta: the first one of a block opens it, a paragraph after the
        blocks before it (of this turn or an earlier one)."""
        if self._open is None:
            self._open = _Block()
            self._blocks.append(self._open)
            if any(self._response):
                self._response.append(_BLOCK_BREAK)
        self._open.parts.append(text)
        self._response.append(text)

    def _append(self, parts: list[str], text: str) -> None:
        # The first text of a new turn in this field: a blank line after earlier turns'.
        for index, waiting in enumerate(self._breaks):
            if waiting is parts:
                del self._breaks[index]
                if any(parts):
                    parts.append(_TURN_BREAK)
                break
        parts.append(text)

    def __repr__(self) -> str:
        counts: dict[str, int] = {}
        for node in self.actions.values():
            counts[node.status] = counts.get(node.status, 0) + 1
        shown = ", ".join(f"{n} {s}" for s, n in counts.items()) or "no actions"
        return f"<Run {self.id} {self.status}: {shown}>"

    # ---- transcript ---------------------------------------------------------------

    def to_jsonl(self) -> str:
        """The transcript: header, events, node states, variables; one JSON per line.

        Secrets (the API key, credential-looking environment values) are redacted in
        every line: a transcript is saved and shared. A block of text deltas holding a
        secret is joined into one delta before it is redacted (``joining``), so a secret
        the model wrote split across two stream chunks is redacted whole, as the store
        does; a block with none stays delta by delta.
        """
        return "".join(
            json.dumps(redact_value(line), allow_nan=False) + "\n" for line in self._lines()
        )

    def _lines(self) -> Iterator[dict[str, Any]]:
        yield {
            "record": TRANSCRIPT_FORMAT,
            "version": TRANSCRIPT_VERSION,
            "id": self.id,
            "status": self.status,
            "started": self.started,
            "ended": self.ended,
            "final": self.final,
            "notes": self.notes,
            "model": self.model,
            "turns": self.turns,
            "reason": self.reason,
        }
        timed = zip(self.events, self.event_times, strict=True)
        for event, at in joined_where_secret(timed):  # a split secret redacted whole
            yield {"record": "event", "t": at, **encode_event(event)}
        for node in self.actions.values():
            yield encode_node(node)
        values = {}
        reprs = []
        for name, value in self.variables.items():
            values[name], is_repr = to_json_value(value)
            if is_repr:
                reprs.append(name)
        yield {"record": "variables", "values": values, "repr": reprs}

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the transcript to ``path`` (``~`` and ``$VAR`` expanded, as a shell
        would); returns the path written. The transcript is made before the file is
        opened: a run that cannot be written leaves an existing file as it was."""
        out = user_path(path)
        text = self.to_jsonl()
        out.write_text(text, encoding="utf-8")
        return out

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Run:
        return cls.from_jsonl(user_path(path).read_text(encoding="utf-8"))

    @classmethod
    def from_jsonl(cls: type[_R], text: str) -> _R:
        """Read a transcript written by ``to_jsonl`` back into a run record."""
        run: Run | None = None
        for number, line in _json_lines(text):
            if number == 1:
                run = _decode_header(line, number, cls)
                continue
            assert run is not None
            try:
                _read_line(run, line, number)
            except TranscriptError:
                raise
            except (TypeError, ValueError, KeyError, AttributeError) as exc:
                # A hand-edited line: a field missing, or of another type.
                raise _bad(number, f"bad {line.get('record')!r} line ({_why(exc)})") from None
        if run is None:
            raise TranscriptError(0, "the transcript is empty")
        return cast(_R, run)


def _read_line(run: Run, line: dict[str, Any], number: int) -> None:
    """Add the transcript's line ``number`` (after the header) to ``run``."""
    record = line.get("record")
    if record == "event":
        run.record(_decode_or_fail(line, number), _time(line["t"]))
    elif record == "node":
        node = decode_node(line, number)
        run.actions[node.id] = node
    elif record == "variables":
        reprs = set(line.get("repr", ()))
        for name, value in line.get("values", {}).items():
            run.variables[name] = OutputRepr(value) if name in reprs else value
    else:
        raise _bad(number, f"unknown record type {record!r}")


def _time(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise TypeError(f"a time must be a finite number, not {value!r}")
    return float(value)


def _bad(number: int, reason: str) -> TranscriptError:
    """The error for line ``number``: ``reason`` redacted and short (a hostile field may
    hold a secret, or a megabyte)."""
    return TranscriptError(number, shorten(redact(reason), 300))


def _why(exc: BaseException) -> str:
    return f"no field {exc}" if isinstance(exc, KeyError) else str(exc)


def _unnest(event: AnyEvent) -> AnyEvent:
    while isinstance(event, Nested):
        event = event.event
    return event


def joined(parts: list[str]) -> str:
    """The text of growing ``parts`` (appended delta by delta), joined once and kept
    joined, so reading a long text while it streams does not rejoin every delta."""
    if len(parts) > 1:
        parts[:] = ["".join(parts)]
    return parts[0] if parts else ""


def encode_event(event: AnyEvent) -> dict[str, Any]:
    """A JSON-ready dict of any event, parser's or runtime's."""
    if isinstance(event, Nested):
        return {"kind": "nested", "parent": event.parent, "event": encode_event(event.event)}
    if event.kind in RUN_EVENT_TYPES:
        out: dict[str, Any] = {"kind": event.kind}
        for name in event.__slots__:
            value = getattr(event, name)
            if isinstance(value, Progress):
                value = _progress_dict(value)
            if value is None or (event.kind == "action_output" and value in ("", ())):
                continue  # an output report names only what it brings
            out[name] = list(value) if isinstance(value, tuple) else value
        return out
    encoded = event_to_dict(event)  # type: ignore[arg-type]
    if isinstance(event, ActionReady):
        encoded["parameters"], _ = to_json_value(event.action.parameters)
        if event.source:
            encoded["source"] = event.source
    return encoded


def decode_event(data: dict[str, Any]) -> AnyEvent:
    """The event an ``encode_event`` dict stands for."""
    fields = {k: v for k, v in data.items() if k not in ("kind", "record", "t")}
    kind = data.get("kind")
    if kind == "nested":
        return Nested(parent=fields["parent"], event=decode_event(fields["event"]))
    if kind == "action":
        if "depends_on" in fields:
            fields["depends_on"] = tuple(fields["depends_on"])
        source = str(fields.pop("source", "") or "")
        return ActionReady(Action(**fields), source)
    cls = RUN_EVENT_TYPES.get(str(kind)) or _PARSER_EVENT_TYPES.get(str(kind))
    if cls is None:
        raise ValueError(f"unknown event kind {kind!r}")
    if kind == "chunk" and fields.get("type") not in _CHUNK_TYPES:
        raise ValueError(f"unknown chunk type {fields.get('type')!r}")
    plain = _plain_fields(cls)
    for name, value in fields.items():
        if name in plain and not isinstance(value, plain[name][0]):
            raise TypeError(f"{kind} {name} must be {plain[name][1]}, not {value!r}")
    if kind == "output_checked":
        fields["errors"] = tuple(fields.get("errors", ()))
    if kind == "action_output":
        fields["logs"] = tuple(fields.get("logs", ()))
        if fields.get("progress") is not None:
            fields["progress"] = Progress(**fields["progress"])
    return cast(AnyEvent, cls(**fields))


#: The JSON types an event's field of a plain type may hold (by its annotation's words).
_PLAIN: dict[str, tuple[type, ...]] = {
    "str": (str,), "int": (int,), "float": (int, float), "bool": (bool,), "None": (type(None),),
}  # fmt: skip


_PLAIN_FIELDS: dict[type, dict[str, tuple[tuple[type, ...], str]]] = {}


def _plain_fields(cls: type) -> dict[str, tuple[tuple[type, ...], str]]:
    """The fields of event class ``cls`` whose type is plain (``str | None``, ``int``...),
    with the types a transcript's value of each may have: a hand-edited transcript's
    ``"text": 5`` is refused as it is read, not met later as a stream that fails."""
    known = _PLAIN_FIELDS.get(cls)
    if known is not None:
        return known
    out = _PLAIN_FIELDS[cls] = {}
    for each in dataclasses.fields(cls):
        words = [word.strip() for word in str(each.type).split("|")]
        if all(word in _PLAIN for word in words):
            types = tuple(t for word in words for t in _PLAIN[word])
            out[each.name] = (types, " or ".join(words).replace("str", "text"))
    return out


def load_events(text: str) -> list[tuple[float, AnyEvent]]:
    """The timed events of a transcript, in order (to replay into a display)."""
    return [
        (float(line["t"]), _decode_or_fail(line, number))
        for number, line in _json_lines(text)
        if line.get("record") == "event"
    ]


def _json_lines(text: str) -> Iterator[tuple[int, dict[str, Any]]]:
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            line = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise TranscriptError(number, f"not JSON ({exc.msg})") from None
        except RecursionError:
            raise TranscriptError(number, "nested too deeply to read") from None
        if not isinstance(line, dict):
            raise TranscriptError(number, "not a JSON object")
        if number == 1 and line.get("record") != TRANSCRIPT_FORMAT:
            raise TranscriptError(number, f"not a {TRANSCRIPT_FORMAT} transcript")
        yield number, line


def _decode_header(line: dict[str, Any], number: int, cls: type[Run]) -> Run:
    if line.get("version") != TRANSCRIPT_VERSION:
        raise _bad(number, f"unsupported version {line.get('version')!r}")
    try:
        for name in ("model", "reason"):
            if not isinstance(line.get(name), str | None):
                raise TypeError(f"{name} must be text, not {line[name]!r}")
        ended = line.get("ended")
        return cls(
            id=str(line["id"]),
            status=str(line["status"]),
            started=_time(line["started"]),
            ended=None if ended is None else _time(ended),
            final=line.get("final"),
            notes=list(line.get("notes", [])),
            model=line.get("model"),
            turns=int(line.get("turns") or 0),
            reason=line.get("reason"),
        )
    except (TypeError, ValueError, KeyError) as exc:
        raise _bad(number, f"bad header ({_why(exc)})") from None


def _decode_or_fail(line: dict[str, Any], number: int) -> AnyEvent:
    try:
        return decode_event(line)
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        raise _bad(number, f"bad event ({_why(exc)})") from None


def encode_node(node: ActionNode, *, output: bool = True) -> dict[str, Any]:
    """A node's transcript line: its state, its action and (unless ``output`` is false:
    a store keeps outputs apart) its output as JSON or its short repr."""
    out: dict[str, Any] = {"record": "node", "id": node.id}
    out.update({name: getattr(node, name) for name in _NODE_FIELDS})
    out["depends_on"] = list(node.depends_on)
    out["waits_for"] = list(node.waits_for)
    out["logs"] = list(node.logs)
    out["progress"] = None if node.progress is None else _progress_dict(node.progress)
    if output:
        out["output"], out["output_repr"] = to_json_value(node.output)
    if node.action is not None:
        action = encode_event(ActionReady(node.action))
        action.pop("kind")
        out["action"] = action
    return out


def decode_node(line: dict[str, Any], number: int = 0) -> ActionNode:
    """The node an ``encode_node`` line stands for (``number``: its line, for errors)."""
    if line.get("status") not in STATUSES:
        raise _bad(number, f"unknown status {line.get('status')!r}")
    action = None
    if "action" in line:
        event = _decode_or_fail({"kind": "action", **line["action"]}, number)
        action = cast(ActionReady, event).action
    node = ActionNode(id=str(line["id"]), name=str(line["name"]), action=action)
    for name in _NODE_FIELDS:
        setattr(node, name, line.get(name))
    node.depends_on = tuple(line.get("depends_on", ()))
    node.waits_for = tuple(line.get("waits_for", ()))
    node.source = str(line.get("source") or "")
    node.stdout = str(line.get("stdout") or "")
    node.stderr = str(line.get("stderr") or "")
    node.logs = [str(entry) for entry in line.get("logs") or ()]
    progress = line.get("progress")
    node.progress = Progress(**progress) if isinstance(progress, dict) else None
    output = line.get("output")
    node.output = OutputRepr(output) if line.get("output_repr") else output
    return node


def _progress_dict(progress: Progress) -> dict[str, Any]:
    return {"done": progress.done, "total": progress.total, "note": progress.note}


def dispatch_latencies(run: Run) -> list[float]:
    """For each top-level node that ran: how long after it could start did it start."""
    out = []
    for node in run.actions.values():
        if node.parent is not None or node.started is None or node.submitted is None:
            continue
        ready = node.submitted
        for dep in (*node.depends_on, *node.waits_for):
            finished = run.actions[dep].finished if dep in run.actions else None
            if finished is not None:
                ready = max(ready, finished)
        out.append(node.started - ready)
    return out
