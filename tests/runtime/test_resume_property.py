"""Stop a run at any point, resume it from the store, get the same result (issue 27, item 5).

Hypothesis writes small scripted runs: one to three turns of one to three actions (each
with an ``output_key``; a parameter may be a literal or an earlier action's ``$name``),
sync or async tools, then an answer that names outputs with ``$name``. Each run goes once
uninterrupted (the reference: answer, bindings), then again, stopped (Stop, a cancel)
right after its k-th event; the store's rows are read back as a new process would
(``open_run``) and resumed by a fresh ``Agent`` with fresh tools. The resumed run must
end with the reference's answer and bindings, keep its id and show completed in the
store; no tool that finished before the stop is called again, and the model is not asked
again for a turn it had finished.
"""

from __future__ import annotations

import tempfile
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from cortex_jupyter import Agent, Registry, Run
from cortex_jupyter.models import ScriptModel
from cortex_jupyter.runtime.core.events import ActionStatus, AnyEvent, Chunk
from cortex_jupyter.runtime.core.model.chunks import Finish, TextChunk
from cortex_jupyter.runtime.loop.agent import RunHooks
from cortex_jupyter.store import open_run
from cortex_jupyter.store.writer import Store


@dataclass(frozen=True)
class Action:
    id: str
    tool: int
    arg: int | str  # a literal, or the output_key of an earlier action


@dataclass(frozen=True)
class Spec:
    turns: tuple[tuple[Action, ...], ...]
    answer_keys: tuple[str, ...]
    async_tools: bool
    chunk_size: int

    def script(self) -> list[str]:
        out = []
        for turn in self.turns:
            text = ""
            for a in turn:
                x = f'"${a.arg}"' if isinstance(a.arg, str) else str(a.arg)
                text += (
                    f'<action id="{a.id}">{{"name": "t{a.tool}", "parameters": {{"x": {x}}}, '
                    f'"output_key": "k{a.id}"}}</action>'
                )
            out.append(text)
        names = " ".join(f"${k}" for k in self.answer_keys)
        out.append(f"<response>Got {names}.</response>")
        return out


@st.composite
def specs(draw: st.DrawFn) -> Spec:
    turns: list[tuple[Action, ...]] = []
    keys: list[str] = []
    n = 0
    for _ in range(draw(st.integers(1, 3))):
        turn = []
        for _ in range(draw(st.integers(1, 3))):
            n += 1
            arg: int | str
            if keys and draw(st.booleans()):
                arg = draw(st.sampled_from(keys))
            else:
                arg = draw(st.integers(0, 9))
            turn.append(Action(f"a{n}", draw(st.integers(0, 2)), arg))
            keys.append(f"ka{n}")
        turns.append(tuple(turn))
    answer = tuple(draw(st.lists(st.sampled_from(keys), min_size=1, max_size=3)))
    return Spec(tuple(turns), answer, draw(st.booleans()), draw(st.sampled_from([4, 16, 200])))


CUT = "Your previous reply was interrupted after:\n\n"
RESULTS = "These actions of that reply already ran"


class Faithful(ScriptModel):
    """A script that, asked to read on after a cut reply (``Agent.continue_run``'s
    message), streams the rest of that reply, as a real model would, instead of its next
    turn."""

    requests = 0
    merged = 0

    @property
    def remaining_turns(self) -> Any:
        """None, as a real model has: it can always be asked to read on (a plain script
        cannot, and the loop lets its recorded last reply stand)."""
        return None

    def stream(self, messages: Any, **kw: Any) -> Any:
        self.requests += 1
        last = messages[-1] if messages else None
        content = last.get("content") if isinstance(last, dict) else getattr(last, "content", None)
        if isinstance(content, str) and content.startswith(CUT) and self.turns_used:
            written = content[len(CUT) :].rsplit("\n\nContinue from there", 1)[0]
            whole = self.turns[self.turns_used - 1]
            # The note may show only the end of a long reply ("…" before it).
            tail = written[1:] if written.startswith("…") else written
            at = whole.find(tail)
            assert at >= 0 and (at == 0 or written.startswith("…")), (whole, written)
            rest = whole[at + len(tail) :]
            # Nothing left to write: with the results of the reply's actions in the
            # note, it goes on with its next turn; after a whole answer (no results,
            # maybe no next turn) it writes nothing more.
            if not rest and RESULTS in content:
                self.merged += 1
                return super().stream(messages, **kw)
            return self._rest(rest)
        return super().stream(messages, **kw)

    async def _rest(self, text: str) -> Any:
        for start in range(0, len(text), self.chunk_size):
            await anyio.lowlevel.checkpoint()
            yield TextChunk(text[start : start + self.chunk_size])
        yield Finish("stop")


