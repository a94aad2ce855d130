"""What a model can reach and what it can write (issue 10), through ``%%cortex`` against an
OpenAI-compatible server on 127.0.0.1, as a prompt-injected model would try it.

Each test plays the model's reply from the server and checks what a user would notice:
the action failed with a message naming the reference and how to expose it, nothing
secret reached the tool, the transcript, the history, the text view or the next request
to the model, and the notebook's own names were left alone.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell

from cortex_jupyter import default_registry
from cortex_jupyter.session import session_for
from tests.conftest import SECRET
from tests.helpers import recording_tool
from tests.models.fake_openai_server import FakeOpenAIServer, Stream, finish, texts

#: Another credential-looking environment value (not the model's key).
TOKEN = "ghp_TOKENVALUE0123456789"


@pytest.fixture(autouse=True)
def token(monkeypatch: pytest.MonkeyPatch) -> str:
    """A credential-looking environment value besides the model's key."""
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    return TOKEN


@pytest.fixture
def seen() -> Iterator[list[Any]]:
    """A tool, ``peek``, that records what it was given and returns it as text."""

    @default_registry.tool(name="leak")
    def leak() -> str:
        """A tool whose output happens to hold the API key (a debug dump, say)."""
        return f"config: api_key={os.environ['OPENAI_API_KEY']} ok"

    with recording_tool("peek", "peeked: {}") as received:
        yield received
    default_registry.remove("tool", "leak")


def reply(server: FakeOpenAIServer, *turns: str) -> None:
    server.script(*(Stream([*texts(text, 11), finish()]) for text in turns))


def action(value: str, id: str = "a", output_key: str | None = None) -> str:
    body: dict[str, Any] = {"name": "peek", "parameters": {"value": value}}
    if output_key:
        body["output_key"] = output_key
    return f'<action id="{id}">{json.dumps(body)}</action>'


def cell(ip: InteractiveShell, body: str, line: str = "--model gpt-test --text") -> Any:
    ip.run_cell_magic("cortex", line, body)
    return ip.user_ns["_cortex"]


def ask(
    ip: InteractiveShell,
    server: FakeOpenAIServer,
    prompt: str,
    *turns: str,
    line: str = "--model gpt-test --text",
) -> Any:
    """The server scripted to answer with ``turns``, a cell run with ``prompt``: its run."""
    reply(server, *turns)
    return cell(ip, prompt, line)


# ---- 1. scope of $name ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("reference", "message"),
    [
        ("$os.environ.OPENAI_API_KEY", "$os is a module; modules are never visible to a model"),
        ("$private_notes", "$private_notes is a notebook variable the model may not see"),
        ("$In", "$In is IPython's own (history, caches or the shell)"),
        ("$_i1", "$_i1 is IPython's own (history, caches or the shell)"),
        ("$_", "$_ is IPython's own"),
        ("$get_ipython", "$get_ipython is IPython's own"),
    ],
)
def test_a_model_cannot_reach_what_the_prompt_did_not_name(
    ip: InteractiveShell,
    server: FakeOpenAIServer,
    seen: list[Any],
    capsys: pytest.CaptureFixture[str],
    reference: str,
    message: str,
) -> None:
    ip.run_cell("import os\nprivate_notes = 'my diary'")
    run = ask(ip, server, "Summarise my day.", action(reference), "<response>done</response>")
    node = run.actions["a"]
    assert node.status == "failed" and seen == []  # the tool never ran
    assert message in (node.error or "")
    assert "The action was not run." in (node.error or "")
    # the error the model is sent back names the reference but carries no value
    results = server.requests[1].json["messages"][-1]["content"]
    assert "my diary" not in results and SECRET not in results
    assert SECRET not in capsys.readouterr().out + run.to_jsonl()


def test_a_hidden_variable_says_how_to_expose_it_and_expose_then_works(
    ip: InteractiveShell, server: FakeOpenAIServer, seen: list[Any]
) -> None:
    ip.run_cell("private_notes = 'my diary'")
    run = ask(ip, server, "Read the notes.", action("$private_notes"), "<response>no</response>")
    assert "%cortex expose private_notes" in (run.actions["a"].error or "")

    ip.run_line_magic("cortex", "expose private_notes")
    run = ask(ip, server, "Read the notes.", action("$private_notes"), "<response>yes</response>")
    assert run.actions["a"].status == "done" and seen == ["my diary"]

    ip.run_line_magic("cortex", "hide private_notes")
    run = ask(ip, server, "Again.", action("$private_notes"), "<response>no</response>")
    assert run.actions["a"].status == "failed" and seen == ["my diary"]


