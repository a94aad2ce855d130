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
too) or ``budget`` (the next request would have passed the run's budget: it was not
sent; ``runtime.loop.spending``). ``run.reason`` says why when it did not complete.

A ``Conversation`` (``loop.conversation``) is the memory: runs given the same one continue it.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol, cast

import anyio

from cortex_jupyter.protocol import Parser
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
from cortex_jupyter.runtime.core.cost.budget import Hold, budget_cut, reply_limit, with_cap
from cortex_jupyter.runtime.core.events import (
    AnyEvent,
    ChatEntry,
    ContextUse,
    Interrupt,
    Metric,
    Turn,
    TurnEnd,
)
from cortex_jupyter.runtime.core.model.chunks import (
    ChatMessage,
    Finish,
    Message,
    ModelChunk,
    NativeNames,
    ReasoningChunk,
    RefusalChunk,
    StreamingModel,
    TextChunk,
    ToolCallReady,
    ToolCallStart,
    ToolDefinition,
    Usage,
    text_client,
    tool_definition,
)
from cortex_jupyter.runtime.core.model.client import complete
from cortex_jupyter.runtime.core.record.graph import ActionNode
from cortex_jupyter.runtime.core.trust.secrets import redact, redact_value
from cortex_jupyter.runtime.core.values.typed import OutputType
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
from cortex_jupyter.runtime.loop.pickup import PickUp, ReplyCut, event_key
from cortex_jupyter.runtime.loop.prompt import format_results, result_text, system_prompt
from cortex_jupyter.runtime.loop.reply import (
    NO_ANSWER,
    NOT_RAN,
    WORDS,
    ChunkRecorder,
    TurnState,
    canonical,
    decide,
    native_action,
    script_end,
    takes_constraint,
)
from cortex_jupyter.runtime.loop.resume import Resume
from cortex_jupyter.runtime.loop.spending import actions_cut, cut_by_budget, pay, payer, reserve
from cortex_jupyter.runtime.loop.transcript import cut_note
from cortex_jupyter.runtime.loop.typed_answer import AnswerCheck
from cortex_jupyter.runtime.scheduler.dispatch import Scheduler

__all__ = ["MAX_TURNS", "RESULT_LIMIT", "Conversation", "Loop"]

MAX_TURNS = 10
RESULT_LIMIT = 4000
# The events of a cut reply's text that a continued run keeps (``Loop._carry``).
_TEXT_EVENTS = (ThoughtDelta, ThoughtEnd, ResponseDelta, ResponseEnd, TextDelta)
# Where the list dialects' turn markers can end: reading stops right after one.
_PIECES = re.compile(r"[^>:\n]+[>:\n]?|[>:\n]")


