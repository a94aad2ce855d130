"""The scheduler: modes, dependencies, failures, retries, cancellation, variables, binding."""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import anyio
import pytest

from cortex_jupyter.protocol.events import (
    ActionStart,
    ContextFeedEvent,
    Event,
    ProtocolError,
    ResponseDelta,
    ThoughtDelta,
)
from cortex_jupyter.runtime import (
    ActionStatus,
    End,
    Interrupt,
    Metric,
    Registry,
    Run,
    Scheduler,
    SchedulerNotRunning,
    dispatch_latencies,
    run_stream,
)
from tests.runtime.fixture_types import Act, RunEvents

pytestmark = pytest.mark.anyio


def statuses(run: Run) -> dict[str, str]:
    return {node.id: node.status for node in run.actions.values()}


def status_events(run: Run, id: str) -> list[ActionStatus]:
    return [e for e in run.events if isinstance(e, ActionStatus) and e.id == id]


def time_of(run: Run, predicate: Callable[[Any], bool]) -> float:
    return next(t for e, t in zip(run.events, run.event_times, strict=True) if predicate(e))


# ---- modes -----------------------------------------------------------------------------


async def test_async_actions_run_concurrently(act: Act, run_events: RunEvents) -> None:
    start = time.monotonic()
    run = await run_events(
        [act(f"a{i}", "sleep", parameters={"seconds": 0.2, "value": i}) for i in range(3)]
    )
    assert time.monotonic() - start < 0.35
    assert statuses(run) == {"a0": "done", "a1": "done", "a2": "done"}
    assert [run.actions[f"a{i}"].output for i in range(3)] == [0, 1, 2]


async def test_action_starts_while_the_stream_is_still_arriving(
    act: Act, run_events: RunEvents
) -> None:
    events: list[Event] = [act("a", "sleep", parameters={"seconds": 0.01})]
    events += [ThoughtDelta(f"word {i} ") for i in range(5)]
    run = await run_events(events, gap=0.03)
    last_text = time_of(run, lambda e: e == ThoughtDelta("word 4 "))
    node = run.actions["a"]
    assert node.started is not None and node.finished is not None
    assert node.finished < last_text
    assert run.thought.startswith("word 0 word 1")


async def test_sync_action_holds_later_actions_but_not_the_text(
    act: Act, run_events: RunEvents
) -> None:
    events: list[Event] = [
        act("s", "sleep", mode="sync", parameters={"seconds": 0.15}),
        ThoughtDelta("still streaming"),
        act("later", "sleep"),
        act("independent_async", "sleep"),
    ]
    run = await run_events(events, gap=0.01)
    s = run.actions["s"]
    assert s.finished is not None
    assert time_of(run, lambda e: e == ThoughtDelta("still streaming")) < s.finished
    assert run.actions["later"].started >= s.finished  # type: ignore[operator]
    assert run.actions["later"].waits_for == ("s",)
    assert statuses(run) == {"s": "done", "later": "done", "independent_async": "done"}


async def test_a_failed_sync_action_still_releases_later_actions(
    act: Act, run_events: RunEvents
) -> None:
    run = await run_events([act("s", "boom", mode="sync"), act("later", "sleep")])
    assert statuses(run) == {"s": "failed", "later": "done"}


async def test_fire_and_forget_finishes_after_the_run_ends(act: Act, run_events: RunEvents) -> None:
    run = await run_events(
        [act("f", "sleep", mode="fire_and_forget", parameters={"seconds": 0.2}), act("a", "sleep")]
    )
    end_at = time_of(run, lambda e: isinstance(e, End))
    assert run.status == "completed"
    assert run.actions["f"].status == "done"
    assert run.actions["f"].finished > end_at  # type: ignore[operator]
    assert run.actions["a"].finished < end_at  # type: ignore[operator]


