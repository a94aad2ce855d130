"""The events the runtime adds to the parser's: what happened to actions and to the run.

Frozen dataclasses with a class-level ``kind``, like the parser's events, so a consumer
(the display, a transcript) reduces one stream of events without calling the runtime.
Every event carries ``time``, a ``time.monotonic()`` reading.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, get_args

from cortex_jupyter.protocol.events import Event
from cortex_jupyter.runtime.core.model.chunks import (
    Finish,
    ModelChunk,
    ReasoningChunk,
    RefusalChunk,
    TextChunk,
    ToolCallPayload,
    ToolCallReady,
    ToolCallStart,
    Usage,
)


@dataclass(frozen=True, slots=True)
class ActionStatus:
    """A node changed status, or an attempt failed and will be retried.

    ``attempt`` counts from 1 (0 before the first attempt). ``error`` is the failure
    text: on a ``failed`` or ``skipped`` node the reason, on a ``running`` event the
    error of the attempt that failed just before (``retry_in`` is then the backoff in
    seconds before the next attempt). ``output`` is a short text summary of a ``done``
    node's output. ``name``/``type``/``parent`` describe the node on its first event
    (workflow steps have a ``parent``).
    """

    id: str
    status: str
    time: float
    attempt: int = 0
    error: str | None = None
    output: str | None = None
    name: str | None = None
    type: str | None = None
    parent: str | None = None
    retry_in: float | None = None
    note: str | None = None
    parameters: str | None = None
    kind: ClassVar[str] = "action_status"


@dataclass(frozen=True, slots=True)
class Progress:
    """A running tool's last progress report: ``done`` of ``total`` (None: unknown)."""

    done: float
    total: float | None = None
    note: str = ""

    @property
    def fraction(self) -> float | None:
        """``done / total`` between 0 and 1, or None when the total is unknown."""
        if not self.total:
            return None
        return max(0.0, min(1.0, self.done / self.total))

    def __str__(self) -> str:
        def num(x: float) -> str:
            return f"{x:g}"

        shown = num(self.done) if self.total is None else f"{num(self.done)}/{num(self.total)}"
        return f"{shown} {self.note}".strip()


@dataclass(frozen=True, slots=True)
class ActionOutput:
    """What a running action wrote since its last report (coalesced, at most a few a
    second): ``stdout`` / ``stderr`` text, formatted ``logs`` lines (logging records and
    warnings), its latest ``progress``, and ``partial``: a short text of the latest value
    a generator tool yielded. Empty fields: nothing new."""

    id: str
    time: float
    stdout: str = ""
    stderr: str = ""
    logs: tuple[str, ...] = ()
    progress: Progress | None = None
    partial: str | None = None
    parent: str | None = None
    kind: ClassVar[str] = "action_output"


@dataclass(frozen=True, slots=True)
class ContextUse:
    """What a turn sent the model, fitted into the context budget (``runtime.loop.context``).

    ``tokens`` is the estimate of what was sent and ``budget`` the limit; ``condensed``
    and ``summarised`` count the older messages cut to fit (results to a line each) and
    left out for a summary. ``sent`` is the exact list of messages sent when fitting
    changed any (None: the system prompt and the conversation as they are); ``over``
    says that even the current prompt and run exceed the budget.
    """

    turn: int
    time: float
    tokens: int
    budget: int
    condensed: int = 0
    summarised: int = 0
    sent: list[dict[str, Any]] | None = None
    over: bool = False
    kind: ClassVar[str] = "context"


@dataclass(frozen=True, slots=True)
class Metric:
    """A measured figure about the run (``unit`` e.g. ``"s"``, ``"count"``)."""

    name: str
    value: float
    time: float
    unit: str = ""
    id: str | None = None
    kind: ClassVar[str] = "metric"


@dataclass(frozen=True, slots=True)
class Cost:
    """One request to ``model`` was priced (``runtime.core.cost.prices``): ``usd`` (None: not
    known), the tokens the server reported (None: it reported none; ``cached_tokens``,
    the part of the prompt read from the server's cache, None when it reported none),
    ``note`` saying whose prices of which date, or why there is none, and ``free`` why it
    cost nothing. A reply the server reported no usage for, sent under a budget, counts
    what its request reserved (``held_tokens``, ``held_usd``: its prompt's estimate and its
    reply's cap), an upper bound: kept here so a resumed run counts it again."""

    model: str
    time: float
    usd: float | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    note: str = ""
    free: str = ""
    cached_tokens: int | None = None
    held_tokens: int | None = None
    held_usd: float | None = None
    kind: ClassVar[str] = "cost"


@dataclass(frozen=True, slots=True)
class Interrupt:
    """The run was stopped before its end: cancelled (Stop), its stream or its model
    failed, or the agent loop reached its turn limit (``reason`` says which, ``error``
    says why)."""

    reason: str
    time: float
    error: str | None = None
    kind: ClassVar[str] = "interrupt"


@dataclass(frozen=True, slots=True)
class End:
    """The run ended: ``status`` is ``completed``, ``cancelled`` or ``failed``, and for
    agent runs also ``interrupted`` (the model's stream failed), ``truncated`` (its reply
    was cut off at the token limit) or ``turn_limit``.

    ``fire_and_forget`` actions may still be running; their nodes report later.
    """

    status: str
    time: float
    kind: ClassVar[str] = "end"


@dataclass(frozen=True, slots=True)
class Nested:
    """An event of an agent's nested run, forwarded under its parent node ``parent``."""

    parent: str
    event: AnyEvent
    kind: ClassVar[str] = "nested"


