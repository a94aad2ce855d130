"""The agent loop: ask the model, run its actions while it writes, send the results back.

``Agent.run`` drives one ``Loop``: one ``Run`` record and one ``Scheduler`` across all
its turns, so action ids stay unique and ``$name`` reaches the outputs of earlier turns.
Each turn streams the model's reply through the parser into the scheduler (every action
starts the moment it is complete), then waits for the turn's actions. A final response
ends the run; anything else that asks for more (a response followed by actions, one with
``final="false"``, a turn of only actions, native tool calls, sigil's ``§EXECUTE:`` or
cogency's ``</execute>``, where reading stops so the model cannot invent results) sends
the results back and asks again, up to ``max_turns``. A reply with no tags and no calls
at all is the answer itself.

A run ends ``completed``, ``turn_limit`` (the limit stopped it), ``truncated`` (the reply
was cut off at the token limit: ``finish_reason: "length"``), ``interrupted`` (the
model's stream failed: everything received and run is kept, and ``Agent.continue_run``
goes on from there), ``cancelled`` or ``failed`` (the runtime failed, or the model failed
in a way asking again cannot fix: a refused key, an unknown model; what arrived is kept
too). ``run.reason`` says why when it did not complete.

A ``Conversation`` (``loop.conversation``) is the memory: runs given the same one continue it.
"""

from __future__ import annotations

import inspect
import json
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

import anyio

from cortex_jupyter.protocol import Parser
from cortex_jupyter.protocol.actions import build_action, parse_body
from cortex_jupyter.protocol.events import (
    ActionReady,
    ActionStart,
    Event,
    ProtocolError,
    ResponseDelta,
    ResponseEnd,
    TextDelta,
    ThoughtDelta,
    ThoughtEnd,
)
from cortex_jupyter.runtime.core.chunks import (
    ChatMessage,
    Finish,
    Message,
    ModelChunk,
    NativeNames,
    ReasoningChunk,
    RefusalChunk,
    StreamingModel,
    TextChunk,
    ToolCallPayload,
    ToolCallReady,
    ToolCallStart,
    ToolDefinition,
    Usage,
    text_client,
    tool_definition,
)
from cortex_jupyter.runtime.core.events import (
    AnyEvent,
    ChatEntry,
    Chunk,
    ContextUse,
    Interrupt,
    Metric,
    Turn,
    TurnEnd,
)
from cortex_jupyter.runtime.core.graph import ActionNode
from cortex_jupyter.runtime.core.model import complete
from cortex_jupyter.runtime.core.secrets import redact, redact_value
from cortex_jupyter.runtime.core.typed import OutputType
from cortex_jupyter.runtime.loop import grammar
from cortex_jupyter.runtime.loop.context import (
    DEFAULT_REPLY_ROOM,
    Fit,
    budget_for,
    fit_messages,
    summary_prompt,
)
from cortex_jupyter.runtime.loop.conversation import Conversation
from cortex_jupyter.runtime.loop.feeds import FeedSet
from cortex_jupyter.runtime.loop.prompt import format_results, result_text, system_prompt
from cortex_jupyter.runtime.loop.resume import Resume
from cortex_jupyter.runtime.loop.typed_answer import AnswerCheck
from cortex_jupyter.runtime.scheduler.calls import error_text
from cortex_jupyter.runtime.scheduler.dispatch import Scheduler

__all__ = ["MAX_TURNS", "RESULT_LIMIT", "Conversation", "Loop"]

MAX_TURNS = 10
RESULT_LIMIT = 4000
#: Consecutive text chunks closer together than this are kept as one ``chunk`` event.
COALESCE_SECONDS = 0.05
# The events of a cut reply's text that a continued run keeps (``Loop._carry``).
_TEXT_EVENTS = (ThoughtDelta, ThoughtEnd, ResponseDelta, ResponseEnd, TextDelta)
# Where the list dialects' turn markers can end: reading stops right after one.
_PIECES = re.compile(r"[^>:\n]+[>:\n]?|[>:\n]")


# ---- one turn ---------------------------------------------------------------------------