async def test_fire_and_forget_in_a_background_group_outlives_the_call(
    act: Act, registry: Registry
) -> None:
    async with anyio.create_task_group() as background:
        run = await run_stream(
            [act("f", "sleep", mode="fire_and_forget", parameters={"seconds": 0.2})],
            registry=registry,
            background=background,
        )
        assert run.status == "completed"
        assert run.actions["f"].status == "running"
    assert run.actions["f"].status == "done"
    assert isinstance(run.events[-1], ActionStatus) and run.events[-1].status == "done"


async def test_stopping_a_fire_and_forget_action_skips_what_depends_on_it(
    act: Act, registry: Registry
) -> None:
    """%cortex stop cancels the background group: the run still ends, and the action
    waiting for the stopped one is skipped with the reason (it used to wait forever)."""
    run = Run()

    async def host(*, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        async with anyio.create_task_group() as group:
            task_status.started(group)
            await anyio.sleep_forever()

    async def stop_when_running(group: anyio.abc.TaskGroup) -> None:
        while run.actions.get("f") is None or run.actions["f"].status != "running":
            await anyio.sleep(0.005)
        group.cancel_scope.cancel()

    async with anyio.create_task_group() as outer:
        background = await outer.start(host)
        outer.start_soon(stop_when_running, background)
        with anyio.fail_after(10):
            await run_stream(
                [
                    act("f", "sleep", mode="fire_and_forget", parameters={"seconds": 30}),
                    act("d", "sleep", depends_on=["f"]),
                ],
                registry=registry,
                background=background,
                run=run,
            )
    assert statuses(run) == {"f": "cancelled", "d": "skipped"}
    assert run.actions["d"].error == "depends on 'f', which was cancelled"
    assert run.status == "completed"


# ---- dependencies ------------------------------------------------------------------------


async def test_depends_on_waits_for_the_dependency(act: Act, run_events: RunEvents) -> None:
    run = await run_events(
        [
            act("b", "sleep", depends_on=["a"]),
            act("a", "sleep", parameters={"seconds": 0.05}),
        ]
    )
    assert statuses(run) == {"b": "done", "a": "done"}
    assert run.actions["b"].started >= run.actions["a"].finished  # type: ignore[operator]


async def test_implicit_dependency_passes_the_same_object(act: Act, run_events: RunEvents) -> None:
    frame = object()
    run = await run_events(
        [
            act("load", "sleep", parameters={"seconds": 0.05, "value": "$df"}, output_key="rows"),
            act("use", "echo", parameters={"value": "$rows"}),
            act("text", "echo", parameters={"value": "got $rows.__class__"}),
        ],
        namespace={"df": frame},
    )
    assert run.actions["use"].depends_on == ("load",)
    assert run.actions["use"].output is frame
    assert run.variables["rows"] is frame
    assert run.actions["text"].status == "failed"
    assert run.actions["text"].error == (
        "$rows.__class__ is not reachable: names starting with '_' are private"
    )


async def test_variables_resolve_in_nested_parameters_in_scope_order(
    act: Act, run_events: RunEvents
) -> None:
    run = await run_events(
        [
            act("a", "echo", parameters={"value": "run"}, output_key="x"),
            ContextFeedEvent("notes", "from the feed"),
            act(
                "b",
                "echo",
                parameters={"value": {"x": ["$x"], "feed": "$notes", "nb": "n=$n", "cost": "$$5"}},
            ),
        ],
        namespace={"x": "notebook", "n": 3},
    )
    assert run.actions["b"].output == {
        "x": ["run"],
        "feed": "from the feed",
        "nb": "n=3",
        "cost": "$5",
    }


async def test_unknown_variable_fails_the_action_with_suggestions(
    act: Act, run_events: RunEvents
) -> None:
    run = await run_events(
        [act("a", "echo", parameters={"value": "$sales_dat"}), act("b", "sleep", depends_on=["a"])],
        namespace={"sales_data": 1},
    )
    assert run.actions["a"].status == "failed"
    assert "unknown variable $sales_dat" in (run.actions["a"].error or "")
    assert "did you mean $sales_data?" in (run.actions["a"].error or "")
    assert run.actions["b"].error == "depends on 'a', which failed"


async def test_missing_dependency_is_skipped_and_never_hangs(
    act: Act, run_events: RunEvents
) -> None:
    with anyio.fail_after(2):
        run = await run_events([act("a", "sleep", depends_on=["ghost"]), act("b", "sleep")])
    assert statuses(run) == {"a": "skipped", "b": "done"}
    assert run.actions["a"].error == "depends on 'ghost', which never appeared in the stream"


async def test_cycle_is_skipped_and_never_hangs(act: Act, run_events: RunEvents) -> None:
    with anyio.fail_after(2):
        run = await run_events(
            [
                act("a", "sleep", depends_on=["b"]),
                act("b", "sleep", depends_on=["a"]),
                act("c", "sleep", depends_on=["a"]),
            ]
        )
    assert statuses(run) == {"a": "skipped", "b": "skipped", "c": "skipped"}
    assert run.actions["a"].error == "dependency cycle: b -> a -> b"
    assert run.actions["c"].error == "depends on 'a', which was skipped"


# ---- failures, retries, timeouts -----------------------------------------------------------


async def test_failure_skips_dependents_naming_the_failed_id(
    act: Act, run_events: RunEvents
) -> None:
    run = await run_events(
        [
            act("a", "boom", parameters={"message": "disk full"}),
            act("b", "sleep", depends_on=["a"]),
            act("c", "sleep", depends_on=["b"]),
        ]
    )
    assert run.actions["a"].error == "ValueError: disk full"
    assert isinstance(run.actions["a"].exception, ValueError)
    assert run.actions["b"].error == "depends on 'a', which failed"
    assert run.actions["c"].error == "depends on 'b', which was skipped"
    failed = status_events(run, "a")[-1]
    assert (failed.status, failed.error, failed.attempt) == ("failed", "ValueError: disk full", 1)


async def test_on_error_skip_lets_dependents_run_with_none(act: Act, run_events: RunEvents) -> None:
    run = await run_events(
        [
            act("a", "boom", on_error="skip", output_key="x"),
            act("b", "echo", parameters={"value": "$x"}),
        ]
    )
    assert run.actions["a"].status == "failed"
    assert run.actions["b"].status == "done"
    assert run.actions["b"].output is None


@pytest.mark.parametrize(
    ("fail_times", "fields", "status", "attempts"),
    [
        (2, {"retry": 2}, "done", 3),
        (3, {"retry": 2}, "failed", 3),
        (2, {"on_error": "retry"}, "done", 3),
        (1, {}, "failed", 1),
    ],
)
async def test_retries(
    act: Act,
    run_events: RunEvents,
    fail_times: int,
    fields: dict[str, Any],
    status: str,
    attempts: int,
) -> None:
    run = await run_events([act("a", "flaky", parameters={"fail_times": fail_times}, **fields)])
    node = run.actions["a"]
    assert (node.status, node.attempts) == (status, attempts)
    events = status_events(run, "a")
    retry_notes = [e for e in events if e.retry_in is not None]
    assert [e.attempt for e in retry_notes] == list(range(1, min(fail_times, attempts - 1) + 1))
    assert all(e.error and "ConnectionError: attempt" in e.error for e in retry_notes)
    backoffs = [e.retry_in for e in retry_notes]
    assert backoffs == sorted(backoffs)
    times = [e.time for e in events]
    assert times == sorted(times)


async def test_timeout_cancels_the_attempt(act: Act, run_events: RunEvents) -> None:
    start = time.monotonic()
    run = await run_events([act("a", "sleep", parameters={"seconds": 5}, timeout=0.05, retry=1)])
    assert time.monotonic() - start < 1
    node = run.actions["a"]
    assert (node.status, node.attempts) == ("failed", 2)
    assert node.error == (
        "action 'a' timed out after 0.05 s (attempt 2); raise its timeout or make it faster"
    )


async def test_a_tools_own_timeout_error_is_not_a_timeout(registry: Registry, act: Act) -> None:
    @registry.tool
    async def own() -> None:
        raise TimeoutError("upstream slow")

    run = await run_stream([act("a", "own", timeout=5)], registry=registry)
    assert run.actions["a"].error == "TimeoutError: upstream slow"


async def test_unknown_tool_and_bad_arguments(act: Act, run_events: RunEvents) -> None:
    run = await run_events(
        [act("a", "nope"), act("b", "add", parameters={"x": 1}), act("c", "nope", type="relic")]
    )
    assert run.actions["a"].error == (
        "no tool named 'nope' is registered; registered tool names: add, blocking, boom, echo, "
        "flaky, sleep"
    )
    assert run.actions["b"].error == (
        "tool 'add' cannot be called: missing parameter 'a', unexpected parameter 'x'; "
        "it takes (a: int, b: int = 0)"
    )
    assert (
        run.actions["c"].error
        == "no relic named 'nope' is registered; registered relic names: none"
    )


async def test_status_events_carry_time_attempt_and_error(act: Act, run_events: RunEvents) -> None:
    before = time.monotonic()
    run = await run_events([act("a", "add", parameters={"a": 1, "b": 2})])
    events = status_events(run, "a")
    assert [(e.status, e.attempt) for e in events] == [("pending", 0), ("running", 1), ("done", 1)]
    assert events[0].name == "add" and events[0].type == "tool"
    assert events[-1].output == "3"
    assert before <= events[0].time <= events[1].time <= events[2].time <= time.monotonic()
    node = run.actions["a"]
    assert node.started == events[1].time and node.finished == events[2].time


async def test_parser_errors_mark_nodes_failed(act: Act, run_events: RunEvents) -> None:
    run = await run_events(
        [
            ActionStart("bad", type="relic", mode="sync"),
            ProtocolError("invalid_json", "action 'bad': invalid JSON in '{nope'", "bad"),
            act("after", "sleep", depends_on=["bad"]),
            act("a", "sleep"),
            ProtocolError("duplicate_id", "duplicate id 'a'", "a"),
            ProtocolError("forged_result", "ignored <result>"),
        ]
    )
    bad = run.actions["bad"]
    assert (bad.status, bad.error, bad.type, bad.mode) == (
        "failed",
        "action 'bad': invalid JSON in '{nope'",
        "relic",
        "sync",
    )
    assert run.actions["after"].error == "depends on 'bad', which failed"
    assert run.actions["a"].status == "done"
    assert [e.code for e in run.errors] == ["invalid_json", "duplicate_id", "forged_result"]


async def test_a_repeated_action_id_does_not_run_twice(act: Act, run_events: RunEvents) -> None:
    run = await run_events([act("a", "echo", parameters={"value": 1}), act("a", "boom")])
    assert run.actions["a"].output == 1
    assert [e.code for e in run.errors] == ["duplicate_id"]


# ---- cancellation and dropped streams ------------------------------------------------------


async def test_cancel_stops_running_skips_pending_keeps_finished(
    act: Act, registry: Registry
) -> None:
    run = Run()
    start = time.monotonic()
    async with Scheduler(registry=registry, run=run) as scheduler:
        scheduler.submit(act("quick", "add", parameters={"a": 1}))
        scheduler.submit(act("slow", "sleep", parameters={"seconds": 30}))
        scheduler.submit(act("stuck", "blocking", parameters={"seconds": 1.5}))
        scheduler.submit(act("waiting", "sleep", depends_on=["slow"]))
        await anyio.sleep(0.1)
        scheduler.cancel()
        await anyio.sleep(30)
    assert time.monotonic() - start < 1
    assert statuses(run) == {
        "quick": "done",
        "slow": "cancelled",
        "stuck": "cancelled",
        "waiting": "skipped",
    }
    assert run.actions["quick"].output == 1
    assert run.actions["waiting"].error == "not started: the run was stopped"
    assert run.status == "cancelled"
    kinds = [e.kind for e in run.events[-4:]]
    assert kinds[-1] == "end" and any(isinstance(e, Interrupt) for e in run.events)


async def test_outer_cancellation_reaches_running_actions(act: Act, registry: Registry) -> None:
    run = Run()

    async def forever() -> AsyncIterator[Event]:
        yield act("slow", "sleep", parameters={"seconds": 30})
        await anyio.sleep(30)
        yield ThoughtDelta("never")

    with anyio.move_on_after(0.1) as scope:
        await run_stream(forever(), registry=registry, run=run)
    assert scope.cancelled_caught
    assert run.actions["slow"].status == "cancelled"
    assert run.status == "cancelled"
    interrupt = next(e for e in run.events if isinstance(e, Interrupt))
    assert (interrupt.reason, interrupt.error) == ("cancelled", None)


async def test_a_dropped_stream_cancels_actions_and_raises(act: Act, registry: Registry) -> None:
    run = Run()

    async def dropped() -> AsyncIterator[Event]:
        yield act("done_first", "add", parameters={"a": 2})
        yield act("slow", "sleep", parameters={"seconds": 30})
        await anyio.sleep(0.05)
        raise ConnectionError("connection reset by peer")

    with pytest.raises(ConnectionError, match="connection reset"):
        await run_stream(dropped(), registry=registry, run=run)
    assert statuses(run) == {"done_first": "done", "slow": "cancelled"}
    assert run.status == "failed"
    interrupt = next(e for e in run.events if isinstance(e, Interrupt))
    assert interrupt.error == "ConnectionError: connection reset by peer"


async def test_errors_in_the_event_callback_are_not_swallowed(act: Act, registry: Registry) -> None:
    def broken(event: Any) -> None:
        if isinstance(event, ActionStatus) and event.status == "done":
            raise RuntimeError("display broke")

    with pytest.RaisesGroup(
        pytest.RaisesExc(RuntimeError, match="display broke"), flatten_subgroups=True
    ):
        await run_stream([act("a", "add", parameters={"a": 1})], registry=registry, on_event=broken)


async def test_submit_outside_the_context_is_refused(act: Act) -> None:
    with pytest.raises(SchedulerNotRunning, match="cannot submit an event: the scheduler"):
        Scheduler().submit(act("a", "x"))


# ---- turns, variables, binding ---------------------------------------------------------------


async def test_drain_between_turns_keeps_variables(act: Act, registry: Registry) -> None:
    async with Scheduler(registry=registry) as scheduler:
        scheduler.submit(act("a", "add", parameters={"a": 1, "b": 1}, output_key="two"))
        await scheduler.drain()
        assert scheduler.run.actions["a"].status == "done"
        assert scheduler.run.status == "running"
        scheduler.submit(act("b", "add", parameters={"a": "$two", "b": 1}))
        await scheduler.drain()
        assert scheduler.run.actions["b"].output == 3
    assert scheduler.run.status == "completed"


async def test_outputs_are_bound_and_bad_names_refused(act: Act, run_events: RunEvents) -> None:
    bound: dict[str, Any] = {}
    run = await run_events(
        [
            act("a", "echo", parameters={"value": 1}, output_key="good"),
            act("b", "echo", parameters={"value": 2}, output_key="In"),
            act("c", "boom", output_key="never"),
        ],
        bind=bound.__setitem__,
    )
    assert bound == {"good": 1}
    assert run.variables == {"good": 1, "In": 2}
    assert run.actions["b"].note == (
        "output_key 'In' was not bound in the notebook: it would overwrite IPython's own name; "
        "the value stays reachable as _cortex.variables['In']"
    )
    assert run.notes == [f"b: {run.actions['b'].note}"]


async def test_a_failing_bind_is_reported(act: Act, run_events: RunEvents) -> None:
    def bind(name: str, value: Any) -> None:
        raise PermissionError("namespace is read-only")

    run = await run_events([act("a", "echo", parameters={"value": 1}, output_key="x")], bind=bind)
    assert run.actions["a"].note == (
        "output_key 'x' could not be bound: PermissionError: namespace is read-only"
    )
    assert run.variables == {"x": 1}


# ---- concurrency -----------------------------------------------------------------------------


async def test_a_thousand_sleeping_actions_run_together(registry: Registry, act: Act) -> None:
    # Together, not one after another or a few at a time: each action waits until all
    # 1,000 are running at once, so any limit on how many run together makes every one of
    # them wait until the generous deadline and fail (checked by order, not a wall clock).
    everyone = anyio.Event()
    running = 0

    @registry.tool
    async def gather(value: int) -> int:
        nonlocal running
        running += 1
        if running == 1000:
            everyone.set()
        with anyio.fail_after(120):
            await everyone.wait()
        return value

    events = [act(f"a{i}", "gather", parameters={"value": i}) for i in range(1000)]
    run = await run_stream(events, registry=registry)
    assert set(statuses(run).values()) == {"done"}
    assert [run.actions[f"a{i}"].output for i in range(1000)] == list(range(1000))


async def test_sync_tools_do_not_block_the_stream(act: Act, run_events: RunEvents) -> None:
    run = await run_events(
        [act("blocker", "blocking", parameters={"seconds": 0.3}), ResponseDelta("x")]
        + [act(f"q{i}", "sleep", parameters={"seconds": 0.01}) for i in range(3)],
        gap=0.01,
    )
    assert run.actions["blocker"].output == "woke"
    assert all(
        run.actions[f"q{i}"].finished < run.actions["blocker"].finished  # type: ignore[operator]
        for i in range(3)
    )


async def test_end_metrics_report_dispatch_latency(act: Act, run_events: RunEvents) -> None:
    run = await run_events([act("a", "sleep"), act("b", "sleep", depends_on=["a"])])
    metrics = {e.name: e.value for e in run.events if isinstance(e, Metric)}
    assert metrics["actions"] == 2
    assert 0 <= metrics["dispatch_latency_median"] <= metrics["dispatch_latency_max"] < 0.05
    assert dispatch_latencies(run) and all(0 <= v < 0.05 for v in dispatch_latencies(run))
    assert metrics["elapsed"] == pytest.approx(run.ended - run.started)  # type: ignore[operator]


# ---- generator tools ---------------------------------------------------------------------


def stuck_rows(registry: Registry) -> tuple[threading.Event, threading.Event, threading.Event]:
    """Registers ``stuck_rows(n)``: it yields a row, sets ``stepping`` and blocks in its
    next step until ``release``; ``closed`` is set once the generator is closed."""
    release, stepping, closed = threading.Event(), threading.Event(), threading.Event()

    @registry.tool(name="stuck_rows")
    def rows(n: int) -> Iterator[int]:
        """Yields a row, then blocks in its next step."""
        try:
            yield 1
            stepping.set()
            release.wait(10)
            yield 2
        finally:
            closed.set()

    return release, stepping, closed


async def test_a_sync_generator_cut_by_its_timeout_fails_cleanly_and_is_closed_later(
    registry: Registry, act: Act, run_events: RunEvents
) -> None:
    """Its step still runs in an abandoned worker thread when the timeout ends the
    attempt: closing it then raised "generator already executing". The node fails with
    the timeout's line, and the generator is closed once that step returns."""
    release, stepping, closed = stuck_rows(registry)

    run = await run_events([act("g", "stuck_rows", parameters={"n": 2}, timeout=0.2)])
    node = run.actions["g"]
    assert stepping.is_set()
    assert node.status == "failed"
    assert "generator already executing" not in (node.error or "")
    assert "timed out" in (node.error or "")
    assert not closed.is_set()  # its step is still running: it is not closed under it
    release.set()
    assert await anyio.to_thread.run_sync(closed.wait, 5)


async def test_a_sync_generator_stopped_mid_step_is_cancelled_and_closed_later(
    registry: Registry, act: Act, run_events: RunEvents
) -> None:
    release, stepping, closed = stuck_rows(registry)

    record = Run()
    async with anyio.create_task_group() as group:
        group.start_soon(
            lambda: run_events([act("g", "stuck_rows", parameters={"n": 2})], run=record)
        )
        await anyio.to_thread.run_sync(stepping.wait, 5)
        group.cancel_scope.cancel()  # what Stop does
    assert record.actions["g"].status == "cancelled"
    assert not closed.is_set()
    release.set()
    assert await anyio.to_thread.run_sync(closed.wait, 5)
