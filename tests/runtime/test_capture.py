"""Each action's own output (issue 12 §1): print, stderr, logging, warnings, progress,
generator tools and tqdm bars are kept on the node and reported as coalesced events, and
none of it reaches the caller's stream."""

from __future__ import annotations

import logging
import sys
import threading
import time
import warnings
from collections.abc import AsyncIterator, Iterator

import anyio
import pytest

from cortex_jupyter import progress
from cortex_jupyter.runtime import ActionOutput, Registry, Run, Step, run_stream
from cortex_jupyter.runtime.scheduler import capture as capture_module
from tests.runtime.fixture_types import Act

pytestmark = pytest.mark.anyio


# Two chatty tools print in step, so their lines truly interleave.
_GATE = threading.Barrier(2, timeout=5)


def chatty(tag: str, lines: int = 3) -> str:
    """Print lines, in step with the other chatty tool (so they truly interleave)."""
    for i in range(lines):
        print(f"{tag} line {i}")
        if lines == 3:
            _GATE.wait()
    return tag


async def async_chatty(tag: str) -> str:
    """Print from the run's own loop."""
    print(f"{tag} from a coroutine")
    await anyio.sleep(0)
    print(f"{tag} again", file=sys.stderr)
    return tag


def noisy() -> str:
    """stderr, a log record and a warning."""
    print("to stderr", file=sys.stderr)
    logging.getLogger("noisy.lib").warning("disk at %d%%", 93)
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.warn("old API", DeprecationWarning, stacklevel=1)
    return "ok"


def counting(n: int) -> int:
    """Report progress n times."""
    for i in range(1, n + 1):
        progress(i, n, f"item {i}")
    return n


async def async_counting(n: int) -> int:
    """Report progress from a coroutine."""
    for i in range(1, n + 1):
        progress(i, None, "working")
        await anyio.sleep(0)
    return n


def many_lines(n: int) -> int:
    """Print n numbered lines and log every hundredth."""
    for i in range(n):
        print(f"line {i:05d}")
        if i % 100 == 0:
            logging.getLogger("many").warning("at %05d", i)
    return n


def late_printer() -> str:
    """Keeps printing after its timeout cancelled it (its thread is abandoned)."""
    time.sleep(0.3)
    print("printed after the timeout")
    return "late"


def squares(n: int) -> Iterator[int]:
    """A sync generator: partial results."""
    for i in range(1, n + 1):
        time.sleep(0.01)
        yield i * i


def with_return(n: int) -> Iterator[int]:
    """A generator whose return value is the output."""
    yield from range(n)
    return -1


async def async_words(text: str) -> AsyncIterator[str]:
    """An async generator: each partial is the text so far."""
    so_far = ""
    for word in text.split():
        so_far = f"{so_far} {word}".strip()
        await anyio.sleep(0.01)
        yield so_far


def bar(n: int) -> int:
    """A tqdm progress bar."""
    from tqdm.auto import tqdm

    total = 0
    for i in tqdm(range(n), desc="crunching", mininterval=0):
        total += i
    return total


# ``hog`` holds the run's loop (as a slow front end or a blocking callback does) and
# only lets go once ``reporter``, in a worker thread, has printed and reported progress:
# a writer that waits for the loop never gets there.
_STARTED = threading.Event()
_HOLDING = threading.Event()
_REPORTED = threading.Event()


def reporter(n: int) -> int:
    """Print and report progress from a worker thread while the loop is held."""
    _STARTED.set()
    _HOLDING.wait(10)
    for i in range(1, n + 1):
        print(f"row {i}")
        progress(i, n, f"row {i}")
    _REPORTED.set()
    return n


async def hog() -> bool:
    """Hold the run's loop until the reporter has finished writing; True if it did."""
    await anyio.to_thread.run_sync(_STARTED.wait, 10)
    _HOLDING.set()
    return _REPORTED.wait(10)  # blocks the loop on purpose


@pytest.fixture
def registry() -> Registry:
    registry = Registry(builtins=False)
    _GATE.reset()
    for tool in (
        chatty,
        async_chatty,
        noisy,
        counting,
        async_counting,
        late_printer,
        squares,
        with_return,
        async_words,
        bar,
        reporter,
        hog,
        many_lines,
    ):
        registry.register(tool)
    return registry


