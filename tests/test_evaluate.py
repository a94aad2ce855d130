"""evaluate(): scored tries of tool tasks per dialect, against the loopback OpenAI server
(tests/models/fake_openai_server.py) and the script model. Replies are scripted, so
each count below is known in advance; nothing here judges a real model."""

from __future__ import annotations

import html
import inspect
import re
from collections.abc import Iterator
from typing import Any

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from cortex_jupyter import Task, evaluate
from cortex_jupyter.evaluation import (
    TASKS,
    TYPED_TASKS,
    EndpointUnusable,
    measure,
    supports_constrain,
)
from cortex_jupyter.models import ScriptModel
from cortex_jupyter.protocol.events import ResponseDelta
from cortex_jupyter.runtime import Run
from cortex_jupyter.runtime.core.events import Chunk, Metric, Turn
from tests.models.fake_openai_server import (
    FakeOpenAIServer,
    Stream,
    finish,
    role,
    serve,
    texts,
    unreachable,
    usage,
)

ADD = TASKS[0]  # "add 1234 and 5678": the answer must say 6912

CORRECT_ACTION = (
    '<action type="tool" id="a1">{"name": "add", "parameters": {"a": 1234, "b": 5678}}</action>'
)
MALFORMED_ACTION = '<action type="tool" id="a1">{"name": "add", "parameters": {"a": 1234,</action>'


def reply(text: str, tokens: tuple[int, int] = (100, 10)) -> Stream:
    return Stream([role(), *texts(text, 9), finish(), usage(*tokens)])


def quiet(done: int, total: int, note: str) -> None:
    pass


def test_one_row_per_dialect_asked(server: FakeOpenAIServer) -> None:
    server.script(reply("The sum is 6912."), reply("It is 6912."), reply("6912"))
    dialects = ["cortex", "hermes", "native"]
    result = evaluate("fake-model", dialects, n=1, tasks=[ADD], progress=quiet)
    assert [(row.dialect, row.constrain, row.replies) for row in result.rows] == [
        ("cortex", False, 1),
        ("hermes", False, 1),
        ("native", False, 1),
    ]
    # native offers the task's tool as tools=; the text dialects do not
    assert ["tools" in r.json for r in server.requests] == [False, False, True]
    assert [t["function"]["name"] for t in server.requests[2].json["tools"]] == ["add"]


def test_counts_runnable_malformed_and_correct(server: FakeOpenAIServer) -> None:
    server.script(
        # try 1: a correct action, then the answer from its result
        reply(CORRECT_ACTION, (100, 30)),
        reply('<response final="true">The sum is 6912.</response>', (150, 8)),
        # try 2: an action whose JSON is cut: refused, never run; then a wrong answer
        reply(MALFORMED_ACTION, (100, 20)),
        reply('<response final="true">The sum is 7000.</response>', (140, 8)),
        # try 3: no action at all, a made-up answer in plain text
        reply("The sum of 1234 and 5678 is 6900.", (100, 12)),
    )
    result = evaluate("fake-model", ["cortex"], n=3, tasks=[ADD], progress=quiet)
    (row,) = result.rows
    assert [(t.runnable, t.malformed, t.correct, t.actions) for t in result.tries] == [
        (True, False, True, 1),
        (False, True, False, 1),  # the refused action is a node too: failed
        (False, False, False, 0),
    ]
    assert (row.replies, row.runnable, row.malformed, row.correct) == (3, 1 / 3, 1 / 3, 1 / 3)
    assert row.tokens == 30 + 8 + 20 + 8 + 12
    assert row.statuses == {"completed": 3}
    assert row.first_token is not None and row.tokens_per_second is not None
    assert len(server.requests) == 5


def test_a_failed_tool_is_not_runnable(server: FakeOpenAIServer) -> None:
    wrong = '<action type="tool" id="a1">{"name": "add", "parameters": {"x": 1}}</action>'
    server.script(reply(wrong), reply('<response final="true">I could not add.</response>'))
    result = evaluate("fake-model", ["cortex"], n=1, tasks=[ADD], progress=quiet)
    (tried,) = result.tries
    assert (tried.actions, tried.runnable, tried.malformed) == (1, False, False)


