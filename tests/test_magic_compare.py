"""``%%cortex --compare a,b,c``: one prompt by several models at once (issue 35).

Each model name is answered by a fake server of its own (``session.endpoints``), so the
order of what each column receives is the test's to script. Interleaving is shown by
ordering, never by a clock: column a's server waits (a gate) until column b's first
action has run, which needs b's stream to have arrived while a was still streaming.
"""

from __future__ import annotations

import _thread
import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell

from cortex_jupyter import default_registry
from cortex_jupyter.runtime.core.events import Chunk, End
from cortex_jupyter.session import CortexRunError, session_for
from tests.conftest import SECRET
from tests.models.fake_openai_server import Error, FakeOpenAIServer, Stream, finish, serve, texts
from tests.otel_spans import recorded


def reply(body: str, gates: Any = ()) -> Stream:
    return Stream([*texts(body, 8), finish()], gates=gates)


def answering(servers: list[FakeOpenAIServer], *answers: str) -> None:
    """The first servers each answer once, with the answers in turn."""
    for server, answer in zip(servers, answers, strict=False):
        server.script(reply(f"<response>{answer}</response>"))


@pytest.fixture
def servers(
    ip: InteractiveShell, monkeypatch: pytest.MonkeyPatch
) -> Iterator[list[FakeOpenAIServer]]:
    """Three fake servers, answering the models ``ma``, ``mb`` and ``mc``."""
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    started = [serve() for _ in range(3)]
    running = [next(s) for s in started]
    endpoints = session_for(ip).endpoints
    for name, server in zip(("ma", "mb", "mc"), running, strict=True):
        endpoints[name] = (server.url, SECRET)
    yield running
    for name in ("ma", "mb", "mc"):
        endpoints.pop(name, None)
    for s in started:
        for _ in s:
            pass


B_ACTED = threading.Event()
STOP_STARTED = threading.Event()


@pytest.fixture
def tools() -> Iterator[None]:
    @default_registry.tool(name="compare_mark")
    def mark() -> str:
        """Say that column b's stream has reached its first action."""
        B_ACTED.set()
        return "marked"

    @default_registry.tool(name="compare_slow")
    def slow() -> str:
        """Wait a long time."""
        STOP_STARTED.set()
        time.sleep(20)
        return "late"

    B_ACTED.clear()
    STOP_STARTED.clear()
    yield
    default_registry.remove("tool", "compare_mark")
    default_registry.remove("tool", "compare_slow")


def compare(ip: InteractiveShell, line: str, body: str = "What is the capital of France?") -> Any:
    ip.run_cell_magic("cortex", f"--text {line}", body)
    return ip.user_ns["_compare"]


def test_columns_stream_at_once_column_b_acts_before_column_a_ends(
    ip: InteractiveShell, servers: list[FakeOpenAIServer], tools: None
) -> None:
    a, b, _ = servers
    # a sends its first chunks, then waits until b's first action ran: b's stream
    # must arrive while a is still streaming.
    a.script(reply("<response>The capital is Paris.</response>", gates=[(2, B_ACTED)]))
    b.script(
        reply('<action id="m">{"name": "compare_mark", "parameters": {}}</action>'),
        reply("<response>Paris.</response>"),
    )
    result = compare(ip, "--compare ma,mb")
    assert not a.gate_timed_out
    run_a, run_b = result["ma"].run, result["mb"].run
    assert (run_a.status, run_b.status) == ("completed", "completed")
    first_b = next(
        t for e, t in zip(run_b.events, run_b.event_times, strict=True) if isinstance(e, Chunk)
    )
    end_a = next(
        t for e, t in zip(run_a.events, run_a.event_times, strict=True) if isinstance(e, End)
    )
    assert first_b < end_a
    assert result["ma"].answer == "The capital is Paris."
    assert result["mb"].run.actions["m"].output == "marked"
    # Each column asked its own model, with the same prompt.
    assert a.requests[0].json["model"] == "ma" and b.requests[0].json["model"] == "mb"
    assert a.requests[0].json["messages"][-1] == b.requests[0].json["messages"][-1]


