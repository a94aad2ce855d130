"""The bridge between a synchronous cell and an async run in a worker thread."""

from __future__ import annotations

import _thread
import itertools
import threading
import time
from typing import Any

import anyio
import pytest

from cortex_jupyter._bridge import Bridge, Emit, Loop


def test_events_arrive_in_order_in_the_calling_thread_and_coalesced() -> None:
    seen: list[Any] = []
    batches: list[int] = []
    caller = threading.get_ident()

    def deliver(events: list[Any]) -> None:
        assert threading.get_ident() == caller
        if events:
            batches.append(len(events))
        seen.extend(events)

    async def job(emit: Emit) -> str:
        assert threading.get_ident() != caller
        for i in range(2000):
            emit(i)
            if i % 100 == 0:
                await anyio.sleep(0.01)
        return "done"

    started = time.monotonic()
    assert Bridge(job, deliver, hz=25).run() == "done"
    elapsed = time.monotonic() - started
    assert seen == list(range(2000))
    # At most one delivery per 1/25 s, plus the last one.
    assert len(batches) <= elapsed * 25 + 2


def test_a_slow_trickle_is_delivered_without_waiting_for_the_end() -> None:
    times: list[float] = []

    async def job(emit: Emit) -> None:
        for i in range(3):
            emit(i)
            await anyio.sleep(0.2)

    def deliver(events: list[Any]) -> None:
        if events:
            times.append(time.monotonic())

    Bridge(job, deliver, hz=25).run()
    assert len(times) >= 3  # each event was shown while the job was still running


def test_the_cell_ends_when_the_job_ends_not_when_the_pumps_wait_runs_out() -> None:
    """The pump waits up to 1/hz for events; when the job ends it is woken, not left to
    wait its time out (it was up to 40 ms at the end of every cell). With hz so low the
    wait would be an hour, the run still returns, with every event delivered."""
    seen: list[Any] = []
    job_ended = threading.Event()

    async def job(emit: Emit) -> str:
        emit("first")  # delivered at once: the first batch is always due
        await anyio.sleep(0.05)  # the pump is now waiting for the next event
        emit("last")
        await anyio.sleep(0.05)  # taken: the pump waits again, and nothing more comes
        job_ended.set()
        return "done"

    bridge = Bridge(job, lambda events: seen.extend(events), hz=1 / 3600, idle=3600)
    finished: list[str] = []
    thread = threading.Thread(target=lambda: finished.append(bridge.run()), daemon=True)
    thread.start()
    assert job_ended.wait(60)
    thread.join(60)
    assert finished == ["done"], "the pump was still waiting after the job ended"
    assert seen == ["first", "last"]


def test_an_idle_run_still_gets_empty_batches_so_clocks_move() -> None:
    batches: list[list[Any]] = []

    async def job(emit: Emit) -> None:
        emit("start")
        await anyio.sleep(1.0)

    Bridge(job, batches.append, hz=25, idle=0.2).run()
    assert batches[0] == ["start"]
    assert 3 <= sum(1 for b in batches if not b) <= 6


def test_a_view_left_behind_is_called_again_soon_not_at_the_idle_pace() -> None:
    """A view whose message budget held changes back says so; it gets its next (empty)
    batch after 1/hz, so what waited shows within a frame or two, not a quarter second."""
    calls: list[float] = []

    def deliver(events: list[Any]) -> bool:
        calls.append(time.monotonic())
        return len(calls) <= 5  # behind for the first five calls

    async def job(emit: Emit) -> None:
        emit("start")
        await anyio.sleep(1.0)

    Bridge(job, deliver, hz=25, idle=0.25).run()
    gaps = [b - a for a, b in itertools.pairwise(calls)]
    assert all(gap < 0.1 for gap in gaps[:5]), gaps  # ~1/25 s while behind
    assert all(gap > 0.2 for gap in gaps[5:-1]), gaps  # the idle pace after


def test_the_jobs_exception_reaches_the_cell_after_its_events() -> None:
    seen: list[Any] = []

    async def job(emit: Emit) -> None:
        emit("before")
        raise ValueError("tool exploded")

    with pytest.raises(ValueError, match="tool exploded"):
        Bridge(job, seen.extend).run()
    assert seen == ["before"]


def test_keyboard_interrupt_cancels_the_job_quickly_and_is_reraised() -> None:
    seen: list[Any] = []
    cancelled = threading.Event()

    running = threading.Event()

    async def job(emit: Emit) -> None:
        emit("started")
        running.set()
        try:
            await anyio.sleep(30)
        finally:
            cancelled.set()
            emit("cleaned up")

    def press_stop() -> None:  # SIGINT arrives in the main thread as KeyboardInterrupt
        if running.wait(timeout=60):
            _thread.interrupt_main()

    threading.Thread(target=press_stop, daemon=True).start()
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        Bridge(job, seen.extend).run()
    assert time.monotonic() - started < 20  # never the job's 30 s
    assert cancelled.is_set()
    assert seen == ["started", "cleaned up"]


# ---- the session's own loop ---------------------------------------------------------


def test_work_left_in_the_background_reports_late_and_can_be_stopped() -> None:
    loop = Loop()
    late: list[Any] = []
    arrived = threading.Event()

    def collect(events: list[Any]) -> None:
        late.extend(events)
        arrived.set()

    async def job(emit: Emit) -> str:
        async def later(seconds: float, name: str) -> None:
            try:
                await anyio.sleep(seconds)
                emit(f"{name} done")
            except anyio.get_cancelled_exc_class():
                emit(f"{name} cancelled")
                raise

        loop.background.start_soon(later, 0.2, "quick")
        loop.background.start_soon(later, 30, "slow")
        emit("run over")
        return "result"

    shown: list[Any] = []
    try:
        started = time.monotonic()
        assert Bridge(job, shown.extend, loop=loop, late=collect).run() == "result"
        assert time.monotonic() - started < 0.2  # the run did not wait for either
        assert shown == ["run over"]
        assert arrived.wait(2.0) and late == ["quick done"]
        loop.stop_background()
        deadline = time.monotonic() + 2.0
        while late != ["quick done", "slow cancelled"] and time.monotonic() < deadline:
            time.sleep(0.01)
        assert late == ["quick done", "slow cancelled"]
        # The loop and a fresh background group still work.
        assert Bridge(job, shown.extend, loop=loop, late=collect).run() == "result"
    finally:
        loop.close()
    assert not loop._thread.is_alive()
