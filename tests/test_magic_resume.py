"""``%cortex resume ID`` through a real shell: a run stopped in the middle goes on as itself.

A turn writes two actions (the second needs the first's output); the run is stopped while
the second runs (Stop, or the model's stream dropping). Resumed, the first action's tool
is not called again, the model is not asked again for the turn it answered, the second
action runs again, and the answer, the bindings and what the model is sent next are what
the same run gives when nothing stops it. The run keeps its id; the store shows it
completed with its whole history. (A killed kernel: ``tests/kernel/test_resume.py``.)
"""

from __future__ import annotations

import _thread
import json
import os
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from cortex_jupyter import default_registry, store
from cortex_jupyter.session import CortexRunError
from tests.conftest import SECRET
from tests.models.fake_openai_server import FakeOpenAIServer, Stream, finish, texts, usage

TURN_1 = (
    "<thought>Two steps.</thought>"
    '<action id="a1">{"name": "rs_first", "parameters": {"x": 3}, "output_key": "rs_one"}'
    "</action>"
    '<action id="a2">{"name": "rs_second", "parameters": {"x": "$rs_one"}, '
    '"output_key": "rs_two"}</action>'
)
TURN_2 = "<response>First $rs_one, then $rs_two.</response>"


class Tools:
    """The two tools, counting their calls; ``stop_in_second`` makes the second one press
    Stop (the kernel's interrupt) the first time it runs, and wait to be cancelled."""

    def __init__(self) -> None:
        self.calls: dict[str, int] = {"first": 0, "second": 0}
        self.stop_in_second = False
        self.release = threading.Event()

    def first(self, x: int) -> int:
        """Double x."""
        self.calls["first"] += 1
        return x * 2

    def second(self, x: int) -> int:
        """Add one to x."""
        self.calls["second"] += 1
        if self.stop_in_second:
            self.stop_in_second = False
            _thread.interrupt_main()
            self.release.wait(5)
        return x + 1


@pytest.fixture
def tools() -> Iterator[Tools]:
    made = Tools()
    default_registry.tool(name="rs_first")(made.first)
    default_registry.tool(name="rs_second")(made.second)
    yield made
    made.release.set()
    for name in ("rs_first", "rs_second"):
        default_registry.remove("tool", name)


def replies() -> list[Stream]:
    return [Stream([*texts(TURN_1, 9), finish()]), Stream([*texts(TURN_2, 9), finish()])]


def uninterrupted(ip: InteractiveShell, server: FakeOpenAIServer) -> dict[str, Any]:
    server.script(*replies())
    ip.run_cell_magic("cortex", "--model fake-model", "Do the two steps.")
    run = ip.user_ns["_cortex"]
    seen = {
        "answer": run.answer,
        "bound": (ip.user_ns["rs_one"], ip.user_ns["rs_two"]),
        "turn 2 sent": server.requests[-1].json["messages"][1:],
        "status": run.status,
    }
    for name in ("rs_one", "rs_two"):
        del ip.user_ns[name]
    ip.run_line_magic("cortex", "reset")
    server.requests.clear()
    return seen


def test_a_run_stopped_in_its_second_action_resumes_as_itself(
    ip: InteractiveShell, server: FakeOpenAIServer, tools: Tools
) -> None:
    expected = uninterrupted(ip, server)
    assert expected["answer"] == "First 6, then 7."
    tools.calls.update(first=0, second=0)

    server.script(*replies())
    tools.stop_in_second = True
    with pytest.raises(KeyboardInterrupt):
        ip.run_cell_magic("cortex", "--model fake-model", "Do the two steps.")
    stopped = ip.user_ns["_cortex"]
    assert stopped.status == "cancelled"
    assert stopped.actions["a2"].status == "cancelled"
    assert tools.calls == {"first": 1, "second": 1}
    assert len(server.requests) == 1
    tools.release.set()

    ip.run_line_magic("cortex", f"resume {stopped.id}")
    run = ip.user_ns["_cortex"]
    assert run.id == stopped.id
    assert tools.calls == {"first": 1, "second": 2}  # a1 restored, a2 run again
    assert len(server.requests) == 2  # only the turn that was never answered
    assert run.status == "completed"
    assert run.answer == expected["answer"]
    assert (ip.user_ns["rs_one"], ip.user_ns["rs_two"]) == expected["bound"]
    # The model is sent the same conversation as when nothing stopped the run.
    assert server.requests[-1].json["messages"][1:] == expected["turn 2 sent"]

    kept = store.open_run(run.id)
    assert kept.status == "completed"
    assert kept.answer == expected["answer"]
    statuses = [
        e.status
        for e in kept.events
        if getattr(e, "id", None) == "a2" and e.kind == "action_status"
    ]
    assert statuses[:3] == ["pending", "running", "cancelled"]  # the history before...
    assert statuses[-3:] == ["pending", "running", "done"]  # ...and after
    assert [row.status for row in store.runs() if row.id == run.id] == ["completed"]