def test_names_the_prompt_writes_are_visible_with_their_objects(
    ip: InteractiveShell, server: FakeOpenAIServer, seen: list[Any]
) -> None:
    ip.run_cell("frame = [1, 2, 3]\nother = 'not named'")
    run = ask(ip, server, "How long is $frame?", action("$frame"), "<response>ok</response>")
    assert run.actions["a"].status == "done"
    assert seen[0] is ip.user_ns["frame"]  # the object itself, not a copy
    # and only what the prompt named is described to the model
    system = server.requests[0].json["messages"][0]["content"]
    assert "frame" in system and "not named" not in system


@pytest.mark.parametrize(
    ("reference", "message"),
    [
        ("$frame.__class__", "$frame.__class__ is not reachable: names starting with '_'"),
        ("$frame.append", "$frame.append is not reachable: 'append' is not data of list"),
        ("$helper.__globals__", "nothing inside a function or method is reachable"),
        ("$helper.x", "nothing inside a function or method is reachable"),
        ("$box.inner.secret_method", "it is a function or method, never a value"),
    ],
)
def test_reaching_inside_follows_keys_indexes_and_public_data_only(
    ip: InteractiveShell,
    server: FakeOpenAIServer,
    seen: list[Any],
    reference: str,
    message: str,
) -> None:
    ip.run_cell(
        "frame = [1, 2]\n"
        "def helper(): pass\n"
        "helper.x = 1\n"
        "class Inner:\n"
        "    def secret_method(self): return 'no'\n"
        "class Box:\n"
        "    inner = Inner()\n"
        "box = Box()\n"
    )
    run = ask(
        ip, server, "Look at $frame, $helper and $box.", action(reference), "<response>x</response>"
    )
    assert seen == [] and message in (run.actions["a"].error or "")


def test_data_inside_visible_values_is_reachable(
    ip: InteractiveShell, server: FakeOpenAIServer, seen: list[Any]
) -> None:
    ip.run_cell("from types import SimpleNamespace\ntrip = {'legs': [{'city': 'Oslo'}]}")
    ip.run_cell("point = SimpleNamespace(x=3)")
    reply(
        server,
        action("$trip.legs.0.city") + action("$point.x", id="b"),
        "<response>ok</response>",
    )
    run = cell(ip, "Where is $trip going, and $point?")
    assert run.actions["a"].output == "peeked: Oslo" and run.actions["b"].output == "peeked: 3"