@dataclass(frozen=True, slots=True)
class Turn:
    """The agent loop asks the model for turn ``number`` (from 1) of the run. ``cut``:
    its reply reads on from the cut reply of the turn before (a resumed run), inside the
    block that reply left open (``"response"``, ``"thought"``...), which goes on."""

    number: int
    time: float
    model: str | None = None
    cut: str | None = None
    kind: ClassVar[str] = "turn"


@dataclass(frozen=True, slots=True)
class TurnEnd:
    """A turn's reply ended and its actions were waited for.

    ``outcome`` is what the loop does next: ``final`` (the run ends), ``results`` (the
    results go back to the model for another turn), ``limit`` (another turn was needed
    but the turn limit stops the run), ``truncated`` (the reply was cut off at the token
    limit; the run can be continued), ``interrupted`` (the stream failed; the run can be
    continued) or ``failed`` (the model failed in a way asking again cannot fix).
    ``reason`` says why, in words; ``finish`` is the model's finish reason. ``answer`` is
    true when the reply was plain text with no response block and no actions: that text
    is the run's answer (``run.answer``).
    """

    number: int
    time: float
    outcome: str
    reason: str = ""
    finish: str | None = None
    answer: bool = False
    kind: ClassVar[str] = "turn_end"


@dataclass(frozen=True, slots=True)
class OutputExpected:
    """The run's answer is typed (``Agent(output_type=T)``, ``--output T``): emitted once,
    before the first turn. ``type`` names ``T`` as the user wrote it (``list[int]``,
    ``Weather``); ``schema`` is the JSON schema the model is shown. A view shows the answer
    as an object filling in, not as JSON characters."""

    type: str
    time: float
    schema: Any = None
    kind: ClassVar[str] = "output_expected"


@dataclass(frozen=True, slots=True)
class OutputChecked:
    """The typed answer of turn ``turn`` was read and validated (``attempt`` counts from
    1; a retry is the next attempt). ``ok``: it fit the type; ``value`` is then the
    object's JSON form (pydantic's ``dump_python(mode="json")``; the object itself is
    ``run.output``). Otherwise ``errors`` are short ``path: message`` lines, the first
    naming the first bad field."""

    attempt: int
    time: float
    ok: bool
    value: Any = None
    errors: tuple[str, ...] = ()
    turn: int = 0
    kind: ClassVar[str] = "output_checked"


@dataclass(frozen=True, slots=True)
class ChatEntry:
    """A message added to the conversation (the user's prompt, a reply, results...).

    The conversation is rebuilt from these (``Conversation.from_run``). ``role`` is
    ``system``, ``user``, ``assistant`` or ``tool``; ``tool_calls`` and ``tool_call_id``
    carry native tool calls in the OpenAI wire shape.
    """

    role: str
    content: str
    time: float
    tool_calls: list[ToolCallPayload] | None = None
    tool_call_id: str | None = None
    kind: ClassVar[str] = "message"


@dataclass(frozen=True, slots=True)
class Chunk:
    """A piece of the model's reply as it arrived (consecutive text may be coalesced).

    ``type`` is the ``ModelChunk`` kind (``text``, ``reasoning``, ``refusal``, ``tool_call_start``,
    ``tool_call_ready``, ``usage``, ``finish``); the other fields are that chunk's.
    Kept so a transcript can be streamed again with its timing (``ReplayModel``).
    """

    type: str
    time: float
    text: str | None = None
    index: int | None = None
    id: str | None = None
    name: str | None = None
    arguments: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    reason: str | None = None
    model: str | None = None
    cached_tokens: int | None = None
    kind: ClassVar[str] = "chunk"

    @classmethod
    def of(cls, chunk: ModelChunk, time: float) -> Chunk:
        """The event recording ``chunk``, seen at ``time``."""
        if isinstance(chunk, TextChunk | ReasoningChunk):
            return cls(chunk.kind, time, text=chunk.text)
        if isinstance(chunk, ToolCallStart):
            return cls(chunk.kind, time, index=chunk.index, id=chunk.id, name=chunk.name)
        if isinstance(chunk, ToolCallReady):
            return cls(
                chunk.kind, time, index=chunk.index, id=chunk.id, name=chunk.name,
                arguments=chunk.arguments,
            )  # fmt: skip
        if isinstance(chunk, Usage):
            return cls(
                chunk.kind, time, prompt_tokens=chunk.prompt_tokens,
                completion_tokens=chunk.completion_tokens,
                cached_tokens=chunk.cached_tokens or None,
            )  # fmt: skip
        return cls(chunk.kind, time, reason=chunk.reason, model=chunk.model)

    def to_chunk(self) -> ModelChunk:
        """The ``ModelChunk`` this event recorded."""
        if self.type == "text":
            return TextChunk(self.text or "")
        if self.type == "reasoning":
            return ReasoningChunk(self.text or "")
        if self.type == "refusal":
            return RefusalChunk(self.text or "")
        if self.type == "tool_call_start":
            return ToolCallStart(self.index or 0, self.id or "", self.name or "")
        if self.type == "tool_call_ready":
            return ToolCallReady(
                self.index or 0, self.id or "", self.name or "", self.arguments or ""
            )
        if self.type == "usage":
            # (a record from before cached counts has none: 0, priced as input)
            return Usage(
                self.prompt_tokens or 0, self.completion_tokens or 0, self.cached_tokens or 0
            )
        return Finish(self.reason or "unknown", self.model)


RunEvent = (
    ActionStatus
    | ActionOutput
    | ContextUse
    | Metric
    | Cost
    | Interrupt
    | End
    | Nested
    | Turn
    | TurnEnd
    | ChatEntry
    | Chunk
    | OutputExpected
    | OutputChecked
)
AnyEvent = Event | RunEvent

RUN_EVENT_TYPES: dict[str, type[Any]] = {cls.kind: cls for cls in get_args(RunEvent)}