def test_text_prints_each_column_then_a_summary_table(
    ip: InteractiveShell, servers: list[FakeOpenAIServer], capsys: pytest.CaptureFixture[str]
) -> None:
    answering(servers, "Paris.", "Lyon.", "Paris!")
    compare(ip, "--compare ma,mb,mc")
    out = capsys.readouterr().out
    assert out.index("== ma ==") < out.index("== mb ==") < out.index("== mc ==")
    table = out[out.index("column ") :].splitlines()
    assert table[0].split() == ["column", "model", "status", "tokens", "cost", "first",
                                "action", "answer"]  # fmt: skip
    assert [row.split()[:3] for row in table[1:]] == [
        ["ma", "ma", "completed"], ["mb", "mb", "completed"], ["mc", "mc", "completed"]
    ]  # fmt: skip
    assert SECRET not in out


def test_a_failing_column_stays_in_its_column(
    ip: InteractiveShell, servers: list[FakeOpenAIServer], capsys: pytest.CaptureFixture[str]
) -> None:
    a, b, _ = servers
    a.script(*[Error(400, {"error": {"message": "model ma is not here"}})] * 3)
    b.script(reply("<response>Paris.</response>"))
    result = compare(ip, "--compare ma,mb")
    assert result["ma"].run.status != "completed"
    assert "model ma is not here" in (result["ma"].run.reason or "")
    assert result["mb"].run.status == "completed" and result["mb"].answer == "Paris."
    assert "cortex: column ma ended" in capsys.readouterr().err


def test_no_column_answering_ends_the_cell_with_one_line(
    ip: InteractiveShell, servers: list[FakeOpenAIServer]
) -> None:
    for server in servers[:2]:
        server.script(*[Error(400, {"error": {"message": "gone"}})] * 3)
    with pytest.raises(CortexRunError, match="no column answered"):
        compare(ip, "--compare ma,mb")


def test_stop_stops_every_column(ip: InteractiveShell, tools: None) -> None:
    def press() -> None:
        if STOP_STARTED.wait(timeout=60):
            _thread.interrupt_main()

    threading.Thread(target=press, daemon=True).start()
    script = '<action id="s">{"name": "compare_slow", "parameters": {}}</action>'
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        compare(ip, "--compare x,y --script --delay 0", script)
    assert time.monotonic() - started < 15  # well before the tool's 20 s: nothing waits
    result = ip.user_ns["_compare"]
    assert [result[n].run.status for n in ("x", "y")] == ["cancelled", "cancelled"]
    # The next cell works.
    compare(ip, "--compare x,y --script --delay 0", "<response>still here</response>")
    assert ip.user_ns["_compare"]["y"].answer == "still here"


def test_repeat_groups_identical_answers_with_counts(
    ip: InteractiveShell, servers: list[FakeOpenAIServer], capsys: pytest.CaptureFixture[str]
) -> None:
    a, b, _ = servers
    a.script(*[reply("<response>Paris.</response>")] * 3)
    b.script(
        reply("<response>Paris.</response>"),
        reply("<response>Lyon.</response>"),
        reply("<response>Paris.</response>"),
    )
    result = compare(ip, "--compare ma,mb --repeat 3")
    assert len(result["mb"].runs) == 3
    assert result["ma"].groups == [(3, "Paris.")]
    assert result["mb"].groups == [(2, "Paris."), (1, "Lyon.")]
    out = capsys.readouterr().out
    assert "ma  ×3 Paris." in out and "mb  ×2 Paris." in out and "mb  ×1 Lyon." in out


def test_repeat_needs_compare(ip: InteractiveShell) -> None:
    from IPython.core.error import UsageError

    with pytest.raises(UsageError, match="--repeat N goes with --compare"):
        ip.run_cell_magic("cortex", "--repeat 2 --script", "<response>x</response>")


def test_output_keys_never_bind_over_notebook_names(ip: InteractiveShell, tools: None) -> None:
    ip.user_ns["total"] = "mine"
    previous = ip.user_ns.get("_cortex")
    script = (
        '<action id="t">{"name": "compare_mark", "output_key": "total"}</action>\n'
        "<response>done</response>"
    )
    result = compare(ip, "--compare x,y --script --delay 0", script)
    assert ip.user_ns["total"] == "mine"
    assert "fresh_total" not in ip.user_ns
    for name in ("x", "y"):
        assert result[name].run.status == "completed"
        assert result[name].run.actions["t"].status == "done"  # the action ran and bound
        assert result[name].run.variables["total"] == "marked"  # on its own run only
    assert ip.user_ns.get("_cortex") is previous  # _cortex stays the last ordinary run