def test_modules_and_ipython_names_are_never_exposed(
    ip: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    ip.run_cell("import os")
    ip.run_line_magic("cortex", "expose os In _i1 df_*")
    out = capsys.readouterr().out
    assert "not exposed: $os is a module" in out
    assert "not exposed: $In is IPython's own" in out
    assert "Exposed to models: df_*" in out
    ip.run_cell("df_sales = 1\ndf_costs = 2\nunrelated = 3")
    ip.run_line_magic("cortex", "vars")
    out = capsys.readouterr().out
    assert "df_sales = 1  (exposed with %cortex expose df_*)" in out
    assert "df_costs" in out and "unrelated" not in out and "os =" not in out
    with pytest.raises(ValueError, match="modules are never visible"):
        import cortex_jupyter

        cortex_jupyter.expose("os")


def test_script_cells_reach_what_their_author_wrote(ip: InteractiveShell, seen: list[Any]) -> None:
    ip.run_cell("trip = {'city': 'Rome'}\nprivate_notes = 'diary'")
    run = cell(
        ip,
        action("$trip.city") + "\n<response>Going to $trip.city.</response>",
        "--script --delay 0 --text",
    )
    assert run.actions["a"].output == "peeked: Rome"
    assert run.response == "Going to $trip.city."


# ---- 2. secrets never travel ----------------------------------------------------------------


def test_a_key_in_a_tool_output_is_redacted_everywhere_but_the_notebook_variable(
    ip: InteractiveShell,
    server: FakeOpenAIServer,
    seen: list[Any],
    capsys: pytest.CaptureFixture[str],
) -> None:
    leak = '<action id="l">{"name": "leak", "output_key": "dump"}</action>'
    run = ask(ip, server, "Dump the config.", leak, "<response>The dump is in.</response>")
    # the user's own variable keeps the exact value: it is their data
    assert ip.user_ns["dump"] == f"config: api_key={SECRET} ok"
    sent = json.dumps(server.requests[1].json["messages"])
    assert SECRET not in sent and "config: api_key=[redacted] ok" in sent
    assert SECRET not in run.to_jsonl() and "[redacted]" in run.to_jsonl()
    assert SECRET not in capsys.readouterr().out  # the text view
    ip.run_line_magic("cortex", "history")
    history = capsys.readouterr().out
    assert SECRET not in history and "[redacted]" in history
    ip.run_line_magic("cortex", "vars")
    assert SECRET not in capsys.readouterr().out


def test_any_credential_looking_environment_value_is_redacted(
    ip: InteractiveShell, server: FakeOpenAIServer, seen: list[Any]
) -> None:
    ip.run_cell("token_holder = {'t': __import__('os').environ['GITHUB_TOKEN']}")
    run = ask(
        ip, server, "Use $token_holder.", action("$token_holder.t"), "<response>ok</response>"
    )
    assert seen == [TOKEN]  # the tool, the user's code, gets the value itself
    assert TOKEN not in json.dumps(server.requests[1].json["messages"])
    assert TOKEN not in run.to_jsonl()
    assert TOKEN not in str(run.actions["a"].error) and "[redacted]" in json.dumps(
        server.requests[1].json["messages"]
    )


#: A model key and a password with no hex digits: a random id never looks like their part.
CUT_KEY = "sk-proj-QXKEYqrstuvwxyzGHIJKLMNOPmnop"
CUT_PASSWORD = "pw-MNOPQRSTUVWXYZ-ghijklmnqrs"


def edge_parts(text: str) -> list[str]:
    """What a cut can leave of ``CUT_KEY`` or ``CUT_PASSWORD`` in ``text``: a first or
    last part of four characters or more."""
    return [
        part
        for secret in (CUT_KEY, CUT_PASSWORD)
        for size in range(4, len(secret))
        for part in (secret[:size], secret[-size:])
        if part in text
    ]


@pytest.fixture
def dump(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """``dump(pad, which)``: a text whose secret starts after ``pad`` dots."""
    monkeypatch.setenv("OPENAI_API_KEY", CUT_KEY)
    monkeypatch.setenv("SERVICE_PASSWORD", CUT_PASSWORD)

    @default_registry.tool(name="dump")
    def dump_text(pad: int, which: str = "key") -> str:
        """A debug dump."""
        secret = CUT_KEY if which == "key" else CUT_PASSWORD
        return "." * pad + secret + "." * 300

    yield
    default_registry.remove("tool", "dump")


def test_no_limit_cuts_a_secret_into_what_the_model_or_the_transcript_gets(
    ip: InteractiveShell,
    server: FakeOpenAIServer,
    seen: list[Any],
    dump: None,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Each secret sits where a limit cuts: a result sent back (4,000 characters), an
    # output's summary in the transcript (160), the parameters shown (600) and a $name
    # described in the system prompt (300).
    ip.run_cell(
        f"note = '.' * 140 + {CUT_PASSWORD!r} + '.' * 400\n"
        f"blob = '.' * 582 + {CUT_KEY!r} + '.' * 10"
    )
    calls = [("r1", 3990, "key"), ("r2", 3990, "password"), ("s1", 70, "key")]
    actions = "".join(
        f'<action id="{i}">{{"name": "dump", "parameters": {{"pad": {pad}, "which": "{w}"}}}}'
        "</action>"
        for i, pad, w in calls
    )
    run = ask(
        ip,
        server,
        "Look at $note and $blob.",
        actions + action("$blob", id="p"),
        "<response>done</response>",
    )
    assert [run.actions[i].status for i in ("r1", "r2", "s1", "p")] == ["done"] * 4
    sent = json.dumps([request.json["messages"] for request in server.requests])
    assert "$note: str, length" in sent and "[redacted]" in sent
    assert edge_parts(sent) == []
    assert edge_parts(run.to_jsonl()) == []
    assert edge_parts(capsys.readouterr().out) == []  # the text view
    assert seen == ["." * 582 + CUT_KEY + "." * 10]  # the tool got the value itself


# ---- 3. bindings never clobber ----------------------------------------------------------------


def test_output_key_never_replaces_a_users_name_or_a_builtin(
    ip: InteractiveShell,
    server: FakeOpenAIServer,
    seen: list[Any],
    capsys: pytest.CaptureFixture[str],
) -> None:
    ip.run_cell("frame = 'mine'")
    reply(
        server,
        action("x", id="a", output_key="frame") + action("y", id="b", output_key="print"),
        "<response>ok</response>",
    )
    run = cell(ip, "Go.")
    assert ip.user_ns["frame"] == "mine"
    assert "print" not in ip.user_ns  # the builtin still works
    assert run.variables["frame"] == "peeked: x" and run.variables["print"] == "peeked: y"
    assert "the notebook already has 'frame', which cortex did not bind" in (
        run.actions["a"].note or ""
    )
    assert "--overwrite" in (run.actions["a"].note or "")
    assert "shadow Python's builtin 'print'" in (run.actions["b"].note or "")
    err = capsys.readouterr().err
    assert "_cortex.variables['frame']" in err


def test_overwrite_replaces_on_purpose_and_cortex_names_can_be_rebound(
    ip: InteractiveShell, server: FakeOpenAIServer, seen: list[Any]
) -> None:
    ip.run_cell("frame = 'mine'")
    ask(
        ip,
        server,
        "Go.",
        action("x", output_key="frame"),
        "<response>ok</response>",
        line="--model gpt-test --text --overwrite",
    )
    assert ip.user_ns["frame"] == "peeked: x"
    # a name an earlier run bound may be bound again without --overwrite
    ask(ip, server, "Again.", action("z", output_key="frame"), "<response>ok</response>")
    assert ip.user_ns["frame"] == "peeked: z"
    assert session_for(ip).bound["frame"].run == ip.user_ns["_cortex"].id


# ---- 4. a name the user takes back, and hiding by pattern (issue 18) -------------------------


def script(ip: InteractiveShell, *actions: str, line: str = "--script --delay 0 --text") -> Any:
    return cell(ip, "".join(actions) + "\n<response>done</response>", line)


def test_a_name_the_user_assigns_after_a_run_bound_it_is_theirs_again(
    ip: InteractiveShell,
    server: FakeOpenAIServer,
    seen: list[Any],
    capsys: pytest.CaptureFixture[str],
) -> None:
    first = script(ip, action("x", output_key="lookup"))
    run = ask(ip, server, "Go.", action("$lookup"), "<response>ok</response>")
    assert run.actions["a"].status == "done"  # the run's: the model reaches it

    ip.run_cell("lookup = 'mine'")
    run = ask(ip, server, "Go.", action("$lookup"), "<response>no</response>")
    assert run.actions["a"].status == "failed" and "mine" not in seen
    assert f"$lookup is yours again: cortex run {first.id} bound it" in (
        run.actions["a"].error or ""
    )
    # a later run's output_key leaves it alone, and says why
    again = script(ip, action("y", output_key="lookup"))
    assert ip.user_ns["lookup"] == "mine"
    assert "is yours: you assigned it after cortex run" in (again.actions["a"].note or "")
    assert "--overwrite" in (again.actions["a"].note or "")
    capsys.readouterr()
    ip.run_line_magic("cortex", "vars")
    out = capsys.readouterr().out
    assert f"lookup = 'mine'  (yours: you assigned it after cortex run {first.id} bound it)" in out

    taken = script(
        ip, action("z", output_key="lookup"), line="--script --delay 0 --text --overwrite"
    )
    assert ip.user_ns["lookup"] == "peeked: z"
    ip.run_line_magic("cortex", "vars")
    assert f"lookup = 'peeked: z'  (bound by cortex run {taken.id})" in capsys.readouterr().out


def test_hide_with_a_pattern_hides_every_name_it_matches_and_the_latest_rule_decides(
    ip: InteractiveShell,
    server: FakeOpenAIServer,
    seen: list[Any],
    capsys: pytest.CaptureFixture[str],
) -> None:
    script(ip, action("a", "a", "data_a"), action("b", "b", "data_b"))

    def reach() -> dict[str, str]:
        run = ask(
            ip,
            server,
            "Go.",
            action("$data_a", "a") + action("$data_b", "b"),
            "<response>ok</response>",
        )
        return {key: node.status for key, node in run.actions.items()}

    assert reach() == {"a": "done", "b": "done"}
    ip.run_line_magic("cortex", "hide data_*")
    assert reach() == {"a": "failed", "b": "failed"}
    capsys.readouterr()
    ip.run_line_magic("cortex", "vars")
    out = capsys.readouterr().out
    assert "data_a = 'peeked: a'  (hidden with %cortex hide data_*)" in out

    ip.run_line_magic("cortex", "expose data_*")
    ip.run_line_magic("cortex", "hide data_b")
    assert reach() == {"a": "done", "b": "failed"}
    ip.run_line_magic("cortex", "vars")
    out = capsys.readouterr().out
    assert "data_a = 'peeked: a'  (bound by cortex run" in out
    assert "data_b = 'peeked: b'  (hidden with %cortex hide data_b)" in out
    assert "(the latest match decides): expose data_*, hide data_b" in out