def outputs(run: Run, node_id: str) -> list[ActionOutput]:
    return [e for e in run.events if isinstance(e, ActionOutput) and e.id == node_id]


async def test_parallel_tools_keep_their_own_lines_and_the_stream_gets_none(
    act: Act, registry: Registry, capsys: pytest.CaptureFixture[str]
) -> None:
    run = await run_stream(
        [
            act("a", "chatty", parameters={"tag": "AAA"}),
            act("b", "chatty", parameters={"tag": "BBB"}),
        ],
        registry=registry,
    )
    assert run.actions["a"].stdout == "AAA line 0\nAAA line 1\nAAA line 2\n"
    assert run.actions["b"].stdout == "BBB line 0\nBBB line 1\nBBB line 2\n"
    assert "".join(e.stdout for e in outputs(run, "a")) == run.actions["a"].stdout
    # every event for a node comes before its final status
    done_at = next(
        i for i, e in enumerate(run.events) if e.kind == "action_status" and e.id == "a"
        and e.status == "done"
    )  # fmt: skip
    assert all(run.events.index(e) < done_at for e in outputs(run, "a"))
    captured = capsys.readouterr()
    assert "line" not in captured.out and "line" not in captured.err


async def test_async_tools_stderr_logging_and_warnings_are_captured(
    act: Act, registry: Registry, capsys: pytest.CaptureFixture[str]
) -> None:
    run = await run_stream(
        [act("c", "async_chatty", parameters={"tag": "C"}), act("n", "noisy")], registry=registry
    )
    assert run.actions["c"].stdout == "C from a coroutine\n"
    assert run.actions["c"].stderr == "C again\n"
    noisy = run.actions["n"]
    assert noisy.stderr == "to stderr\n"
    assert noisy.logs[0] == "WARNING noisy.lib: disk at 93%"
    assert noisy.logs[1].startswith("DeprecationWarning: old API (")
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""


async def test_outside_actions_everything_passes_through(
    act: Act, registry: Registry, capsys: pytest.CaptureFixture[str]
) -> None:
    await run_stream([act("a", "async_chatty", parameters={"tag": "x"})], registry=registry)
    print("the user's own print")
    assert capsys.readouterr().out == "the user's own print\n"


async def test_progress_is_kept_and_reported_coalesced(act: Act, registry: Registry) -> None:
    run = await run_stream(
        [
            act("p", "counting", parameters={"n": 500}),
            act("q", "async_counting", parameters={"n": 50}),
        ],
        registry=registry,
    )
    report = run.actions["p"].progress
    assert report is not None and (report.done, report.total, report.note) == (500, 500, "item 500")
    assert str(report) == "500/500 item 500" and report.fraction == 1.0
    events = [e for e in outputs(run, "p") if e.progress is not None]
    assert events and events[-1].progress == report
    assert len(events) < 50  # 500 reports, a handful of events
    assert str(run.actions["q"].progress) == "50 working"


async def test_a_thread_that_prints_and_reports_progress_never_waits_for_the_loop(
    act: Act, registry: Registry
) -> None:
    """The quickstart's crunch cell hung at 14/20 in Notebook 7: a worker's progress()
    waited for the run's loop while holding its capture, and the loop's flusher waited
    for that capture. Writers now never wait for the loop."""
    for flag in (_STARTED, _HOLDING, _REPORTED):
        flag.clear()
    run = await run_stream(
        [act("r", "reporter", parameters={"n": 200}), act("h", "hog")], registry=registry
    )
    assert run.actions["h"].output is True  # the reporter finished while the loop was held
    assert run.actions["r"].status == "done"
    assert run.actions["r"].stdout.count("row") == 200
    report = run.actions["r"].progress
    assert report is not None and report.done == 200
    sent = [e for e in outputs(run, "r") if e.progress is not None]
    assert sent and sent[-1].progress == report


async def test_many_printed_lines_are_kept_exactly_in_a_few_events(
    act: Act, registry: Registry
) -> None:
    """Issue 19 §5: printing is cheap (chunks kept, joined when read), and exact."""
    run = await run_stream([act("m", "many_lines", parameters={"n": 20_000})], registry=registry)
    node = run.actions["m"]
    expected = "".join(f"line {i:05d}\n" for i in range(20_000))
    assert node.stdout == expected
    assert node.stdout is node.stdout  # joined once, then kept
    sent = outputs(run, "m")
    assert "".join(e.stdout for e in sent) == expected
    assert [line for e in sent for line in e.logs] == node.logs
    assert len(node.logs) == 200 and node.dropped == {}
    assert len(sent) < 100  # 20,200 writes, a few flushes