@dataclass
class Tools:
    calls: list[tuple[str, int]] = field(default_factory=list)

    def registry(self, use_async: bool) -> Registry:
        reg = Registry()
        for i in range(3):
            reg.tool(self._make(i, use_async), name=f"t{i}")
        return reg

    def _make(self, i: int, use_async: bool) -> Any:
        calls = self.calls

        def sync(x: int) -> int:
            """A tool."""
            calls.append((f"t{i}", x))
            return x * 3 + i

        async def asynch(x: int) -> int:
            """A tool."""
            await anyio.lowlevel.checkpoint()
            calls.append((f"t{i}", x))
            return x * 3 + i

        return asynch if use_async else sync


def _agent(spec: Spec, tools: Tools, model: Faithful) -> Agent:
    return Agent(model=model, registry=tools.registry(spec.async_tools), max_turns=10)


async def _reference(spec: Spec) -> Run:
    run = await _agent(spec, Tools(), Faithful(spec.script(), chunk_size=spec.chunk_size)).run("go")
    assert run.status == "completed", (run.status, run.reason)
    return run


async def _stopped(spec: Spec, stop_at: int, path: str) -> tuple[str, Tools, int, int]:
    """The run, stopped right after its ``stop_at``-th event; its id, the tools and how
    many turns the model had been asked for and had finished."""
    tools = Tools()
    model = Faithful(spec.script(), chunk_size=spec.chunk_size)
    seen: list[AnyEvent] = []
    store = Store(path)
    run = Run()
    with anyio.CancelScope() as scope:

        def on_event(event: AnyEvent) -> None:
            seen.append(event)
            if len(seen) == stop_at:
                scope.cancel()

        await _agent(spec, tools, model).run(
            "go", run=run, hooks=RunHooks(on_event=on_event), store=store
        )
    store.flush()
    store.close()
    finished_turns = sum(e.kind == "turn_end" for e in seen)
    return run.id, tools, model.requests, finished_turns


class Dies(Store):
    """A store whose process dies after writing a run's ``after``-th event: nothing after
    it reaches the file (no end, no finish), as when the kernel is killed."""

    def __init__(self, path: str, after: int) -> None:
        super().__init__(path)
        self.after = after

    def record(self, run: Run, prompt: str, options: Any = None) -> Any:
        real = super().record(run, prompt, options)
        written = [0]

        class Cut:
            def on_event(self, event: AnyEvent) -> None:
                written[0] += 1
                if written[0] <= self_after:
                    real.on_event(event)

            def acting(self, action_id: str) -> AbstractContextManager[object]:
                return nullcontext()

            def finish(self) -> None:
                pass

        self_after = self.after
        return Cut()


async def _killed(spec: Spec, stop_at: int, path: str) -> tuple[str, Tools, int, int]:
    """The run as a kernel killed right after its ``stop_at``-th event leaves it."""
    tools = Tools()
    model = Faithful(spec.script(), chunk_size=spec.chunk_size)
    store = Dies(path, stop_at)
    run = await _agent(spec, tools, model).run("go", store=store)
    store.flush()
    store.close()
    return run.id, tools, model.requests, 0


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=specs(), stop=st.floats(0, 1), kill=st.booleans())
# Killed between the last reply's text and its finish: the store holds the whole final
# response but no end, so the model is asked to read on and has nothing to add.
@example(
    spec=Spec(
        turns=(
            (Action(id="a1", tool=0, arg=0), Action(id="a2", tool=0, arg=0)),
            (Action(id="a3", tool=0, arg=0), Action(id="a4", tool=0, arg=0)),
        ),
        answer_keys=("ka1",),
        async_tools=False,
        chunk_size=4,
    ),
    stop=0.8125,
    kill=True,
)
def test_stopped_anywhere_and_resumed_gives_the_same_result(
    spec: Spec, stop: float, kill: bool
) -> None:
    anyio.run(_check, spec, stop, kill)