def test_each_column_is_stored_tagged_with_the_comparison(
    ip: InteractiveShell, servers: list[FakeOpenAIServer]
) -> None:
    answering(servers, "Paris.", "Lyon.")
    result = compare(ip, "--compare ma,mb --budget 20000tok")
    session_for(ip)  # the store writes on its own thread: wait for it to settle
    from cortex_jupyter import store

    store.open_store().flush()
    db = sqlite3.connect(store.current_path())
    rows = {
        row[0]: json.loads(row[1])
        for row in db.execute("select id, options from runs")
        if json.loads(row[1]).get("compare") == result.id
    }
    assert set(rows) == {result["ma"].run.id, result["mb"].run.id}
    columns = {options["column"]: options for options in rows.values()}
    assert columns["ma"]["model"] == "ma" and columns["mb"]["model"] == "mb"
    assert columns["ma"]["budget"] == columns["mb"]["budget"] == "20000tok"  # each its own


def test_each_column_is_its_own_invoke_agent_under_one_span_for_the_cell(
    ip: InteractiveShell, servers: list[FakeOpenAIServer]
) -> None:
    answering(servers, "Paris.", "Lyon.")
    with recorded() as spans:
        result = compare(ip, "--compare ma,mb")
    (cell,) = [s for s in spans if s.name == "compare"]
    assert cell.attributes["cortex.compare.id"] == result.id
    agents = [s for s in spans if s.name.startswith("invoke_agent")]
    assert len(agents) == 2
    assert {s.attributes["cortex.run.id"] for s in agents} == {
        result["ma"].run.id, result["mb"].run.id
    }  # fmt: skip
    for span in agents:
        assert span.parent is not None and span.parent.span_id == cell.context.span_id
        assert span.context.trace_id == cell.context.trace_id


def test_text_shows_the_diff_of_actions_and_answers_before_the_summary(
    ip: InteractiveShell, servers: list[FakeOpenAIServer], tools: None,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    a, b, _ = servers
    a.script(reply("<response>The capital is <b>Paris</b>.</response>"))
    b.script(
        reply('<action id="m">{"name": "compare_mark", "parameters": {}}</action>'),
        reply("<response>The capital is Lyon.</response>"),
    )
    compare(ip, "--compare ma,mb")
    out = capsys.readouterr().out
    diff = out[out.index("Actions aligned (ma, mb):") : out.index("column ")]
    assert "+ compare_mark: only in mb" in diff
    assert "Answer of mb against ma:" in diff
    assert "The capital is [-<b>Paris</b>.-]{+Lyon.+}" in diff


def test_the_static_copy_has_the_diff_under_the_columns_escaped(
    ip: InteractiveShell, servers: list[FakeOpenAIServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    from cortex_jupyter.session import compare_views

    shown: list[Any] = []

    class Handle:
        def update(self, *args: Any, **kwargs: Any) -> None:
            pass

    def display(obj: Any, **kwargs: Any) -> Handle:
        shown.append(obj)
        return Handle()

    monkeypatch.setattr(compare_views, "display", display)
    a, b, _ = servers
    a.script(reply("<response>Paris.</response>"))
    b.script(reply('<response><img src=x onerror="alert(1)"> Lyon.</response>'))
    ip.run_line_magic("config", "CortexMagics.display = 'widgets'")
    try:
        ip.run_cell_magic("cortex", "--compare ma,mb", "Capital?")
    finally:
        ip.run_line_magic("config", "CortexMagics.display = 'auto'")
    result = ip.user_ns["_compare"]
    copy = next(o for o in shown if isinstance(o, dict) and "text/html" in o)
    html = copy["text/html"]
    assert html.index("cortex-compare-column") < html.index("cortex-compare-diff")
    diff = html[html.index("cortex-compare-diff") :]
    assert "<img" not in diff and "&lt;img" in diff and "<ins style" in diff
    assert "Answer of mb against ma" in copy["text/plain"]
    # The live box's toggle shows the same diff.
    box = result.view.box
    box.bar._handle_custom_msg({"view": "diff"}, [])
    assert "cortex-compare-diff" in box.diff_pane.value and "<img" not in box.diff_pane.value