@dataclass
class _TurnState:
    number: int
    before: set[str]
    errors_before: int
    text: list[str] = field(default_factory=list)
    tool_calls: list[ToolCallPayload] = field(default_factory=list)
    boundary: str | None = None
    response_final: bool | None = None
    has_actions: bool = False
    responded: bool = False  # the reply wrote response text
    refused: bool = False  # the model refused (delta.refusal): that is its answer
    loose: bool = False  # the reply wrote text outside any block
    thought: bool = False  # the reply wrote thought text (or reasoning)
    reasoning: bool = False
    finish: str | None = None
    error: Exception | None = None
    #: The cut reply this turn's reply continues (``runtime.loop.resume``), until the first
    #: characters of the continuation say how the two join; what is held meanwhile.
    resume: Resume | None = None
    held: list[str] = field(default_factory=list)
    repeats: int = 0  # actions not run: exact repeats of calls that ran (``Loop._repeat_of``)
    constrained: bool = False  # the request carried a grammar (``Loop._constraint``)


class _ChunkRecorder:
    """Records the model's chunks as ``chunk`` events, coalescing consecutive text."""

    def __init__(self, emit: Callable[[AnyEvent], None]) -> None:
        self._emit = emit
        self._kind = ""
        self._parts: list[str] = []
        self._first = 0.0
        self._last = 0.0

    def add(self, chunk: ModelChunk) -> None:
        now = time.monotonic()
        if isinstance(chunk, TextChunk | ReasoningChunk):
            if self._parts and (chunk.kind != self._kind or now - self._first >= COALESCE_SECONDS):
                self.flush()
            if not self._parts:
                self._kind, self._first = chunk.kind, now
            self._parts.append(chunk.text)
            self._last = now
            return
        self.flush()
        self._emit(Chunk.of(chunk, now))

    def flush(self) -> None:
        if self._parts:
            self._emit(Chunk(self._kind, self._last, text="".join(self._parts)))
            self._parts = []


def _native_action(call: ToolCallReady, name: str) -> ActionReady | ProtocolError:
    """A native tool call as a tool action (id = the call's id) of the registry entry
    ``name`` (the call's native name mapped back), or why it cannot run."""
    params = parse_body(call.arguments if call.arguments.strip() else "{}", call.id)
    if isinstance(params, ProtocolError):
        return params
    action = build_action(
        {"name": name, "parameters": params},
        action_id=call.id,
        type="tool",
        mode="async",
        in_thought=False,
    )
    if isinstance(action, ProtocolError):
        return action
    return ActionReady(action, f"{call.name}({call.arguments})")


def _canonical(value: Any) -> str:
    """One text for equal parameters, whatever their order, and a number however it is
    written (``1`` and ``1.0``)."""
    return json.dumps(_same_numbers(value), sort_keys=True, default=repr)