def test_a_run_whose_stream_dropped_goes_on_from_the_cut_in_the_same_run(
    ip: InteractiveShell, server: FakeOpenAIServer, tools: Tools
) -> None:
    cut = "<response>The answer starts"
    server.script(
        Stream([*texts(TURN_1, 9), finish()]),
        Stream(texts(cut, 9), cut=True),
        Stream([*texts(" and ends here.</response>", 9), finish()]),
    )
    with pytest.raises(Exception, match="stream failed"):
        ip.run_cell_magic("cortex", "--model fake-model", "Do the two steps.")
    dropped = ip.user_ns["_cortex"]
    assert dropped.status == "interrupted"
    assert tools.calls == {"first": 1, "second": 1}

    ip.run_line_magic("cortex", f"resume {dropped.id}")
    run = ip.user_ns["_cortex"]
    assert (run.id, run.status) == (dropped.id, "completed")
    assert run.answer == "The answer starts and ends here."
    assert tools.calls == {"first": 1, "second": 1}  # both had ended: restored
    assert len(server.requests) == 3
    told = server.requests[-1].json["messages"][-1]["content"]
    assert "interrupted after" in told and "The answer starts" in told
    assert (ip.user_ns["rs_one"], ip.user_ns["rs_two"]) == (6, 7)


def test_resume_of_a_finished_or_unknown_run_says_so_in_one_line(
    ip: InteractiveShell, server: FakeOpenAIServer, tools: Tools, capsys: pytest.CaptureFixture[str]
) -> None:
    server.script(*replies())
    ip.run_cell_magic("cortex", "--model fake-model", "Do the two steps.")
    done = ip.user_ns["_cortex"]
    capsys.readouterr()
    ip.run_line_magic("cortex", f"resume {done.id}")
    err = capsys.readouterr().err
    assert err.strip() == (
        f"cortex: %cortex resume {done.id}: "
        f"run {done.id} already completed: there is nothing to resume "
        f"(%cortex open {done.id} shows it)."
    )
    ip.run_line_magic("cortex", "resume zz-no-such-run")
    err = capsys.readouterr().err.strip()
    assert err.startswith(
        "cortex: %cortex resume zz-no-such-run: no stored run has the id 'zz-no-such-run'"
    )
    assert "\n" not in err
    assert len(server.requests) == 2 and tools.calls == {"first": 1, "second": 1}


def test_an_output_stored_redacted_is_made_again_not_restored(
    ip: InteractiveShell, server: FakeOpenAIServer, tools: Tools
) -> None:
    made: list[str] = []

    def token() -> str:
        """The service's token."""
        made.append("token")
        return f"token={os.environ['OPENAI_API_KEY']}"

    default_registry.tool(name="rs_token")(token)
    turn_1 = (
        '<action id="t">{"name": "rs_token", "output_key": "rs_tok"}</action>'
        '<action id="a2">{"name": "rs_second", "parameters": {"x": 1}, "depends_on": ["t"]}'
        "</action>"
    )
    server.script(
        Stream([*texts(turn_1, 9), finish()]),
        Stream([*texts("<response>ok</response>", 9), finish()]),
    )
    tools.stop_in_second = True
    try:
        with pytest.raises(KeyboardInterrupt):
            ip.run_cell_magic("cortex", "--model fake-model", "Get the token.")
        stopped = ip.user_ns["_cortex"]
        tools.release.set()
        kept = store.open_run(stopped.id).actions["t"].output
        assert SECRET not in kept  # the store held it redacted...

        ip.run_line_magic("cortex", f"resume {stopped.id}")
        assert made == ["token", "token"]  # ...so it was made again, not restored
        assert ip.user_ns["rs_tok"] == f"token={SECRET}"
        assert ip.user_ns["_cortex"].status == "completed"
    finally:
        default_registry.remove("tool", "rs_token")


