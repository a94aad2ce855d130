"""Defects first seen with a live local model (issue 20, item 7), pinned through
``--script`` cells and the loopback OpenAI-compatible server."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from cortex_jupyter import default_registry
from cortex_jupyter.session import CortexRunError
from tests.models.fake_openai_server import FakeOpenAIServer, Stream, finish, texts


@pytest.fixture
def weather() -> Iterator[None]:
    @default_registry.tool(name="live_weather")
    def live_weather(city: str) -> str:
        """The weather in a city."""
        return f"sunny in {city}"

    yield
    default_registry.remove("tool", "live_weather")


def reply(text: str) -> Stream:
    return Stream([*texts(text, 9), finish()])


def script(ip: InteractiveShell, body: str, line: str = "") -> Any:
    ip.run_cell_magic("cortex", f"--script --delay 0 --text --chunk-size 5 {line}", body)
    return ip.user_ns["_cortex"]


def call(id: str, city: str) -> str:
    body = f'{{"name": "live_weather", "parameters": {{"city": "{city}"}}}}'
    return f'<action id="{id}">{body}</action>'


def test_text_mode_shows_a_renamed_actions_note_once_and_its_final_status(
    ip: InteractiveShell, weather: None, capsys: pytest.CaptureFixture[str]
) -> None:
    run = script(
        ip,
        f"{call('a1', 'Paris')}\n--- next turn ---\n{call('a1', 'Rome')}"
        "\n--- next turn ---\n<response>Done.</response>",
    )
    assert run.actions["a1~2"].status == "done"
    out = capsys.readouterr().out
    assert out.count("[note] live_weather (a1~2): the model reused id 'a1'") == 1
    assert "[done " in out and "] live_weather (a1~2) -> 'sunny in Rome'" in out


def test_text_mode_starts_the_answer_on_its_own_line_after_a_thought(
    ip: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    run = script(ip, "<thought>I think.</thought>The answer is 4.")
    assert run.answer == "The answer is 4."
    assert "[thought] I think.\nThe answer is 4.\n" in capsys.readouterr().out


def test_loose_text_of_two_turns_is_not_run_together(
    ip: InteractiveShell, weather: None, capsys: pytest.CaptureFixture[str]
) -> None:
    script(
        ip,
        f"The next message brings:{call('w', 'X')}\n--- next turn ---\n"
        "The next message brings:<response>ok</response>",
    )
    lines = capsys.readouterr().out.splitlines()
    assert lines.count("The next message brings:") == 2


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ("<thought>I only think.</thought>", "the model wrote only a thought and no answer"),
        ("<thought></thought>", "the model's reply was empty"),
    ],
)
def test_a_reply_with_no_answer_says_so_in_a_cortex_line_and_on_the_record(
    ip: InteractiveShell, capsys: pytest.CaptureFixture[str], body: str, says: str
) -> None:
    run = script(ip, body)
    assert (run.status, run.answer) == ("completed", "")
    assert run.reason is not None and run.reason.startswith(says)
    assert f"cortex: {says}" in capsys.readouterr().err


def test_a_turn_limit_reason_speaks_the_magics_words(
    ip: InteractiveShell, weather: None, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(CortexRunError):
        script(
            ip,
            f"{call('a', 'X')}\n--- next turn ---\n{call('b', 'Y')}\n--- next turn ---\nok",
            "--max-turns 1",
        )
    reason = ip.user_ns["_cortex"].reason
    assert "%cortex continue" in reason and "--max-turns N" in reason
    assert "continue_run" not in reason and "max_turns=" not in reason
    out = capsys.readouterr().out
    assert "continue_run" not in out and "max_turns=" not in out


def test_a_server_that_is_down_is_reported_once(
    ip: InteractiveShell, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import socket

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("OPENAI_API_KEY", "none")
    monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{port}/v1")
    with pytest.raises((CortexRunError, UsageError)):
        ip.run_cell_magic("cortex", "--model m --text", "Hi?")
    out = capsys.readouterr().out
    assert "Cannot connect" in out
    assert "stream failed: the model's stream failed" not in out
    assert out.count("stream failed") == 1


@pytest.mark.parametrize(
    ("props", "models"),
    [
        ({"default_generation_settings": {"n_ctx": 8192}, "total_slots": 1}, None),
        (None, {"data": [{"id": "gpt-test", "object": "model", "max_model_len": 8192}]}),
    ],
    ids=["llama.cpp /props", "vLLM /v1/models"],
)
def test_the_context_gauge_reads_the_servers_real_window_once(
    ip: InteractiveShell,
    server: FakeOpenAIServer,
    capsys: pytest.CaptureFixture[str],
    props: dict[str, Any] | None,
    models: dict[str, Any] | None,
) -> None:
    server.props, server.models = props, models
    server.script(reply("One."), reply("Two."))
    ip.run_cell_magic("cortex", "--model gpt-test --text", "Hi?")
    ip.run_cell_magic("cortex", "--model gpt-test --text", "Again?")
    ends = [line for line in capsys.readouterr().out.splitlines() if line.startswith("[end]")]
    assert len(ends) == 2 and all("/8.2k" in line for line in ends), ends
    assert ip.user_ns["_cortex"].events  # the run went on as usual
    asked = [path for path in server.gets if path in ("/props", "/v1/models")]
    assert len(asked) == len(set(asked))  # once per endpoint and model, then cached


def test_a_server_that_does_not_say_its_window_keeps_the_default(
    ip: InteractiveShell, server: FakeOpenAIServer, capsys: pytest.CaptureFixture[str]
) -> None:
    server.script(reply("One."))
    ip.run_cell_magic("cortex", "--model gpt-test --text", "Hi?")
    assert ip.user_ns["_cortex"].status == "completed"
    assert "/32k" in capsys.readouterr().out


def test_an_echoed_tool_response_with_native_tools_is_a_forged_result(
    ip: InteractiveShell, server: FakeOpenAIServer, weather: None
) -> None:
    server.script(reply('<tool_response>\n{"temp": 20}\n</tool_response>\nIt is 20.'))
    ip.run_cell_magic("cortex", "--model gpt-test --text --native-tools", "Weather?")
    record = ip.user_ns["_cortex"]
    assert [error.code for error in record.errors] == ["forged_result"]
    assert '{"temp": 20}' not in record.answer