async def _check(spec: Spec, stop: float, kill: bool) -> None:
    ref = await _reference(spec)
    stop_at = max(1, int(stop * len(ref.events)))
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "runs.db")
        run_id, before, asked, _ = await (_killed if kill else _stopped)(spec, stop_at, path)
        stored = open_run(run_id, store=path)
        done_before = _done(stored)
        # Replies the store holds whole (their finish recorded): never asked again; a cut
        # one is asked once to read on.
        whole = sum(isinstance(e, Chunk) and e.type == "finish" for e in stored.events)
        tools = Tools()
        model = Faithful(spec.script(), chunk_size=spec.chunk_size)
        store = Store(path)
        try:
            resumed = await _agent(spec, tools, model).resume(stored, prompt="go", store=store)
        finally:
            store.flush()
            store.close()
        note = (stop_at, len(ref.events), done_before, resumed.reason)
        assert resumed.id == run_id
        assert len(before.calls) >= len(done_before)  # each kept output was made once
        assert resumed.status == "completed", note
        assert resumed.answer == ref.answer, note
        assert resumed.variables == ref.variables, note
        # No finished action's tool is called again.
        assert len(tools.calls) == len(spec_actions(spec)) - len(done_before), (note, tools.calls)
        # The model was not asked again for a turn it had answered.
        assert model.requests == len(spec.turns) + 1 - whole - model.merged, (
            note,
            asked,
            model.requests,
        )
        back = open_run(run_id, store=path)
        assert back.status == "completed" and back.answer == ref.answer
        assert sum(isinstance(e, ActionStatus) and e.status == "done" for e in back.events) >= len(
            spec_actions(spec)
        )


def spec_actions(spec: Spec) -> list[Action]:
    return [a for turn in spec.turns for a in turn]


def _done(run: Run) -> list[str]:
    """The actions whose last recorded status event says done (the events are the
    record; a node row written after a kill may say more)."""
    last = {e.id: e.status for e in run.events if isinstance(e, ActionStatus)}
    return [id for id, status in last.items() if status == "done" and "/" not in id]


def test_a_script_killed_before_its_last_replys_end_resumes_to_that_reply() -> None:
    """A plain script (``%%cortex --script``) killed between its final answer's text and
    the reply's end: a script cannot read on, so the recorded reply stands; asking it for
    a turn after its last failed the same way on every resume."""
    spec = Spec(
        turns=((Action(id="a1", tool=0, arg=0), Action(id="a2", tool=0, arg=0)),
               (Action(id="a3", tool=0, arg=0), Action(id="a4", tool=0, arg=0))),
        answer_keys=("ka1",), async_tools=False, chunk_size=4,
    )  # fmt: skip

    async def check() -> None:
        ref = await _reference(spec)
        with tempfile.TemporaryDirectory() as tmp:
            path = str(Path(tmp) / "runs.db")
            run_id, *_ = await _killed(spec, len(ref.events) - 11, path)
            stored = open_run(run_id, store=path)
            assert stored.final_response and stored.status == "running"
            store = Store(path)
            try:
                model = ScriptModel(spec.script(), chunk_size=spec.chunk_size)
                agent = Agent(model=model, registry=Tools().registry(False), max_turns=10)
                resumed = await agent.resume(stored, prompt="go", store=store)
            finally:
                store.flush()
                store.close()
            assert resumed.status == "completed", resumed.reason
            assert resumed.answer == ref.answer

    anyio.run(check)