def test_a_script_cell_resumes_from_its_next_turn(
    ip: InteractiveShell, tools: Tools, capsys: pytest.CaptureFixture[str]
) -> None:
    body = f"{TURN_1}\n--- next turn ---\n{TURN_2}"
    tools.stop_in_second = True
    with pytest.raises(KeyboardInterrupt):
        ip.run_cell_magic("cortex", "--script --delay 0", body)
    stopped = ip.user_ns["_cortex"]
    tools.release.set()
    capsys.readouterr()

    ip.run_line_magic("cortex", f"resume {stopped.id}")
    run = ip.user_ns["_cortex"]
    assert (run.id, run.status, run.answer) == (stopped.id, "completed", "First 6, then 7.")
    assert tools.calls == {"first": 1, "second": 2}
    assert run.thought == "Two steps."  # turn 1's text is not streamed a second time
    assert sum(e.kind == "turn" for e in run.events) == 2


TYPED_TURN_2 = "<response>7</response>"


def _stop_in_second(ip: InteractiveShell, server: FakeOpenAIServer, tools: Tools, line: str) -> Any:
    tools.stop_in_second = True
    with pytest.raises(KeyboardInterrupt):
        ip.run_cell_magic("cortex", line, "Do the two steps.")
    stopped = ip.user_ns["_cortex"]
    assert stopped.status == "cancelled" and len(server.requests) == 1
    tools.release.set()
    return stopped


def test_a_typed_run_resumes_typed_its_output_checked_and_bound(
    ip: InteractiveShell, server: FakeOpenAIServer, tools: Tools
) -> None:
    first = Stream([*texts(TURN_1, 9), finish()])
    server.script(first, Stream([*texts(TYPED_TURN_2, 9), finish()]))
    stopped = _stop_in_second(
        ip, server, tools, "--model fake-model --output int --output-key rs_typed"
    )
    ip.run_line_magic("cortex", f"resume {stopped.id}")
    run = ip.user_ns["_cortex"]
    assert (run.id, run.status) == (stopped.id, "completed")
    assert run.output == 7 and type(run.output) is int  # checked against int, not text
    assert ip.user_ns["rs_typed"] == 7


def test_a_budgeted_run_resumes_under_its_budget_counting_what_it_spent_before(
    ip: InteractiveShell, server: FakeOpenAIServer, tools: Tools
) -> None:
    # The first reply reports 1,500 tokens: with the second request (~1,200) they pass
    # 2,000 tokens; the second request alone would not.
    spent = Stream([*texts(TURN_1, 9), finish(), usage(1480, 20)])
    server.script(spent, Stream([*texts(TURN_2, 9), finish()]))
    stopped = _stop_in_second(ip, server, tools, "--model fake-model --budget 2000tok")
    with pytest.raises(CortexRunError, match="budget of 2,000 tokens stopped the run") as caught:
        ip.run_line_magic("cortex", f"resume {stopped.id}")
    assert "1,500 tokens spent" in str(caught.value)
    run = ip.user_ns["_cortex"]
    assert run.id == stopped.id and run.status == "budget"
    assert len(server.requests) == 1  # the request that would pass it is not sent
    assert run.usage["prompt_tokens"] + run.usage["completion_tokens"] == 1500


def test_a_reply_without_usage_resumes_counting_what_its_reservation_held(
    ip: InteractiveShell, server: FakeOpenAIServer, tools: Tools
) -> None:
    # A server that never reports usage (older llama.cpp, many proxies): under a token
    # budget the reply counts what its request reserved (its prompt and max_tokens), an
    # upper bound. Resumed, the run counts the same, not "tokens not known" (a refusal).
    server.script(Stream([*texts(TURN_1, 9), finish()]), Stream([*texts(TURN_2, 9), finish()]))
    line = "--model fake-model --max-tokens 500 --budget 3400tok"
    stopped = _stop_in_second(ip, server, tools, line)
    assert server.requests[0].json["max_tokens"] == 500  # held: ~1.2k of prompt and 500
    ip.run_line_magic("cortex", f"resume {stopped.id}")
    run = ip.user_ns["_cortex"]
    assert (run.id, run.status, run.answer) == (stopped.id, "completed", "First 6, then 7.")
    # the second request (~1.3k of prompt) is capped by what the budget leaves after the
    # first one's hold: the budget holds across the resume
    assert 16 <= server.requests[1].json["max_tokens"] < 500