def test_summary_has_the_header_and_a_line_per_row(server: FakeOpenAIServer) -> None:
    server.script(reply(CORRECT_ACTION), reply('<response final="true">6912</response>'))
    server.script(reply("no idea"))
    result = evaluate("fake-model", "cortex,hermes", n=1, tasks=[ADD], progress=quiet)
    lines = result.summary().splitlines()
    # The caption says the bounds each try ran under (issue 25: they were invisible).
    assert lines[0] == (
        "model fake-model · 1 tasks × 1 tries · at most 512 tokens a reply, 120 s a try"
    )
    assert lines[1].split()[:10] == [
        "dialect", "constrain", "replies", "runnable", "malformed", "correct", "valid",
        "valid", "1st", "tokens",
    ]  # fmt: skip
    # No typed task was run: the typed shares are "-", never 0%.
    assert lines[2].split()[:8] == ["cortex", "no", "1", "100%", "0%", "100%", "-", "-"]
    assert lines[3].split()[:8] == ["hermes", "no", "1", "0%", "0%", "0%", "-", "-"]
    assert len(lines) == 4


def test_html_escapes_model_text(server: FakeOpenAIServer) -> None:
    server.script(reply("<img src=x onerror=alert(1)> & 12"))
    result = evaluate("fake-model", ["hermes"], n=1, tasks=[ADD], progress=quiet)
    page = result._repr_html_()
    assert "<img src=x" not in page
    assert "&lt;img src=x onerror=alert(1)&gt; &amp; 12" in page
    assert '<img alt="runnable, malformed and correct shares" src="data:image/svg+xml' in page
    assert "<table>" in page and "<td>hermes</td>" in page


def test_user_tasks_with_a_script_model() -> None:
    calls: list[str] = []

    def shout(text: str) -> str:
        """The text in capitals."""
        calls.append(text)
        return text.upper()

    task = Task("Shout 'hi' with the shout tool.", [shout], lambda answer: "HI!" in answer)
    script = ScriptModel(
        [
            '<action type="tool" id="s1" output_key="loud">'
            '{"name": "shout", "parameters": {"text": "hi"}}</action>',
            '<response final="true">It says HI!</response>',
        ]
    )
    result = evaluate(script, ["cortex"], n=2, tasks=[task], progress=quiet)
    assert calls == ["hi", "hi"]  # the script starts again for each try
    assert [(t.task, t.runnable, t.correct, t.answer) for t in result.tries] == [
        ("shout", True, True, "It says HI!"),
        ("shout", True, True, "It says HI!"),
    ]


def test_tasks_say_what_is_wrong_with_them() -> None:
    with pytest.raises(ValueError, match="prompt must be non-empty"):
        Task("  ", [], "x")
    with pytest.raises(ValueError, match="is not a regex"):
        Task("p", [], "(unclosed")
    with pytest.raises(TypeError, match="tools must be functions"):
        Task("p", ["add"], "x")  # type: ignore[list-item]


def test_progress_reports_every_try_in_order(server: FakeOpenAIServer) -> None:
    server.script(*(reply("6912") for _ in range(4)))
    seen: list[tuple[int, int, str]] = []
    evaluate(
        "fake-model", ["cortex", "sigil"], n=2, tasks=[ADD],
        progress=lambda done, total, note: seen.append((done, total, note)),
    )  # fmt: skip
    assert [(done, total) for done, total, _ in seen] == [(1, 4), (2, 4), (3, 4), (4, 4)]
    assert seen[-1][2] == "sigil: 0/2 runnable"


def test_an_unreachable_endpoint_is_one_line_and_stops_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = unreachable(monkeypatch)
    with pytest.raises(EndpointUnusable) as caught:
        evaluate("smollm2", ["cortex", "hermes"], n=3, base_url=url, progress=quiet)
    message = str(caught.value)
    assert message.startswith("evaluate: Cannot connect to 127.0.0.1:")
    assert "\n" not in message
    assert len(caught.value.result.tries) == 1  # not 60 tries that all fail alike


def test_bad_arguments_are_one_line(server: FakeOpenAIServer) -> None:
    with pytest.raises(ValueError, match=r"unknown dialect 'klingon'; choose from cortex,"):
        evaluate("fake-model", ["klingon"])
    with pytest.raises(ValueError, match="n must be a whole number"):
        evaluate("fake-model", n=0)
    with pytest.raises(ValueError, match="base_url and api_key go with a model name"):
        evaluate(ScriptModel("hi"), base_url=server.url)
    assert server.requests == []