def _same_numbers(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, Mapping):
        return {str(k): _same_numbers(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_same_numbers(v) for v in value]
    return value


#: The ends of an earlier call that do not make a new one a repeat: it never ran, or its
#: try failed (a flaky service may answer the second time).
_NOT_RAN = ("skipped", "failed", "cancelled")


def _takes_constraint(model: StreamingModel) -> bool:
    try:
        return "constraint" in inspect.signature(model.stream).parameters
    except (TypeError, ValueError):
        return False


#: Most tokens a context summary's reply may take (it is asked for 200 words).
SUMMARY_TOKENS = 400

#: Why a run ended with no answer (by whether the reply held a thought): the run is
#: ``completed`` (the model chose to stop), and its cell says so in a ``cortex:`` line.
NO_ANSWER = {
    True: "the model wrote only a thought and no answer (the thought is on _cortex.thought)",
    False: "the model's reply was empty: no thought, no actions, no answer",
}

#: What a reason tells the user to do, in the words they use: ``Run.words`` picks the set
#: (a notebook cell's run speaks of the magic's commands and options).
WORDS: Mapping[str, Mapping[str, str]] = {
    "api": {
        "continue": "Agent.continue_run(...)",
        "max_turns": "max_turns=...",
        "max_tokens": "max_tokens=...",
    },
    "magic": {
        "continue": "%cortex continue",
        "max_turns": "--max-turns N",
        "max_tokens": "--max-tokens N",
    },
}


def _decide(
    turn: _TurnState, max_tokens: int | None, words: Mapping[str, str] = WORDS["api"]
) -> tuple[str, str]:
    """(outcome, reason) of a turn: ``final``, ``results``, ``truncated``,
    ``interrupted`` or ``failed``; ``words`` name what to do next (``WORDS``)."""
    if turn.error is not None:
        # A model error that asking again cannot fix (a refused key, an unknown model)
        # fails the run; anything else (a dropped stream) leaves it to be continued.
        if getattr(turn.error, "continuable", True):
            return "interrupted", f"the model's stream failed: {error_text(turn.error)}"
        return "failed", f"the model failed: {error_text(turn.error)}"
    if turn.finish == "length":
        limit = f" of {max_tokens:,} tokens" if max_tokens else ""
        return "truncated", (
            f"the model's reply was cut off at its token limit{limit} (finish_reason "
            f'"length"); {words["continue"]} asks it to go on from there, and '
            f"{words['max_tokens']} allows longer replies"
        )
    if turn.refused:
        return "final", "the model refused"
    if turn.finish == "content_filter":
        return "final", "the server's content filter stopped the reply; what came before is kept"
    if turn.boundary == "end":
        return "final", "the model marked the task complete"
    if turn.boundary == "execute":
        return "results", "the model ended its turn to run its calls"
    if turn.tool_calls:
        return "results", "native tool calls"
    if turn.response_final is not None:
        if turn.response_final:
            return "final", "a final response"
        return "results", 'a response with final="false"'
    if turn.has_actions:
        return "results", "a turn of actions with no response"
    if not turn.loose:
        return "final", NO_ANSWER[turn.thought]
    return "final", "no actions and no response: the text is the answer"


# ---- the loop ---------------------------------------------------------------------------


class Settings(Protocol):
    """What a loop reads of its agent (an ``Agent`` is one): the agent module builds on
    this one, so the loop names only the settings it reads."""

    @property
    def dialect(self) -> str: ...
    @property
    def max_turns(self) -> int: ...
    @property
    def result_limit(self) -> int: ...
    @property
    def context_tokens(self) -> int | None: ...
    @property
    def max_tokens(self) -> int | None: ...
    @property
    def temperature(self) -> float | None: ...
    @property
    def native_tools(self) -> bool: ...
    @property
    def instructions(self) -> str | None: ...
    @property
    def constrain(self) -> bool | str: ...
    @property
    def typed(self) -> OutputType | None: ...
    @property
    def output_retries(self) -> int: ...


class Loop:
    """One agent run's turns: what ``Agent.run`` drives (see the module docstring).

    Reads the agent's configuration (dialect, turn limit, sampling, result size,
    instructions) from ``agent``; ``model`` is the one this run asks (the agent's own, or
    its caller's).
    """

    def __init__(
        self,
        agent: Settings,
        *,
        model: StreamingModel,
        conversation: Conversation,
        scheduler: Scheduler,
        feeds: FeedSet,
        variables: str,
        taken_ids: Iterable[str],
    ) -> None:
        self.agent = agent
        self.model = model
        self.conversation = conversation
        self.scheduler = scheduler
        self.run = scheduler.run
        self.feeds = feeds
        self.dialect = agent.dialect
        self.max_turns = agent.max_turns
        self.result_limit = agent.result_limit
        self.variables = variables
        self.taken = set(taken_ids)
        self.budget = budget_for(agent.context_tokens, model)
        self._start = 0  # where this run's messages begin in the conversation
        self._sent: list[Message] = []  # what the current turn sent (for calibration)
        self._system = ""
        self._recorder = _ChunkRecorder(scheduler.emit)
        # The native names of the tools the current turn offers (``fs__read_file`` for
        # ``fs.read_file``), so a native call maps back to the registered name.
        self._natives = NativeNames()
        self._resume: Resume | None = None
        self._looping = False  # the last reply only repeated calls that had run
        typed = agent.typed
        self.typed = None if typed is None else AnswerCheck(
            typed, retries=agent.output_retries, scheduler=scheduler, native=agent.native_tools
        )  # fmt: skip

    async def go(self, user_text: str, *, resume: str | None = None) -> None:
        """Run the turns, from the prompt ``user_text``. ``resume`` (``Agent.continue_run``)
        is set when this run continues the last one: the text of its cut reply, which the
        first reply goes on from ("" when it was not cut)."""
        self._resume = Resume(resume, self.dialect) if resume else None
        await self._learn_window()
        if resume is None:  # a new prompt: one the model never answered is not kept
            self.conversation.drop_unanswered()
        self._start = self.conversation.begin()
        self._say({"role": "user", "content": user_text})
        if self.typed is not None:
            self.typed.expect()
        number = 0
        words = WORDS.get(self.run.words, WORDS["api"])
        for number in range(1, self.max_turns + 1):
            await self.feeds.refresh_due()
            messages, fit = await self._messages()
            self.scheduler.emit(Turn(number, time.monotonic(), self.model.name))
            self._report_fit(number, fit)
            turn = _TurnState(number, set(self.run.actions), len(self.run.errors))
            try:
                await self._stream(turn, messages)
                await self.scheduler.drain()
            finally:
                self._close(turn)
            outcome, reason = _decide(turn, self.agent.max_tokens, words)
            if outcome == "results" and getattr(self.model, "remaining_turns", None) == 0:
                # A script or a replay that has no more turns: its end is the run's end,
                # not a question for a turn that does not exist.
                outcome, reason = "final", "the script has no more turns"
            if outcome == "results" and number == self.max_turns:
                outcome = "limit"
            # A reply of plain text (no response block, no actions): that text is the answer.
            answer = outcome == "final" and turn.loose and not turn.responded
            self.scheduler.emit(
                TurnEnd(number, time.monotonic(), outcome, reason, turn.finish, answer)
            )
            if outcome == "final" and self.typed is not None:
                again, why = self.typed.verdict(number, self.max_turns, words)
                if again:  # the errors go back as the next turn (it counts as one)
                    self._say({"role": "user", "content": again})
                    continue
                if why:
                    self._stop("failed", "answer did not fit", why)
                    break
            if outcome == "final":
                if turn.finish == "content_filter" or reason in NO_ANSWER.values():
                    self.run.notes.append(reason)  # completed, but the cell says so
                    self.run.reason = reason
                break
            if outcome == "truncated":
                self._stop("truncated", "token limit", reason)
                break
            if outcome == "interrupted":
                self._stop("interrupted", "stream failed", reason)
                break
            if outcome == "failed":
                self._stop("failed", "model failed", reason)
                break
            self._send_results(turn, reason)
        else:
            self._stop(
                "turn_limit",
                "turn limit",
                f"stopped after {self.max_turns} turns without a final response; continue it "
                f"with {words['continue']}, or allow more turns ({words['max_turns']})",
            )
        self.scheduler.emit(Metric("turns", number, time.monotonic(), "count"))

    async def _learn_window(self) -> None:
        """A model that can ask its server for its real context window (llama.cpp's
        ``/props``...) does so before the first turn, unless the agent set a budget."""
        learn = getattr(self.model, "learn_context_window", None)
        if learn is not None and not self.agent.context_tokens:
            await learn()
            self.budget = budget_for(None, self.model)

    def _stop(self, status: str, reason: str, why: str) -> None:
        self.scheduler.outcome = status
        self.run.reason = why
        self.scheduler.emit(Interrupt(reason, time.monotonic(), why))

    # ---- messages ---------------------------------------------------------------

    async def _messages(self) -> tuple[list[Message], Fit]:
        """What this turn sends: the system prompt and the conversation, fitted into the
        context budget (``runtime.loop.context``); recorded as a ``ContextUse`` event."""
        text = system_prompt(
            dialect=self.dialect,
            registry=self.scheduler.registry,
            feeds=self.feeds,
            variables=self.variables,
            internal=self.scheduler.internal,
            native_tools=self.agent.native_tools,
            instructions=self.agent.instructions,
            output=self.agent.typed,
        )
        text = redact(text)
        if text != self._system:
            self._system = text
            self.scheduler.emit(ChatEntry("system", text, time.monotonic()))
        fit = self._fit({"role": "system", "content": text})
        folded = fit.summarised
        if folded is not None and (folded.start, folded.stop) not in self.conversation.summaries:
            await self._summarise(folded)
            fit = self._fit({"role": "system", "content": text})
        self.conversation.marks = fit.marks
        self._sent = list(fit.messages)
        return self._sent, fit

    def _report_fit(self, turn: int, fit: Fit) -> None:
        marks = list(fit.marks.values())
        self.scheduler.emit(
            ContextUse(
                turn, time.monotonic(), fit.tokens, fit.budget,
                condensed=marks.count("condensed"),
                summarised=marks.count("summarised"),
                sent=[dict(m) for m in fit.messages] if fit.changed else None,
                over=fit.over,
            )
        )  # fmt: skip

    def _fit(self, system: ChatMessage) -> Fit:
        conversation = self.conversation
        return fit_messages(
            system,
            conversation.history,
            current=self._start,
            starts=conversation.starts,
            budget=self.budget,
            reply_room=self.agent.max_tokens or DEFAULT_REPLY_ROOM,
            counter=conversation.counter,
            summaries=conversation.summaries,
        )

    async def _summarise(self, folded: range) -> None:
        """Ask the model for a summary of the messages in ``folded`` (an ``llm`` call; a
        script answers from its ``--- reply to context-summary ---`` section). When that
        fails the fit falls back to a plain cut; the run goes on either way."""
        history = self.conversation.history
        earlier = [
            text
            for (start, stop), text in self.conversation.summaries.items()
            if start == 0 and stop <= folded.stop
        ]
        messages = [history[i] for i in folded]
        if earlier:  # build on the last summary instead of re-reading what it covers
            messages = [{"role": "user", "content": earlier[-1]}, *messages]
        prompt = summary_prompt(messages, words=200)
        model: Any = self.model
        sub = getattr(model, "for_action", None)
        try:
            if sub is not None:
                model = sub("context-summary")
            # The reply is capped: a small model may otherwise write until its context is
            # full (minutes on a CPU), for a summary asked to be 200 words.
            request = {**self.scheduler.request, "max_tokens": SUMMARY_TOKENS}
            with anyio.fail_after(120):
                text = await complete(
                    text_client(model, request), [{"role": "user", "content": prompt}]
                )
        except Exception:
            return
        if text.strip():
            self.conversation.summaries[(folded.start, folded.stop)] = redact(text.strip())

    def _say(self, message: ChatMessage) -> None:
        # What goes into the conversation is sent to the model and kept in transcripts:
        # a key a tool printed, or one the model was given, goes no further.
        message = cast(ChatMessage, redact_value(message))
        self.conversation.append(message)
        self.scheduler.emit(
            ChatEntry(
                message["role"],
                message["content"],
                time.monotonic(),
                tool_calls=message.get("tool_calls"),
                tool_call_id=message.get("tool_call_id"),
            )
        )

    def _tools(self) -> list[ToolDefinition] | None:
        """The tools offered natively this turn, each under a name function calling
        allows (an MCP tool's ``NAME.TOOL`` becomes ``NAME__TOOL``; see ``NativeNames``)."""
        registry = self.scheduler.registry
        # Built afresh each turn (a server's tools may have changed since the last one),
        # and also when none are offered: a replayed native call still maps back.
        self._natives = NativeNames(registry.names("tool"))
        if not self.agent.native_tools:
            return None
        return [
            tool_definition(self._natives.native(s["name"]), s["description"], s["parameters"])
            for s in registry.schemas(("tool",))
        ] or None

    # ---- streaming one reply ----------------------------------------------------

    def _constraint(self, turn: _TurnState) -> dict[str, Any]:
        """The ``constraint=`` argument of this turn's request (``Agent.constrain``).

        Turn-aware: a run's first turn calls tools (when there are any); a turn after
        results calls tools or answers (``grammar.later_tools``, ``grammar.later_stage``).
        A reply that continues a cut one is
        not constrained (it starts mid-text), nor is a model that takes no grammar."""
        constrain = self.agent.constrain
        if constrain is False or turn.resume is not None:
            return {}
        if not _takes_constraint(self.model):
            note = f"constrain: the model {self.model.name!r} takes no grammar; not constrained"
            if note not in self.run.notes:
                self.run.notes.append(note)
            return {}
        tools = self.scheduler.registry.schemas(("tool",))
        if turn.number == 1 and tools:
            stage: grammar.Stage = "actions"
        else:
            ran = [n.name for n in self.run.actions.values() if n.status not in _NOT_RAN]
            tools = grammar.later_tools(tools, ran)
            stage = grammar.later_stage(tools, repeated=self._looping)
        form = "gbnf" if constrain is True else str(constrain)
        text = grammar.reply_grammar(self.dialect, tools, stage, known_ids=sorted(self.run.actions))
        turn.constrained = True
        return {"constraint": grammar.Constraint(text, form, stage).body()}

    async def _stream(self, turn: _TurnState, messages: list[Message]) -> None:
        parser = Parser(self.dialect, taken_ids=self.taken | set(self.run.actions))
        turn.resume, self._resume = self._resume, None
        if turn.resume is not None:
            self._carry(turn, parser, turn.resume.ready)
        # Extra request fields only when there are some: a model need not know them.
        request = self.scheduler.request
        if self.typed is not None:
            request = self.typed.request(request)
        stream = self.model.stream(
            messages,
            tools=self._tools(),
            temperature=self.agent.temperature,
            max_tokens=self.agent.max_tokens,
            **cast(dict[str, Any], {"request": request} if request else {}),
            **self._constraint(turn),
        )
        try:
            while True:
                try:
                    chunk = await anext(stream)
                except StopAsyncIteration:
                    break
                except Exception as exc:  # the model failed: keep what arrived
                    turn.error = exc
                    break
                if self._take(turn, parser, chunk):
                    break
        finally:
            self._recorder.flush()
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:
                await aclose()
        self._end_reasoning(turn)
        if turn.resume is not None:
            self._hold(turn, parser, "", end=True)
        for event in parser.close():
            self._submit(turn, event)
        if turn.refused:
            self._submit(turn, ResponseEnd(True))

    def _take(self, turn: _TurnState, parser: Parser, chunk: ModelChunk) -> bool:
        """Handle one chunk; True when the turn's reply must not be read further."""
        self._recorder.add(chunk)
        if isinstance(chunk, RefusalChunk):  # before TextChunk: it is one
            self._end_reasoning(turn)
            self._refuse(turn, chunk.text)
            return False
        if isinstance(chunk, TextChunk):
            self._end_reasoning(turn)
            if turn.resume is not None:
                return self._hold(turn, parser, chunk.text)
            return self._feed(turn, parser, chunk.text)
        if isinstance(chunk, ReasoningChunk):
            turn.reasoning = True
            self._submit(turn, ThoughtDelta(chunk.text))
        elif isinstance(chunk, ToolCallStart):
            self._submit(turn, ActionStart(chunk.id, "tool", "async"))
        elif isinstance(chunk, ToolCallReady):
            turn.tool_calls.append(
                {
                    "id": chunk.id,
                    "type": "function",
                    "function": {"name": chunk.name, "arguments": chunk.arguments},
                }
            )
            self._submit(turn, _native_action(chunk, self._natives.original(chunk.name)))
        elif isinstance(chunk, Usage):
            now = time.monotonic()
            if chunk.prompt_tokens and self._sent:
                self.conversation.counter.calibrate(
                    cast(list[ChatMessage], self._sent), chunk.prompt_tokens
                )
                self.scheduler.emit(Metric("context_tokens", chunk.prompt_tokens, now, "tokens"))
            self.scheduler.emit(Metric("prompt_tokens", chunk.prompt_tokens, now, "tokens"))
            self.scheduler.emit(Metric("completion_tokens", chunk.completion_tokens, now, "tokens"))
        elif isinstance(chunk, Finish):
            turn.finish = chunk.reason
        return False

    def _feed(self, turn: _TurnState, parser: Parser, text: str) -> bool:
        pieces = [text] if self.dialect == "cortex" else _PIECES.findall(text)
        for piece in pieces:
            turn.text.append(piece)
            for event in parser.feed(piece):
                self._submit(turn, event)
            if parser.boundary is not None:
                turn.boundary = parser.boundary
                return True
        return False

    def _hold(self, turn: _TurnState, parser: Parser, text: str, *, end: bool = False) -> bool:
        """The first text of a reply that continues a cut one: held until it says how the
        two join, then the rest of the cut text and the continuation are read."""
        assert turn.resume is not None
        turn.held.append(text)
        head = "".join(turn.held)
        if not turn.resume.decided(head, end=end):
            return False
        rest, continuation = turn.resume.join(head)
        turn.resume, turn.held = None, []
        self._carry(turn, parser, rest)
        # The conversation keeps what the model wrote; a re-opened tag is not read again.
        turn.text.append(head[: len(head) - len(continuation)])
        return self._feed(turn, parser, continuation)

    def _carry(self, turn: _TurnState, parser: Parser, text: str) -> None:
        """Read text of the cut reply: its thought and response text belong to this run's
        answer; its actions ran (or were refused) in the run that was cut."""
        for event in parser.feed(text) if text else ():
            if isinstance(event, _TEXT_EVENTS):
                self._submit(turn, event)

    def _refuse(self, turn: _TurnState, text: str) -> None:
        """A refusal is the model's answer, shown as the response and marked as a
        refusal; it is not protocol text, so the parser never reads it."""
        if not turn.refused:
            turn.refused = True
            self._submit(turn, ResponseDelta("**The model refused:** ", True))
        turn.text.append(text)
        self._submit(turn, ResponseDelta(text, True))

    def _end_reasoning(self, turn: _TurnState) -> None:
        if turn.reasoning:
            turn.reasoning = False
            self._submit(turn, ThoughtEnd())

    def _submit(self, turn: _TurnState, event: Event) -> None:
        if isinstance(event, ResponseDelta):
            turn.responded = True
        elif isinstance(event, ThoughtDelta):
            turn.thought = True
        elif isinstance(event, TextDelta):
            turn.loose = True
        elif isinstance(event, ResponseEnd):
            turn.response_final = event.final
        elif isinstance(event, ActionReady) or (
            isinstance(event, ProtocolError) and event.id is not None
        ):
            turn.has_actions = True
            repeat = turn.constrained and isinstance(event, ActionReady)
            earlier = self._repeat_of(cast(ActionReady, event)) if repeat else None
            if earlier is not None:
                turn.repeats += 1
                self.scheduler.skip(
                    cast(ActionReady, event),
                    f"not run: the same call as {earlier!r}, which already ran (its result "
                    "is above); answer, or call something else",
                )
                return
        self.scheduler.submit(event)

    def _repeat_of(self, event: ActionReady) -> str | None:
        """In a reply written under a grammar (which admits actions on every turn), the id
        of the action that made exactly this call already and did not fail: a small model
        calls the same thing again and again, so a repeat is not run and the model is told
        (and may only answer next). A call whose try failed may be tried again."""
        call = event.action
        key = (call.type, call.name, _canonical(call.parameters))
        for node in self.run.actions.values():
            done = node.action
            if done is None or node.parent is not None or node.status in _NOT_RAN:
                continue
            if (done.type, done.name, _canonical(done.parameters)) == key:
                return node.id
        return None

    # ---- after the reply --------------------------------------------------------

    def _close(self, turn: _TurnState) -> None:
        """Put the reply, and an answer to each native call, in the conversation.

        Runs however the turn ended (cancelled too), so the conversation stays valid:
        every assistant tool call is followed by its tool message.
        """
        content = "".join(turn.text)
        if not content and not turn.tool_calls:
            return
        reply: ChatMessage = {"role": "assistant", "content": content}
        if turn.tool_calls:
            reply["tool_calls"] = turn.tool_calls
        self._say(reply)
        for call in turn.tool_calls:
            node = self.run.actions.get(call["id"])
            if node is None:
                answer = "not run: the run was stopped"
            elif node.status in ("pending", "running"):  # being cancelled with the run
                answer = "cancelled: the run was stopped"
            else:
                answer = result_text(node, self.result_limit)
                if node.status != "done" and not answer.startswith(node.status):
                    answer = f"{node.status}: {answer}"
            self._say({"role": "tool", "tool_call_id": call["id"], "content": answer})

    def _turn_nodes(self, turn: _TurnState) -> list[ActionNode]:
        native = {call["id"] for call in turn.tool_calls}
        return [
            node
            for id, node in self.run.actions.items()
            if id not in turn.before and id not in native and node.parent is None
        ]

    def _send_results(self, turn: _TurnState, reason: str) -> None:
        nodes = self._turn_nodes(turn)
        self._looping = bool(nodes) and turn.repeats == len(nodes)
        errors = [e for e in self.run.errors[turn.errors_before :] if e.id is None]
        if nodes or errors:
            content = format_results(nodes, errors, dialect=self.dialect, limit=self.result_limit)
        elif turn.tool_calls:
            return  # the tool messages are the answer
        elif turn.finish == "length":
            content = "Your reply was cut off at the token limit. Continue where it stopped."
        else:
            content = f"No actions ran in your last turn ({reason}). Continue the task."
        self._say({"role": "user", "content": content})