def test_a_stop_while_a_resume_readies_its_view_leaves_the_run_resumable(
    ip: InteractiveShell,
    server: FakeOpenAIServer,
    tools: Tools,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Stop pressed while the resume rebuilds the view's history of a long run (after
    # the run was taken): the run must not stay "running in this kernel" for ever.
    from cortex_jupyter.session import notebook

    server.script(*replies())
    stopped = _stop_in_second(ip, server, tools, "--model fake-model")

    def stop(events: Any) -> Any:
        raise KeyboardInterrupt

    real = notebook.history
    monkeypatch.setattr(notebook, "history", stop)
    with pytest.raises(KeyboardInterrupt):
        ip.run_line_magic("cortex", f"resume {stopped.id}")
    monkeypatch.setattr(notebook, "history", real)
    capsys.readouterr()

    server.script(Stream([*texts(TURN_2, 9), finish()]))
    ip.run_line_magic("cortex", f"resume {stopped.id}")
    assert "still running" not in capsys.readouterr().err
    run = ip.user_ns["_cortex"]
    assert (run.id, run.status, run.answer) == (stopped.id, "completed", "First 6, then 7.")
    assert [row.status for row in store.runs() if row.id == run.id] == ["completed"]


def test_a_run_its_budget_stopped_resumes_under_a_larger_one_given_to_resume(
    ip: InteractiveShell, server: FakeOpenAIServer, tools: Tools
) -> None:
    # A new kernel has no "last run" for %cortex continue --budget: without a budget on
    # resume, a run its budget stopped could only stop again at once, for ever.
    spent = Stream([*texts(TURN_1, 9), finish(), usage(1480, 20)])
    server.script(spent, Stream([*texts(TURN_2, 9), finish(), usage(1200, 10)]))
    stopped = _stop_in_second(ip, server, tools, "--model fake-model --budget 2000tok")
    with pytest.raises(CortexRunError, match="budget of 2,000 tokens stopped the run"):
        ip.run_line_magic("cortex", f"resume {stopped.id}")
    ip.run_line_magic("cortex", f"resume {stopped.id} --budget 5000tok")
    run = ip.user_ns["_cortex"]
    assert (run.id, run.status, run.answer) == (stopped.id, "completed", "First 6, then 7.")
    assert tools.calls == {"first": 1, "second": 2}  # a2 ran again once, then restored
    assert len(server.requests) == 2
    assert store.open_run(run.id).options["budget"] == "5000tok"


@pytest.mark.parametrize(
    "line", ["ID --budget", "ID --budget lots", "ID --budget 1 --budget 2", "--budget 1"]
)
def test_resume_takes_one_budget_said_in_one_line(ip: InteractiveShell, line: str) -> None:
    with pytest.raises(UsageError, match="--budget"):
        ip.run_line_magic("cortex", f"resume {line}")


# ---- a credential the store kept redacted is given again, never sent as "[redacted]" ----

TOKEN = "tok-live-0123456789abcdef"
REQUEST = f"""--model fake-model --request '{{"api_token": "{TOKEN}", "seed": 3}}'"""


@pytest.mark.parametrize(
    ("request_", "field", "kept", "secret", "says"),
    [
        (
            {"api_token": TOKEN, "seed": 3},
            "'api_token'",
            {"api_token": "[redacted]"},
            TOKEN,
            ["API_TOKEN"],  # the environment variable that gives it again
        ),
        # The store keeps a key that is a secret as ``[redacted]``; only values were looked
        # at, so resume sent ``{"metadata": {"[redacted]": "mine"}}``.
        (
            {"metadata": {SECRET: "mine"}, "seed": 3},
            "'metadata'",
            {"metadata": {"[redacted]": "mine"}},
            SECRET,
            ["METADATA"],
        ),
        ({SECRET: "on", "seed": 3}, "", {"[redacted]": "on"}, SECRET, []),
    ],
    ids=["a secret value", "a key inside that is a secret", "a field named by a secret"],
)
def test_a_redacted_request_field_is_refused_on_resume_then_sent_as_given_again(
    ip: InteractiveShell,
    server: FakeOpenAIServer,
    tools: Tools,
    capsys: pytest.CaptureFixture[str],
    request_: dict[str, Any],
    field: str,
    kept: dict[str, Any],
    secret: str,
    says: list[str],
) -> None:
    (name, value), *_ = request_.items()
    line = f"--model fake-model --request '{json.dumps(request_)}'"
    server.script(Stream([*texts(TURN_1, 9), finish()]))
    stopped = _stop_in_second(ip, server, tools, line)
    assert server.requests[0].json[name] == value
    assert store.open_run(stopped.id).options["request"] == {**kept, "seed": 3}
    capsys.readouterr()

    ip.run_line_magic("cortex", f"resume {stopped.id}")  # nothing gives it again here
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"cortex: %cortex resume {stopped.id}: the request field {field}")
    assert "CortexMagics.request" in err and secret not in err and "\n" not in err
    assert all(part in err for part in says), err
    assert len(server.requests) == 1  # nothing was sent

    ip.run_line_magic("config", f"CortexMagics.request = {{{name!r}: {value!r}}}")
    server.script(Stream([*texts(TURN_2, 9), finish()]))
    ip.run_line_magic("cortex", f"resume {stopped.id}")
    run = ip.user_ns["_cortex"]
    assert (run.id, run.status) == (stopped.id, "completed")
    sent = server.requests[-1].json
    assert (sent[name], sent["seed"]) == (value, 3)
    assert "[redacted]" not in json.dumps(sent)


