"""``%%cortex`` and ``%cortex`` through a real IPython shell (no widget front end: text view)."""

from __future__ import annotations

import _thread
import io
import re
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from cortex_jupyter import default_registry
from cortex_jupyter.session import CortexRunError, session_for
from tests.conftest import SECRET
from tests.models.fake_openai_server import (
    Error,
    FakeOpenAIServer,
    Stream,
    finish,
    texts,
)

#: Set when ``magic_slow`` starts: a Stop pressed then finds its action running.
SLOW_STARTED = threading.Event()


def press_stop_once_slow_runs() -> None:
    """The Stop button (``_thread.interrupt_main``, as the kernel's interrupt), pressed
    from another thread once ``magic_slow`` runs: ordering, not a timer, decides."""

    def press() -> None:
        if SLOW_STARTED.wait(timeout=60):
            _thread.interrupt_main()

    threading.Thread(target=press, daemon=True).start()


@pytest.fixture
def tools() -> Iterator[None]:
    """Two tools in the default registry for the duration of a test."""

    @default_registry.tool(name="magic_add")
    def add(a: int, b: int) -> int:
        """Add two whole numbers."""
        return a + b

    @default_registry.tool(name="magic_slow")
    def slow(seconds: float) -> str:
        """Sleep, then say so."""
        SLOW_STARTED.set()
        time.sleep(seconds)
        return f"slept {seconds}"

    @default_registry.tool(name="magic_same")
    def same(value: Any) -> bool:
        """Whether ``value`` is the notebook object ``frame``."""
        return value is same.frame  # type: ignore[attr-defined, no-any-return]

    SLOW_STARTED.clear()
    yield
    for name in ("magic_add", "magic_slow", "magic_same"):
        default_registry.remove("tool", name)


def run(ip: InteractiveShell, line: str, body: str) -> Any:
    return ip.run_cell_magic("cortex", line, body)