#: Most tokens a context summary's reply may take (it is asked for 200 words).
SUMMARY_TOKENS = 400


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
        self._recorder = ChunkRecorder(scheduler.emit)
        # The native names of the tools the current turn offers (``fs__read_file`` for
        # ``fs.read_file``), so a native call maps back to the registered name.
        self._natives = NativeNames()
        self._resume: Resume | None = None
        self._looping = False  # the last reply only repeated calls that had run
        # Picking a stopped run up (``pick_up``): its record already holds the cut reply's
        # text, the events of its last turn's end in ``_known``, and while ``_quiet`` the
        # reply being read again.
        self._picked_up = False
        self._known: list[tuple[Any, ...]] = []
        self._quiet = False
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
        await self._turns(1, self.max_turns)

    async def pick_up(self, plan: PickUp, prompt: str) -> None:
        """Go on with a run that stopped, in its own record (``Agent.resume``; see
        ``runtime.loop.pickup``): its conversation as recorded, the actions of its earlier
        turns restored or run again, its last turn's reply read again from the record
        (never asked again), then the turns it had left."""
        await self._learn_window()
        self._picked_up, self._known = True, list(plan.known)
        self._start = self.conversation.begin()
        for message in plan.messages:
            self.conversation.append(message)
        if not plan.messages:  # stopped before its prompt was recorded
            self._say({"role": "user", "content": prompt})
        for node in plan.earlier:
            assert node.action is not None  # (``plan`` keeps only nodes that have one)
            self.scheduler.pick_up(node.action, node.source)
        # Its last turn is read again only when the record holds some of its reply; one
        # asked but not answered at all is asked again, as a new request would be.
        replay = plan if plan.turn and plan.chunks else None
        answered = getattr(self.model, "answered", None)  # a script: its next turn
        if answered is not None:
            answered(plan.turn if replay is not None else max(plan.turn - 1, 0))
        # A run stopped by its turn limit gets as many turns again, as continuing it does.
        last = self.max_turns + (plan.turn if plan.limit else 0)
        await self._turns(max(plan.turn, 1), last, replay)

    async def _turns(self, first: int, last: int, replay: PickUp | None = None) -> None:
        number = first - 1
        words = WORDS.get(self.run.words, WORDS["api"])
        for number in range(first, last + 1):
            if await self._turn(number, last, words, replay if number == first else None):
                break
        else:
            self._stop(
                "turn_limit",
                "turn limit",
                f"stopped after {last} turns without a final response; continue it "
                f"with {words['continue']}, or allow more turns ({words['max_turns']})",
            )
        if self.scheduler.outcome == "budget":  # its last turn's request was not sent
            number -= 1
        self.scheduler.emit(Metric("turns", number, time.monotonic(), "count"))

    async def _turn(
        self, number: int, last: int, words: Mapping[str, str], replay: PickUp | None
    ) -> bool:
        """One turn (``replay``: the recorded reply of a resumed run's last turn, read
        again); True when the run ends with it."""
        turn = TurnState(number, set(self.run.actions), len(self.run.errors))
        cuts = len(self.scheduler.spec.spend.cuts)  # llm actions' replies the budget cut
        hold: Hold | None = None
        if replay is None:
            await self.feeds.refresh_due()
            messages, fit, budget = await self._messages(words["budget"])
            held = budget or reserve(
                self.scheduler, self.model, fit.tokens, self.agent.max_tokens, words["budget"]
            )
            if isinstance(held, str):  # the request is not sent
                self._stop("budget", "budget", held)
                return True
            hold = held
            cut = self._resume.open if self._picked_up and self._resume is not None else None
            self.scheduler.emit(Turn(number, time.monotonic(), self.model.name, cut))
            self._report_fit(number, fit)
        else:
            turn.before, turn.errors_before = set(replay.before), replay.errors_before
        try:
            if replay is None:
                await self._stream(turn, messages, hold)
            else:
                await self._reread(turn, replay.chunks)
            await self.scheduler.drain()
        finally:
            if hold is not None:
                hold.release()  # (settled already unless the reply never started)
            self._close(turn)
        cap = self.agent.max_tokens
        outcome, reason = decide(turn, cap and min(cap, reply_limit(self.model) or cap), words)
        if outcome == "truncated" and hold is not None and budget_cut(hold, self.model):
            self._stop("budget", "budget", cut_by_budget(hold, words["budget"]))
            return True  # the budget's cap cut the reply, not the user's --max-tokens
        outcome, reason = script_end(self.model, turn, outcome, reason, reread=replay is not None)
        if outcome == "results" and number == last:
            outcome = "limit"
        # A reply of plain text (no response block, no actions): that text is the answer.
        answer = outcome == "final" and turn.loose and not turn.responded
        self._emit(TurnEnd(number, time.monotonic(), outcome, reason, turn.finish, answer))
        if outcome == "final" and self.typed is not None:
            again, why = self.typed.verdict(number, last, words)
            if again:  # the errors go back as the next turn (it counts as one)
                self._say({"role": "user", "content": again})
                return False
            if why:
                self._stop("failed", "answer did not fit", why)
                return True
        if replay is not None and outcome in ("truncated", "interrupted", "failed"):
            self._go_on(turn, outcome)  # a resumed run reads on from its cut reply
            return False
        if outcome == "final":
            if turn.finish == "content_filter" or reason in NO_ANSWER.values():
                self.run.notes.append(reason)  # completed, but the cell says so
                self.run.reason = reason
            return True
        stops = {"truncated": "token limit", "interrupted": "stream failed"}
        if outcome in (*stops, "failed"):
            self._stop(outcome, stops.get(outcome, "model failed"), reason)
            return True
        self._send_results(turn, reason)
        return self._actions_cut(cuts, words)

    def _actions_cut(self, before: int, words: Mapping[str, str]) -> bool:
        """Whether the run stops: the budget cut an ``llm`` action's reply this turn."""
        why = actions_cut(self.scheduler, before, words["budget"])
        if why is not None:
            self._stop("budget", "budget", why)  # what the budget left went to that reply
        return why is not None

    async def _learn_window(self) -> None:
        """A model that can ask its server for its real context window (llama.cpp's
        ``/props``...) does so before the first turn, unless the agent set a budget."""
        learn = getattr(self.model, "learn_context_window", None)
        if learn is not None and not self.agent.context_tokens:
            await learn()
            self.budget = budget_for(None, self.model)

    def _emit(self, event: AnyEvent) -> None:
        """Record and pass on an event of a turn's end, unless the record of a resumed
        run already holds it (``pick_up``)."""
        key = event_key(event)
        if key in self._known:
            self._known.remove(key)
            return
        self.scheduler.emit(event)

    def _go_on(self, turn: TurnState, outcome: str) -> None:
        """A resumed run's last reply was cut (the kernel died, the stream dropped, the
        token limit): the model is told so, with the results of that reply's actions,
        and its next reply reads on from the cut (as ``Agent.continue_run``)."""
        text = "".join(turn.text)
        errors = [e for e in self.run.errors[turn.errors_before :] if e.id is None]
        how = "was cut off at your token limit" if outcome == "truncated" else "was interrupted"
        note = cut_note(text, how, self._turn_nodes(turn), errors, self.dialect, self.result_limit)
        self._say({"role": "user", "content": note})
        self._resume = Resume(text, self.dialect) if text else None

    def _stop(self, status: str, reason: str, why: str) -> None:
        self.scheduler.outcome = status
        self.run.reason = why
        self.scheduler.emit(Interrupt(reason, time.monotonic(), why))

    # ---- messages ---------------------------------------------------------------

    async def _messages(self, go_on: str) -> tuple[list[Message], Fit, str | None]:
        """What this turn sends: the system prompt and the conversation, fitted into the
        context budget (``runtime.loop.context``); recorded as a ``ContextUse`` event.
        The third is why the run must stop before it (None: it need not): the summary
        of older turns it needs would pass the run's budget (``go_on`` says how to go on)."""
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
            budget = await self._summarise(folded, go_on)
            if budget is not None:
                return [], fit, budget
            fit = self._fit({"role": "system", "content": text})
        self.conversation.marks = fit.marks
        self._sent = list(fit.messages)
        return self._sent, fit, None

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

    async def _summarise(self, folded: range, go_on: str) -> str | None:
        """Ask the model for a summary of the messages in ``folded`` (an ``llm`` call; a
        script answers from its ``--- reply to context-summary ---`` section). When that
        fails the fit falls back to a plain cut; the run goes on either way. It is a
        request like a turn's: checked against the run's budget before it is sent (the
        reason it was not, returned: the run stops), priced, its tokens counted."""
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
        if sub is not None:
            try:
                model = sub("context-summary")
            except Exception:
                return None
        # The reply is capped: a small model may otherwise write until its context is
        # full (minutes on a CPU), for a summary asked to be 200 words.
        hold = reserve(
            self.scheduler, model,
            self.conversation.counter.count({"role": "user", "content": prompt}), SUMMARY_TOKENS,
            go_on, "the run before its request for a summary of the older conversation",
            SUMMARY_TOKENS,  # a summary cut short would stand for the turns it left out
        )  # fmt: skip
        if isinstance(hold, str):
            return hold
        request = {**self.scheduler.request, "max_tokens": SUMMARY_TOKENS}  # (all it holds)
        try:
            with anyio.fail_after(120):
                text = await complete(
                    text_client(model, request, payer(self.scheduler, model, hold)),
                    [{"role": "user", "content": prompt}],
                )
        except Exception:
            return None
        finally:
            hold.release()
        if text.strip():
            self.conversation.summaries[(folded.start, folded.stop)] = redact(text.strip())
        return None

    def _say(self, message: ChatMessage) -> None:
        # What goes into the conversation is sent to the model and kept in transcripts:
        # a key a tool printed, or one the model was given, goes no further.
        message = cast(ChatMessage, redact_value(message))
        self.conversation.append(message)
        self._emit(
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

    def _constraint(self, turn: TurnState) -> dict[str, Any]:
        """The ``constraint=`` argument of this turn's request (``Agent.constrain``).

        Turn-aware: a run's first turn calls tools (when there are any; a typed run's may
        also answer, so a question that needs no tool is answered at once); a turn after
        results calls tools or answers (``grammar.later_tools``, ``grammar.later_stage``),
        and a typed run's answer is JSON of its type, ``"$name"`` in it for the names a
        parameter's may reach now. A reply that continues a cut one is not constrained (it
        starts mid-text), nor is a model that takes no grammar."""
        constrain = self.agent.constrain
        if constrain is False or turn.resume is not None:
            return {}
        if not takes_constraint(self.model):
            note = f"constrain: the model {self.model.name!r} takes no grammar; not constrained"
            if note not in self.run.notes:
                self.run.notes.append(note)
            return {}
        names = [*self.run.variables, *self.feeds, *self.scheduler.namespace]
        out = self.agent.typed
        typed = None if out is None else grammar.TypedAnswer(out.schema, names)
        tools = self.scheduler.registry.schemas(("tool",))
        if turn.number == 1 and tools:
            stage: grammar.Stage = "actions" if typed is None else "either"
        else:
            ran = [n.name for n in self.run.actions.values() if n.status not in NOT_RAN]
            tools = grammar.later_tools(tools, ran)
            stage = grammar.later_stage(tools, repeated=self._looping)
        form = "gbnf" if constrain is True else str(constrain)
        text = grammar.reply_grammar(
            self.dialect, tools, stage, known_ids=sorted(self.run.actions), typed=typed
        )
        turn.constrained = True
        return {"constraint": grammar.Constraint(text, form, stage).body()}

    async def _stream(self, turn: TurnState, messages: list[Message], hold: Hold | None) -> None:
        parser = Parser(self.dialect, taken_ids=self.taken | set(self.run.actions))
        turn.resume, self._resume = self._resume, None
        if turn.resume is not None:
            self._carry(turn, parser, turn.resume.ready)
        # Extra request fields only when there are some: a model need not know them.
        request = self.scheduler.request
        if self.typed is not None:
            request = self.typed.request(request)
        max_tokens = self.agent.max_tokens
        if hold is not None and hold.cap is not None:  # the cap its budget reserved
            if "max_completion_tokens" in request:  # (the field the user's request named)
                request, max_tokens = with_cap(request, hold.cap), None
            else:
                max_tokens = hold.cap
        stream = self.model.stream(
            messages,
            tools=self._tools(),
            temperature=self.agent.temperature,
            max_tokens=max_tokens,
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
            # Paid when the reply ends, before its actions finish: a nested agent they
            # start spends the same budget, and sees this reply's cost in it.
            pay(self.scheduler, self.model, turn.usage, turn.chunks > 0, hold)
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

    def _take(self, turn: TurnState, parser: Parser, chunk: ModelChunk) -> bool:
        """Handle one chunk; True when the turn's reply must not be read further."""
        if not self._quiet:  # a reply read again (``_reread``) is recorded already
            self._recorder.add(chunk)
        turn.chunks += 1
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
            self._submit(turn, native_action(chunk, self._natives.original(chunk.name)))
        elif isinstance(chunk, Usage) and not self._quiet:
            now, turn.usage = time.monotonic(), chunk
            if chunk.prompt_tokens and self._sent:
                self.conversation.counter.calibrate(
                    cast(list[ChatMessage], self._sent), chunk.prompt_tokens
                )
                self.scheduler.emit(Metric("context_tokens", chunk.prompt_tokens, now, "tokens"))
            # (its prompt and completion tokens are counted when it is paid: ``pay``)
        elif isinstance(chunk, Finish):
            turn.finish = chunk.reason
        return False

    def _feed(self, turn: TurnState, parser: Parser, text: str) -> bool:
        pieces = [text] if self.dialect == "cortex" else _PIECES.findall(text)
        for piece in pieces:
            turn.text.append(piece)
            for event in parser.feed(piece):
                self._submit(turn, event)
            if parser.boundary is not None:
                turn.boundary = parser.boundary
                return True
        return False

    def _hold(self, turn: TurnState, parser: Parser, text: str, *, end: bool = False) -> bool:
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

    def _carry(self, turn: TurnState, parser: Parser, text: str) -> None:
        """Read text of the cut reply: its thought and response text belong to this run's
        answer; its actions ran (or were refused) in the run that was cut."""
        for event in parser.feed(text) if text else ():
            if isinstance(event, _TEXT_EVENTS):
                # A resumed run's record holds that text already: it counts, once.
                self._mark(turn, event) if self._picked_up else self._submit(turn, event)

    def _refuse(self, turn: TurnState, text: str) -> None:
        """A refusal is the model's answer, shown as the response and marked as a
        refusal; it is not protocol text, so the parser never reads it."""
        if not turn.refused:
            turn.refused = True
            self._submit(turn, ResponseDelta("**The model refused:** ", True))
        turn.text.append(text)
        self._submit(turn, ResponseDelta(text, True))

    def _end_reasoning(self, turn: TurnState) -> None:
        if turn.reasoning:
            turn.reasoning = False
            self._submit(turn, ThoughtEnd())

    def _submit(self, turn: TurnState, event: Event) -> None:
        self._mark(turn, event)
        if self._quiet:  # read again from the record: restored or run again, not recorded
            self.scheduler.replay(event)
            return
        if isinstance(event, ActionReady):
            # The text an action came from is recorded before it can run: a record cut
            # after the action ended (a killed kernel) holds what resume reads it from.
            self._recorder.flush()
        if isinstance(event, ActionReady) or (
            isinstance(event, ProtocolError) and event.id is not None
        ):
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
        else:
            self.scheduler.submit(event)

    def _mark(self, turn: TurnState, event: Event) -> None:
        """What an event of the reply says about the turn."""
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

    def _repeat_of(self, event: ActionReady) -> str | None:
        """In a reply written under a grammar (which admits actions on every turn), the id
        of the action that made exactly this call already and did not fail: a small model
        calls the same thing again and again, so a repeat is not run and the model is told
        (and may only answer next). A call whose try failed may be tried again."""
        call = event.action
        key = (call.type, call.name, canonical(call.parameters))
        for node in self.run.actions.values():
            done = node.action
            if done is None or node.parent is not None or node.status in NOT_RAN:
                continue
            if (done.type, done.name, canonical(done.parameters)) == key:
                return node.id
        return None

    async def _reread(self, turn: TurnState, chunks: Sequence[ModelChunk]) -> None:
        """The reply of a resumed run's last turn, read again from its record as it was
        streamed (the model is not asked): its actions are restored or run again
        (``Scheduler.replay``). A reply the record holds no end of was cut."""
        parser = Parser(self.dialect, taken_ids=self.taken | turn.before)
        self._quiet = True
        try:
            for chunk in chunks:
                if self._take(turn, parser, chunk):
                    break
            self._end_reasoning(turn)
            for event in parser.close():
                self._submit(turn, event)
            if turn.refused:
                self._submit(turn, ResponseEnd(True))
        finally:
            self._quiet = False
        if turn.finish is None and turn.boundary is None and turn.error is None:
            turn.error = ReplyCut()

    # ---- after the reply --------------------------------------------------------

    def _close(self, turn: TurnState) -> None:
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

    def _turn_nodes(self, turn: TurnState) -> list[ActionNode]:
        native = {call["id"] for call in turn.tool_calls}
        return [
            node
            for id, node in self.run.actions.items()
            if id not in turn.before and id not in native and node.parent is None
        ]

    def _send_results(self, turn: TurnState, reason: str) -> None:
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