def test_constrain_follows_what_the_agent_supports(server: FakeOpenAIServer) -> None:
    if not supports_constrain():
        with pytest.raises(ValueError, match="constrain=True needs constrained decoding"):
            evaluate("fake-model", ["cortex"], n=1, tasks=[ADD], constrain=True)
        assert server.requests == []
        return
    server.script(reply("6912"), reply("6912"))
    result = evaluate(
        "fake-model", ["cortex"], n=1, tasks=[ADD], constrain=(False, True), progress=quiet
    )
    assert [(row.dialect, row.constrain) for row in result.rows] == [
        ("cortex", False),
        ("cortex", True),
    ]
    # The constrained try really sent a grammar (the unconstrained one did not).
    bodies = [request.json for request in server.requests]
    assert ["grammar" in body for body in bodies] == [False, True]
    assert "call-add ::=" in bodies[1]["grammar"]  # a grammar for the task's tool


def test_timings_come_from_the_run_events() -> None:
    run = Run()
    run.record(Turn(1, 10.0), 10.0)
    run.record(ResponseDelta("6912", True), 10.4)  # the parser saw text first...
    run.record(Chunk("text", 10.5, text="6912"), 10.5)  # ...coalesced chunk stamped later
    run.record(Chunk("text", 11.4, text="."), 11.4)
    run.record(Metric("completion_tokens", 20, 11.5), 11.5)
    run.record(Chunk("usage", 11.5, prompt_tokens=5, completion_tokens=20), 11.5)
    run.record(Turn(2, 12.0), 12.0)
    run.record(Chunk("text", 13.0, text="x"), 13.0)
    run.record(Chunk("finish", 13.5, reason="stop"), 13.5)
    run.status = "completed"
    tried = measure(run, ADD, "cortex", False)
    assert tried.first_token == pytest.approx(0.4)  # the first turn only
    assert tried.generating == pytest.approx((11.5 - 10.4) + (13.5 - 13.0))
    assert tried.correct


# ---- %cortex eval ------------------------------------------------------------------


def default_replies() -> list[Stream]:
    """A reply for each of evaluate()'s default tasks, in order: the tool tasks get the
    number, the typed tasks (TYPED_TASKS) an object that fits, so none is asked again."""
    typed = ['{"city": "Lisbon", "temperature": 23}', "[7, 3, 45]"]
    return [reply("6912") for _ in TASKS] + [reply(answer) for answer in typed]


DEFAULT_TASKS = len(TASKS) + len(TYPED_TASKS)


def test_magic_eval_returns_the_result(ip: InteractiveShell, server: FakeOpenAIServer) -> None:
    # The default tasks grew the typed ones (issue 26): a row counts them all.
    server.script(*default_replies(), *default_replies())
    result: Any = ip.run_line_magic("cortex", "eval --dialects cortex,hermes --n 1")
    assert [row.dialect for row in result.rows] == ["cortex", "hermes"]
    assert result.rows[0].replies == DEFAULT_TASKS
    assert [row.valid for row in result.rows] == [1.0, 1.0]
    assert server.requests[0].json["model"] == "gpt-4o-mini"  # CortexMagics.model


def test_magic_eval_bad_dialect_is_a_usage_error(ip: InteractiveShell) -> None:
    with pytest.raises(UsageError, match=r"^%cortex eval: unknown dialect 'xml'"):
        ip.run_line_magic("cortex", "eval --dialects xml")


def test_magic_eval_help_runs_nothing(
    ip: InteractiveShell, server: FakeOpenAIServer, capsys: pytest.CaptureFixture[str]
) -> None:
    assert ip.run_line_magic("cortex", "eval --help") is None
    assert "--dialects" in capsys.readouterr().out
    assert server.requests == []