AUTH = f"""--model fake-model --request '{{"auth": {{"api_token": "{TOKEN}"}}, "seed": 3}}'"""


@pytest.mark.parametrize(
    ("line", "variable", "given", "sent"),
    [
        (REQUEST, "API_TOKEN", TOKEN, ("api_token", TOKEN)),
        (AUTH, "AUTH", json.dumps({"api_token": TOKEN}), ("auth", {"api_token": TOKEN})),
    ],
    ids=["text field", "object field"],
)
def test_a_redacted_request_field_is_taken_from_the_environment_on_resume(
    ip: InteractiveShell,
    server: FakeOpenAIServer,
    tools: Tools,
    monkeypatch: pytest.MonkeyPatch,
    line: str,
    variable: str,
    given: str,
    sent: tuple[str, Any],
) -> None:
    """The store kept the field redacted; the environment variable named after it gives it
    again. A field holding an object came back from ``AUTH`` as the variable's text (the
    server was sent ``"auth": "{\\"api_token\\": ...}"``, a string): it is read as JSON."""
    field, value = sent
    server.script(Stream([*texts(TURN_1, 9), finish()]))
    stopped = _stop_in_second(ip, server, tools, line)
    kept = json.loads(json.dumps(value).replace(TOKEN, "[redacted]"))
    assert store.open_run(stopped.id).options["request"][field] == kept
    monkeypatch.setenv(variable, given)
    server.script(Stream([*texts(TURN_2, 9), finish()]))
    ip.run_line_magic("cortex", f"resume {stopped.id}")
    assert ip.user_ns["_cortex"].status == "completed"
    assert server.requests[-1].json[field] == value


def test_an_object_field_the_environment_gives_as_plain_text_is_refused_in_one_line(
    ip: InteractiveShell,
    server: FakeOpenAIServer,
    tools: Tools,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    server.script(Stream([*texts(TURN_1, 9), finish()]))
    stopped = _stop_in_second(ip, server, tools, AUTH)
    monkeypatch.setenv("AUTH", TOKEN)
    capsys.readouterr()
    ip.run_line_magic("cortex", f"resume {stopped.id}")
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"cortex: %cortex resume {stopped.id}: the request field 'auth'")
    assert "AUTH" in err and "JSON" in err and "\n" not in err and TOKEN not in err
    assert len(server.requests) == 1