async def test_output_past_the_limit_is_cut_and_counted(
    act: Act, registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(capture_module, "MAX_KEPT", 1000)
    run = await run_stream([act("m", "many_lines", parameters={"n": 5000})], registry=registry)
    node = run.actions["m"]
    expected = "".join(f"line {i:05d}\n" for i in range(5000))
    assert node.stdout == expected[:1000]
    assert node.dropped["stdout"] == len(expected) - 1000
    assert "".join(e.stdout for e in outputs(run, "m")) == node.stdout
    lines = "".join(f"WARNING many: at {i:05d}" for i in range(0, 5000, 100))
    assert "".join(node.logs) == lines[:1000]
    assert node.dropped["logs"] == len(lines) - 1000


async def test_progress_outside_an_action_does_nothing() -> None:
    progress(1, 2, "not in a tool")  # no error, nowhere to go


async def test_generator_tools_stream_partial_results(act: Act, registry: Registry) -> None:
    run = await run_stream(
        [
            act("g", "squares", parameters={"n": 5}),
            act("r", "with_return", parameters={"n": 3}),
            act("w", "async_words", parameters={"text": "one two three"}),
        ],
        registry=registry,
    )
    assert run.actions["g"].output == 25  # the last yielded value
    assert run.actions["r"].output == -1  # the return value wins
    assert run.actions["w"].output == "one two three"
    partials = [e.partial for e in outputs(run, "g") if e.partial is not None]
    assert partials and partials[-1] == "25"
    assert all(p in {"1", "4", "9", "16", "25"} for p in partials)


async def test_a_tool_printing_after_its_timeout_is_still_its_own(
    act: Act, registry: Registry, capsys: pytest.CaptureFixture[str]
) -> None:
    run = await run_stream([act("t", "late_printer", timeout=0.05)], registry=registry)
    assert run.actions["t"].status == "failed"
    await anyio.sleep(0.6)  # its abandoned thread prints now
    assert run.actions["t"].stdout == "printed after the timeout\n"
    assert "printed after" not in capsys.readouterr().out


async def test_tqdm_bars_in_a_tool_become_its_progress(
    act: Act, registry: Registry, capsys: pytest.CaptureFixture[str]
) -> None:
    run = await run_stream([act("b", "bar", parameters={"n": 200})], registry=registry)
    node = run.actions["b"]
    assert node.output == sum(range(200))
    assert node.progress is not None and (node.progress.done, node.progress.total) == (200, 200)
    assert node.progress.note == "crunching"
    assert node.stderr == ""  # no bar was drawn
    captured = capsys.readouterr()
    assert "crunching" not in captured.err + captured.out


async def test_workflow_steps_capture_their_own_output(registry: Registry, act: Act) -> None:
    registry.add_workflow(
        "two",
        [Step("async_chatty", {"tag": "first"}), Step("async_chatty", {"tag": "second"})],
    )
    run = await run_stream([act("w", "two", type="workflow")], registry=registry)
    assert run.actions["w.1"].stdout == "first from a coroutine\n"
    assert run.actions["w.2"].stdout == "second from a coroutine\n"
    assert run.actions["w"].stdout == ""


async def test_the_transcript_keeps_what_each_action_wrote(act: Act, registry: Registry) -> None:
    run = await run_stream(
        [act("n", "noisy"), act("p", "counting", parameters={"n": 3})], registry=registry
    )
    again = Run.from_jsonl(run.to_jsonl())
    assert again.actions["n"].stderr == "to stderr\n"
    assert again.actions["n"].logs == run.actions["n"].logs
    assert str(again.actions["p"].progress) == "3/3 item 3"
    replayed = [e for e in again.events if isinstance(e, ActionOutput)]
    assert replayed == [e for e in run.events if isinstance(e, ActionOutput)]


def test_the_public_progress_function_is_importable_from_the_package() -> None:
    import cortex_jupyter

    assert cortex_jupyter.progress is progress