@pytest.mark.usefixtures("tools")
def test_script_cell_runs_actions_binds_variables_and_leaves_the_run(
    ip: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    run(
        ip,
        "--script --delay 0",
        '<thought>Adding.</thought>\n<action id="s">{"name": "magic_add", '
        '"parameters": {"a": 2, "b": 3}, "output_key": "total"}</action>\n'
        "<response>The total is **$total**.</response>",
    )
    assert ip.user_ns["total"] == 5
    record = ip.user_ns["_cortex"]
    assert record.status == "completed"
    assert record.actions["s"].status == "done"
    assert record.thought == "Adding."
    out = capsys.readouterr().out
    assert "[thought] Adding." in out
    assert "magic_add (s) -> 5" in out


@pytest.mark.usefixtures("tools")
def test_braces_are_never_interpreted_and_dollar_names_pass_objects(ip: InteractiveShell) -> None:
    frame = object()
    ip.user_ns["frame"] = frame
    default_registry.get("tool", "magic_same").func.frame = frame  # type: ignore[union-attr]
    run(
        ip,
        "--script --delay 0",
        '<thought>def f(x): return {x: {"y": 1}}</thought>\n'
        '<action id="same">{"name": "magic_same", "parameters": {"value": "$frame"}, '
        '"output_key": "is_same"}</action>',
    )
    assert ip.user_ns["_cortex"].thought == 'def f(x): return {x: {"y": 1}}'
    assert ip.user_ns["is_same"] is True


@pytest.mark.usefixtures("tools")
def test_multi_turn_script_feeds_results_back(ip: InteractiveShell) -> None:
    run(
        ip,
        "--script --delay 0",
        '<action id="a">{"name": "magic_add", "parameters": {"a": 1, "b": 1}}</action>\n'
        "--- next turn ---\n<response>Two.</response>",
    )
    record = ip.user_ns["_cortex"]
    assert (record.status, record.turns, record.response) == ("completed", 2, "Two.")


@pytest.mark.usefixtures("tools")
def test_the_answer_is_the_final_reply_with_names_filled_whole_in_python_and_text(
    ip: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    # Issue 18 items 1, 2 and 7g, issue 19 item 13, through a real cell.
    essay = " ".join(f"word{i}" for i in range(120))
    ip.user_ns.update(sevenB=7, essay=essay)
    run(
        ip,
        "--script --delay 0 --text",
        '<action id="s">{"name": "magic_add", "parameters": {"a": 2, "b": 3}, '
        '"output_key": "fiveA"}</action>\n'
        '<response final="false">Adding first…</response>\n'
        "--- next turn ---\n"
        "<response>Totals: $fiveA and **$sevenB**\n\n$essay</response>",
    )
    record = ip.user_ns["_cortex"]
    assert record.answer == f"Totals: 5 and **7**\n\n{essay}"
    assert record.response == "Adding first…\n\nTotals: $fiveA and **$sevenB**\n\n$essay"
    out = capsys.readouterr().out
    assert f"[answer] Totals: 5 and **7**\n\n{essay}\n" in out
    # Two response blocks of one reply: separate paragraphs, never glued together.
    run(ip, "--script --delay 0 --text", "<response>One.</response><response>Two.</response>")
    assert ip.user_ns["_cortex"].response == "One.\n\nTwo."


def test_a_nested_agents_output_in_a_cell_is_its_filled_answer(ip: InteractiveShell) -> None:
    ip.run_cell(
        "import cortex_jupyter\n"
        "@cortex_jupyter.tool(name='magic_five')\n"
        "def five() -> int:\n"
        "    return 5\n"
        "helper = cortex_jupyter.Agent('magic_helper', tools=['magic_five'])\n"
    )
    try:
        run(
            ip,
            "--script --delay 0 --text",
            '<action type="agent" id="h">{"name": "magic_helper", "parameters": '
            '{"task": "five?"}, "output_key": "said"}</action>\n'
            "--- next turn ---\n<response>$said</response>\n"
            "--- reply to h ---\n"
            '<response final="false">Looking…</response>'
            '<action id="f">{"name": "magic_five", "output_key": "five"}</action>\n'
            "--- next turn ---\n<response>It is $five.</response>",
        )
        assert ip.user_ns["said"] == "It is 5."
        assert ip.user_ns["_cortex"].answer == "It is 5."
    finally:
        default_registry.remove("tool", "magic_five")
        default_registry.remove("agent", "magic_helper")


def test_a_hermes_reply_without_a_think_opener_keeps_its_reasoning_out_of_the_answer(
    ip: InteractiveShell,
) -> None:
    ip.user_ns["n"] = 4
    run(
        ip,
        "--script --delay 0 --text --dialect hermes --chunk-size 3",
        "The user asks for n. It is $n.\n</think>\n\nIt is **$n**.",
    )
    record = ip.user_ns["_cortex"]
    assert record.thought == "The user asks for n. It is $n.\n"
    assert record.answer == "It is **4**."


def test_a_failed_action_ends_the_cell_with_one_line_not_an_exception(
    ip: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    run(ip, "--script --delay 0", '<action id="x">{"name": "no_such_tool"}</action>')
    err = capsys.readouterr().err
    assert "cortex: 1 action(s) failed: x (no_such_tool)" in err
    assert ip.user_ns["_cortex"].actions["x"].status == "failed"


@pytest.mark.usefixtures("tools")
def test_a_refused_variable_name_is_explained_and_kept_on_the_run(
    ip: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    run(
        ip,
        "--script --delay 0",
        '<action id="a">{"name": "magic_add", "parameters": {"a": 1, "b": 2}, '
        '"output_key": "get_ipython"}</action>',
    )
    assert callable(ip.user_ns["get_ipython"])
    assert ip.user_ns["_cortex"].variables["get_ipython"] == 3
    assert "get_ipython" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("--script --chunk-size 0", "--chunk-size must be 1 or more, not '0'"),
        ("--script --chunk-size two", "--chunk-size must be a whole number, not 'two'"),
        ("--script --delay -1", "--delay must be 0 or more"),
        (
            "--dialect xml",
            "unknown dialect 'xml'; use one of: cortex, sigil, cogency, hermes, auto",
        ),
        ("--script --replay run.jsonl", "use --script or --replay, not both"),
        ("--replay run.jsonl --speed 0", "--speed must be more than 0"),
        ("--bogus", "unrecognized arguments: --bogus"),
    ],
)
def test_bad_options_are_usage_errors_that_read_like_sentences(
    ip: InteractiveShell, line: str, message: str
) -> None:
    with pytest.raises(UsageError, match=message.replace("(", r"\(")):
        run(ip, line, "<response>x</response>")


def test_no_api_key_is_one_clear_line(
    ip: InteractiveShell, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(CortexRunError, match="OPENAI_API_KEY") as caught:
        run(ip, "--model gpt-test", "hello")
    lines = caught.value._render_traceback_()
    assert len(lines) == 1 and lines[0].startswith("cortex: ")


@pytest.mark.usefixtures("tools")
def test_a_real_endpoint_streams_through_the_openai_sdk(
    ip: InteractiveShell, server: FakeOpenAIServer
) -> None:
    reply = '<action id="a">{"name": "magic_add", "parameters": {"a": 4, "b": 5}}</action>'
    server.script(
        Stream([*texts(reply, 7), finish()]),
        Stream([*texts("<response>Nine.</response>", 5), finish()]),
    )
    run(ip, "--model gpt-test", "What is 4 + 5? Pasted code: {x: 1}")
    record = ip.user_ns["_cortex"]
    assert (record.status, record.response, record.actions["a"].output) == ("completed", "Nine.", 9)
    assert server.requests[0].json["model"] == "gpt-test"
    user = [m for m in server.requests[0].json["messages"] if m["role"] == "user"]
    assert user[-1]["content"] == "What is 4 + 5? Pasted code: {x: 1}"


@pytest.mark.usefixtures("tools")
def test_a_dropped_stream_fails_the_cell_briefly_keeps_everything_and_can_continue(
    ip: InteractiveShell, server: FakeOpenAIServer, tmp_path: Path
) -> None:
    partial = (
        '<action id="a">{"name": "magic_add", "parameters": {"a": 1, "b": 2}, '
        '"output_key": "three"}</action><response>So far'
    )
    server.script(Stream(texts(partial, 9), done=False, cut=True))
    with pytest.raises(CortexRunError, match="continue"):
        run(ip, "--model gpt-test", "Go")
    record = ip.user_ns["_cortex"]
    assert record.status == "interrupted"
    assert record.actions["a"].status == "done"
    assert ip.user_ns["three"] == 3
    assert SECRET not in record.to_jsonl()
    assert SECRET not in (record.reason or "")

    server.script(Stream([*texts(": three, done.</response>", 6), finish()]))
    ip.run_line_magic("cortex", "continue")
    again = ip.user_ns["_cortex"]
    # Read on inside the response the dropped stream left open.
    assert (again.status, again.response) == ("completed", "So far: three, done.")
    note = server.requests[-1].json["messages"][-1]["content"]
    assert "So far" in note

    ip.run_line_magic("cortex", f"save {tmp_path / 'run.jsonl'}")
    assert SECRET not in (tmp_path / "run.jsonl").read_text()


def test_a_cut_answer_continued_is_the_whole_answer_and_the_header_says_truncated(
    ip: InteractiveShell, server: FakeOpenAIServer, capsys: pytest.CaptureFixture[str]
) -> None:
    server.script(
        Stream([*texts("<response>This answer starts here ", 5), finish("length")]),
        Stream([*texts("and ends here.</response>", 5), finish()]),
    )
    with pytest.raises(CortexRunError, match="cut off at its token limit"):
        run(ip, "--model gpt-test --max-tokens 8", "Explain.")
    out = capsys.readouterr().out
    # Said once: the reason names the token limit, so no "token limit:" label before it.
    assert "[truncated] the model's reply was cut off at its token limit" in out
    assert "token limit: " not in out and "[interrupted]" not in out
    assert out.rstrip().splitlines()[-1].startswith("[end]")
    assert "truncated" in out.rstrip().splitlines()[-1]

    ip.run_line_magic("cortex", "continue")
    again = ip.user_ns["_cortex"]
    assert (again.status, again.response) == (
        "completed",
        "This answer starts here and ends here.",
    )
    out = capsys.readouterr().out
    assert "[response] This answer starts here and ends here.\n" in out
    assert "</response>" not in out


#: A reply whose tool sleeps 20 s: the stop tests press stop while it runs.
SLOW = (
    '<action id="slow">{"name": "magic_slow", "parameters": {"seconds": 20}}</action>\n'
    "<response>never</response>"
)


@pytest.mark.usefixtures("tools")
def test_stop_cancels_quickly_keeps_the_kernel_usable(ip: InteractiveShell) -> None:
    press_stop_once_slow_runs()
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        run(ip, "--script --delay 0", SLOW)
    # Well before the tool's 20 s sleep ends: the cell never waits for it.
    assert time.monotonic() - started < 15
    record = ip.user_ns["_cortex"]
    assert record.actions["slow"].status == "cancelled"
    assert record.status == "cancelled"
    # The next cell works.
    run(ip, "--script --delay 0", "<response>still here</response>")
    assert ip.user_ns["_cortex"].response == "still here"


def _forgotten_loop_handler() -> Iterator[None]:
    """What an asyncio loop's ``add_signal_handler(SIGINT, ...)`` leaves when its loop is
    dropped without ``remove_signal_handler``: a no-op handler (the loop, not Python,
    was to act on the signal), so SIGINT no longer raises anything."""
    import asyncio

    loop = asyncio.new_event_loop()
    loop.add_signal_handler(signal.SIGINT, lambda: None)
    try:
        yield
    finally:
        loop.remove_signal_handler(signal.SIGINT)
        loop.close()


def _replaced(handler: Any) -> Iterator[None]:
    found = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, found)


@pytest.mark.usefixtures("tools")
@pytest.mark.parametrize(
    "left_behind",
    [
        pytest.param(_forgotten_loop_handler, id="an-asyncio-loop-handler"),
        pytest.param(lambda: _replaced(signal.SIG_IGN), id="SIG_IGN"),
        pytest.param(lambda: _replaced(lambda *_: None), id="a-library-handler"),
    ],
)
def test_stop_cancels_the_run_whatever_handler_a_library_left_on_sigint(
    ip: InteractiveShell, left_behind: Any
) -> None:
    with contextmanager(left_behind)():
        found = signal.getsignal(signal.SIGINT)
        press_stop_once_slow_runs()
        with pytest.raises(KeyboardInterrupt):
            run(ip, "--script --delay 0", SLOW)
        assert ip.user_ns["_cortex"].actions["slow"].status == "cancelled"
        # The library's handler is its own again once the cell ended.
        assert signal.getsignal(signal.SIGINT) is found


@pytest.mark.usefixtures("tools")
def test_line_commands(
    ip: InteractiveShell, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    ip.run_line_magic("cortex", "tools --text")
    out = capsys.readouterr().out
    assert re.search(r"magic_add +tool +Add two whole numbers\.", out)
    assert "(a: int, b: int)" in out

    ip.run_line_magic("cortex", "prompt")
    assert "magic_add" in capsys.readouterr().out

    ip.run_line_magic("cortex", "vars")
    assert "A model reaches no notebook name but those a cell writes as $name" in (
        capsys.readouterr().out
    )

    ip.run_line_magic("cortex", "config max_turns=3 model=tiny native_tools=yes")
    out = capsys.readouterr().out
    assert "max_turns = 3" in out and "model = 'tiny'" in out and "native_tools = True" in out
    with pytest.raises(UsageError, match="'colour=red' is not name=value"):
        ip.run_line_magic("cortex", "config colour=red")
    with pytest.raises(UsageError, match="max_turns='many' was refused"):
        ip.run_line_magic("cortex", "config max_turns=many")

    ip.run_line_magic("cortex", "history")
    assert "The conversation is empty." in capsys.readouterr().out
    ip.run_line_magic("cortex", "reset")
    assert "Conversation reset" in capsys.readouterr().out

    with pytest.raises(UsageError, match="there is no run to save yet"):
        ip.run_line_magic("cortex", f"save {tmp_path / 'x.jsonl'}")
    with pytest.raises(CortexRunError, match="no run to continue"):
        ip.run_line_magic("cortex", "continue")
    with pytest.raises(UsageError, match="unknown command 'dance'"):
        ip.run_line_magic("cortex", "dance")


@pytest.mark.usefixtures("tools")
def test_without_a_kernel_the_cell_waits_for_fire_and_forget_actions(
    ip: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    """Text printed after its cell ended would land in a later cell: in a terminal the
    cell waits (in a kernel it does not: tests/kernel/test_background.py)."""
    run(
        ip,
        "--script --delay 0",
        '<action id="bg" mode="fire_and_forget">{"name": "magic_slow", "parameters": '
        '{"seconds": 0.3}, "output_key": "slept"}</action><response>ok</response>',
    )
    assert ip.user_ns["_cortex"].actions["bg"].status == "done"
    assert ip.user_ns["slept"] == "slept 0.3"
    assert ip.user_ns["_cortex"].wait() is ip.user_ns["_cortex"]
    capsys.readouterr()
    ip.run_line_magic("cortex", "stop")
    assert capsys.readouterr().out == "No fire_and_forget action is running.\n"


def test_cells_run_on_the_sessions_loop_not_a_new_one_each(ip: InteractiveShell) -> None:
    """A loop and its thread made at every cell's start and stopped at its end cost 4-8 ms
    a cell (bench/turn_bench.py): the session keeps one, in a terminal as in a kernel."""
    loops: list[tuple[int, int]] = []

    @default_registry.tool(name="magic_where")
    async def where() -> str:
        """Which loop runs me."""
        import asyncio

        loops.append((threading.get_ident(), id(asyncio.get_running_loop())))
        return "here"

    try:
        for _ in range(2):
            run(ip, "--script --delay 0", '<action id="w">{"name": "magic_where"}</action>')
            assert ip.user_ns["_cortex"].actions["w"].output == "here"
    finally:
        default_registry.remove("tool", "magic_where")
    assert len(loops) == 2 and loops[0] == loops[1]
    assert loops[0][0] != threading.get_ident()  # still not the cell's own thread


def test_a_cortex_cell_run_from_an_async_tool_still_runs(ip: InteractiveShell) -> None:
    """An async tool runs on the session's loop: a %%cortex cell it runs (a nested agent)
    failed with "This method cannot be called from the event loop thread" once every
    cell went on that loop (it ran on a loop of its own before)."""

    answers: list[str] = []

    @default_registry.tool(name="magic_nested")
    async def nested() -> str:
        """Run a cell inside this tool."""
        ip.run_cell_magic("cortex", "--script --delay 0", "<response>nested</response>")
        answers.append(str(ip.user_ns["_cortex"].response))
        return answers[-1]

    try:
        run(ip, "--script --delay 0", '<action id="n">{"name": "magic_nested"}</action>')
    finally:
        default_registry.remove("tool", "magic_nested")
    assert answers == ["nested"]


@pytest.mark.usefixtures("tools")
def test_the_timeline_is_a_picture(ip: InteractiveShell) -> None:
    run(
        ip,
        "--script --delay 0",
        '<action id="a">{"name": "magic_add", "parameters": {"a": 1, "b": 1}}</action>',
    )
    picture = ip.user_ns["_cortex"].timeline()
    assert picture.data.lstrip().startswith("<svg")
    assert "magic_add" in picture.data


def test_the_session_is_one_per_shell(ip: InteractiveShell) -> None:
    assert session_for(ip) is session_for(ip)


@pytest.mark.usefixtures("tools")
def test_save_expands_variables_and_replay_streams_the_transcript_again(
    ip: InteractiveShell, tmp_path: Path
) -> None:
    body = (
        '<action id="a">{"name": "magic_add", "parameters": {"a": 2, "b": 2}}</action>\n'
        "--- next turn ---\n<response>Four.</response>"
    )
    run(ip, "--script --delay 0", body)
    ip.user_ns["path"] = str(tmp_path / "run.jsonl")
    ip.run_line_magic("cortex", "save $path")
    assert (tmp_path / "run.jsonl").exists()

    ip.run_line_magic("cortex", "replay $path 50")
    replayed = ip.user_ns["_cortex"]
    assert (replayed.status, replayed.turns, replayed.response) == ("completed", 2, "Four.")
    assert replayed.actions["a"].output == 4
    with pytest.raises(UsageError, match="give a transcript path"):
        ip.run_line_magic("cortex", "replay")


def test_a_continued_run_keeps_the_cells_sampling_settings(
    ip: InteractiveShell, server: FakeOpenAIServer
) -> None:
    server.script(Stream(texts("<response>So far", 4), done=False, cut=True))
    with pytest.raises(CortexRunError, match="continue"):
        run(ip, "--model gpt-test --temperature 0.3 --max-tokens 50", "Go")
    server.script(Stream([*texts("<response>Done.</response>", 6), finish()]))
    ip.run_line_magic("cortex", "continue")
    assert ip.user_ns["_cortex"].status == "completed"
    first, again = server.requests[0].json, server.requests[-1].json
    assert (again["temperature"], again["max_tokens"]) == (0.3, 50)
    assert (first["temperature"], first["max_tokens"]) == (0.3, 50)


def test_a_refused_key_fails_the_run_without_offering_to_continue_it(
    ip: InteractiveShell, server: FakeOpenAIServer
) -> None:
    """Asking again unchanged cannot fix a refused key: the run is "failed" (red in the
    header), and the one line names the fix rather than %cortex continue."""
    server.script(Error(401, {"error": {"message": "Incorrect API key provided"}}))
    with pytest.raises(CortexRunError) as caught:
        run(ip, "--model gpt-test", "Go")
    message = str(caught.value)
    assert message.startswith("the model failed: AuthenticationFailed: The server at")
    assert "refused the API key (HTTP 401)" in message and "continue" not in message
    assert SECRET not in message
    assert ip.user_ns["_cortex"].status == "failed"
    with pytest.raises(CortexRunError, match="the last run ended 'failed'"):
        ip.run_line_magic("cortex", "continue")


def test_a_cell_run_again_after_a_failed_run_sends_its_prompt_once(
    ip: InteractiveShell, server: FakeOpenAIServer
) -> None:
    server.script(Error(401, {"error": {"message": "Incorrect API key provided"}}))
    with pytest.raises(CortexRunError):
        run(ip, "--model gpt-test", "What is 2 + 2?")
    server.script(Stream([*texts("<response>Four.</response>", 6), finish()]))
    run(ip, "--model gpt-test", "What is 2 + 2?")
    assert ip.user_ns["_cortex"].response == "Four."
    sent = [m["content"] for m in server.requests[-1].json["messages"] if m["role"] == "user"]
    assert sent == ["What is 2 + 2?"]


def test_a_script_run_cannot_be_continued_and_says_why(ip: InteractiveShell) -> None:
    run(ip, "--script --delay 0 --max-turns 1", '<action id="a">{"name": "nope"}</action>')
    with pytest.raises(CortexRunError, match="a --script run cannot be continued"):
        ip.run_line_magic("cortex", "continue")


def test_the_turn_limit_is_one_line_naming_the_option(
    ip: InteractiveShell, server: FakeOpenAIServer
) -> None:
    server.script(Stream([*texts('<response final="false">thinking</response>', 8), finish()]))
    with pytest.raises(CortexRunError, match=r"after 1 turns without a final answer.*--max-turns"):
        run(ip, "--model gpt-test --max-turns 1", "Go")
    assert ip.user_ns["_cortex"].status == "turn_limit"


@pytest.mark.parametrize("async_cell", [False, True], ids=["terminal", "kernel-async-cell"])
def test_variables_on_the_cell_line_are_expanded_on_both_paths(
    ip: InteractiveShell, async_cell: bool
) -> None:
    """``{var}`` and ``$var`` on the ``%%cortex`` line expand as IPython expands a magic's
    line, whether the cell runs through ``run_cell_magic`` (a terminal) or as the async
    cell a kernel makes of it (``as_async_cell``); the body is the prompt, left as written."""
    from cortex_jupyter.magic import as_async_cell

    ip.user_ns.update(turns=1, size=4)
    if async_cell:
        ip.input_transformers_cleanup.append(as_async_cell)
    try:
        result = ip.run_cell(
            "%%cortex --script --delay 0 --max-turns {turns} --chunk-size $size\n"
            "<response>Cost: {price} and $$5.</response>"
        )
    finally:
        if async_cell:
            ip.input_transformers_cleanup.remove(as_async_cell)
    assert result.error_in_exec is None and result.error_before_exec is None
    record = ip.user_ns["_cortex"]
    assert (record.status, record.response) == ("completed", "Cost: {price} and $$5.")
    texts = [e.text for e in record.events if e.kind == "chunk" and e.type == "text"]
    assert "".join(texts).strip() == "<response>Cost: {price} and $$5.</response>"


class _CountingStream(io.StringIO):
    writes = 0

    def write(self, text: str) -> int:
        self.writes += 1
        return super().write(text)


def test_a_text_cell_shows_a_chatty_tool_in_a_few_writes(
    ip: InteractiveShell, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 19 §5: the text view writes (and redacts) what gathered once per delivery,
    not once a line: 5,000 printed lines all reach the cell, in a few writes."""

    @default_registry.tool(name="magic_chatty")
    def chatty(n: int) -> int:
        """Print n lines."""
        for i in range(n):
            print(f"row {i}")
        return n

    out = _CountingStream()
    monkeypatch.setattr(sys, "stdout", out)
    try:
        run(
            ip,
            "--script --text",
            '<action id="c">{"name": "magic_chatty", "parameters": {"n": 5000}}</action>',
        )
    finally:
        default_registry.remove("tool", "magic_chatty")
    shown = out.getvalue()
    assert all(f"row {i}\n" in shown for i in (0, 2500, 4999))
    assert shown.count(" row ") == 5000
    assert out.writes < 200