def test_magic_eval_unreachable_prints_one_line(
    ip: InteractiveShell, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", unreachable(monkeypatch))
    shown = ip.run_line_magic("cortex", "eval --dialects cortex --n 1")
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("cortex: evaluate: Cannot connect to 127.0.0.1:")
    assert shown is not None and len(shown.tries) == 1


@pytest.fixture
def local_server(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> Iterator[FakeOpenAIServer]:
    """What ``%cortex local start`` finds: a server answering for ``smollm2``, here the
    loopback fake, and no OPENAI_* variables (a fresh machine with no key). The cache is a
    temporary one, so nothing here can reach the user's real local server."""
    from cortex_jupyter import local

    monkeypatch.setenv("CORTEX_LOCAL_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    for running in serve():
        server = local.Server(running.url, "smollm2", 0, running.port, tmp_path / "log")
        monkeypatch.setattr(local, "start", lambda port=None, _found=server, **_: _found)
        yield running


def test_magic_eval_asks_the_server_local_start_set_up(
    ip: InteractiveShell, local_server: FakeOpenAIServer, capsys: pytest.CaptureFixture[str]
) -> None:
    ip.run_line_magic("cortex", "local start")
    local_server.script(*default_replies(), reply("6912"))
    result: Any = ip.run_line_magic("cortex", "eval --dialects cortex --n 1")
    assert result is not None and len(result.tries) == DEFAULT_TASKS
    # The cell's way: the same server, the same model name, the local server's key.
    ip.run_cell_magic("cortex", "", "Add 1234 and 5678.")
    asked = [(r.json["model"], r.headers.get("authorization")) for r in local_server.requests]
    assert asked[:DEFAULT_TASKS] == [("smollm2", "Bearer local")] * DEFAULT_TASKS
    assert asked[-1] == ("smollm2", "Bearer local")
    assert "No API key" not in capsys.readouterr().err


# ---- bounds a user need not know about (issue 25, 3.11) --------------------------------


def test_every_reply_is_bounded_unless_told_otherwise(server: FakeOpenAIServer) -> None:
    server.script(*(reply("6912") for _ in range(3)))
    evaluate("fake-model", ["cortex"], n=1, tasks=[ADD], progress=quiet)
    evaluate("fake-model", ["cortex"], n=1, tasks=[ADD], max_tokens=64, progress=quiet)
    evaluate("fake-model", ["cortex"], n=1, tasks=[ADD], max_tokens=None, progress=quiet)
    assert [r.json.get("max_tokens") for r in server.requests] == [512, 64, None]


def test_a_try_over_its_time_limit_is_cut_and_counted(server: FakeOpenAIServer) -> None:
    # The first try's reply starts, then the server sends nothing more (it would wait
    # MAX_WAIT seconds for the client to go); the second try is answered at once.
    server.script(Stream([role(), *texts("Let me think about", 6)], stall=True), reply("6912"))
    result = evaluate("fake-model", ["cortex"], n=2, tasks=[ADD], time_limit=0.5, progress=quiet)
    cut, answered = result.tries
    assert (cut.status, cut.correct) == ("timeout", False)
    assert cut.reason == "cut at the time limit of 0.5 s a try"
    assert server.client_closed.wait(30)  # the stalled request was given up, not left open
    assert (answered.status, answered.correct) == ("completed", True)
    (row,) = result.rows
    assert row.statuses == {"completed": 1, "timeout": 1}
    assert "timeout 1" in result.summary().splitlines()[2]


def test_the_caption_shows_the_bounds_given(server: FakeOpenAIServer) -> None:
    server.script(reply("6912"))
    result = evaluate(
        "fake-model", ["cortex"], n=1, tasks=[ADD], max_tokens=2000, time_limit=None,
        progress=quiet,
    )  # fmt: skip
    caption = "model fake-model · 1 tasks × 1 tries · at most 2,000 tokens a reply, no time limit"
    assert result.summary().splitlines()[0] == caption
    assert f"<caption>{caption}</caption>" in result._repr_html_()


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ({"max_tokens": 0}, "max_tokens must be a whole number, at least 1, or None; got 0"),
        ({"max_tokens": True}, "max_tokens must be a whole number, at least 1, or None"),
        ({"time_limit": float("nan")}, "time_limit must be a number of seconds above 0"),
        ({"time_limit": -1}, "time_limit must be a number of seconds above 0, or None; got -1"),
    ],
)
def test_bad_bounds_are_one_line(
    server: FakeOpenAIServer, given: dict[str, Any], says: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(says)):
        evaluate("fake-model", ["cortex"], n=1, tasks=[ADD], progress=quiet, **given)
    assert server.requests == []


def test_a_model_that_takes_no_grammar_gives_an_unconstrained_row() -> None:
    script = ScriptModel(['<response final="true">6912</response>'])
    assert "constraint" not in inspect.signature(script.stream).parameters
    result = evaluate(script, ["cortex"], n=1, tasks=[ADD], constrain=True, progress=quiet)
    (row,) = result.rows
    assert (row.constrain, row.replies) == (False, 1)
    assert [t.constrain for t in result.tries] == [False]
    assert "the model takes no grammar: unconstrained" in row.note
    line = result.summary().splitlines()[2].split()
    assert line[:2] == ["cortex", "no"]


def test_the_default_progress_is_a_bar_with_the_time_left(
    server: FakeOpenAIServer, capsys: pytest.CaptureFixture[str]
) -> None:
    server.script(reply("6912"), reply("6912"))
    evaluate("fake-model", ["cortex"], n=2, tasks=[ADD])
    err = capsys.readouterr().err
    # tqdm's text bar in a terminal: done/total [elapsed<left, rate], and the latest note
    assert re.search(r"evaluate: 100%.*\| 2/2 \[\d\d:\d\d<\d\d:\d\d", err), err
    assert "cortex: 0/2 runnable" in err


def test_magic_eval_takes_the_bounds(ip: InteractiveShell, server: FakeOpenAIServer) -> None:
    server.script(*default_replies())
    result: Any = ip.run_line_magic(
        "cortex", "eval --dialects cortex --n 1 --max-tokens 99 --time-limit 30"
    )
    assert {r.json["max_tokens"] for r in server.requests} == {99}
    assert result.caption.endswith("at most 99 tokens a reply, 30 s a try")


def test_max_tokens_in_options_is_checked_and_shown(server: FakeOpenAIServer) -> None:
    with pytest.raises(ValueError, match="max_tokens must be a whole number, at least 1"):
        evaluate("fake-model", ["cortex"], n=1, tasks=[ADD], options={"max_tokens": "lots"})
    server.script(reply("6912"))
    result = evaluate(
        "fake-model", ["cortex"], n=1, tasks=[ADD], options={"max_tokens": 77}, progress=quiet
    )
    assert server.requests[0].json["max_tokens"] == 77
    assert "at most 77 tokens a reply" in result.caption


def test_numpy_numbers_are_bounds_like_pythons(server: FakeOpenAIServer) -> None:
    # A sweep writes evaluate(..., n=np.int64(k)) or max_tokens=np.arange(...)[i]: numbers
    # from numpy are numbers, and what goes to the server and the caption is Python's.
    import numpy as np

    server.script(reply("6912"), reply("6912"))
    result = evaluate(
        "fake-model", ["cortex"], n=np.int64(2), tasks=[ADD], max_tokens=np.int32(64),
        time_limit=np.float32(30.0), max_turns=np.int64(2), progress=quiet,
    )  # fmt: skip
    assert len(result.tries) == 2
    assert [r.json["max_tokens"] for r in server.requests] == [64, 64]
    assert result.caption.endswith("at most 64 tokens a reply, 30 s a try")
    with pytest.raises(ValueError, match=re.escape("n must be a whole number, at least 1")):
        evaluate("fake-model", ["cortex"], n=np.int64(0), tasks=[ADD], progress=quiet)
    with pytest.raises(ValueError, match="time_limit must be a number of seconds above 0"):
        evaluate("fake-model", ["cortex"], tasks=[ADD], time_limit=np.float64("nan"))


def test_the_table_shows_no_secret(
    server: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A wrong answer quoting a credential (the model's text is untrusted: a replayed or
    scripted reply may hold anything) shows in the HTML table redacted, and a cut of it
    leaves no part of it."""
    key = "pw-Évaluation-0123456789-abcdef"
    monkeypatch.setenv("SERVICE_TOKEN", key)
    server.script(
        reply(f"The key is {key}."),
        reply("x" * 280 + " " + key + " and more words after it"),
    )
    result = evaluate("fake-model", ["cortex"], n=2, tasks=[ADD], progress=quiet)
    shown = result._repr_html_() + result.summary()
    pieces = {key[i : i + 6] for i in range(len(key) - 5)}
    assert [p for p in pieces if p in shown or html.escape(p) in shown] == []
