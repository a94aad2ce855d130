"""Extra request fields (``runtime.loop.request``) reach every request a run sends.

Through the loopback OpenAI-compatible server, which records each request's JSON body:
the turns of the loop, an ``llm`` action's request and a nested agent's requests all
carry the fields, merged in the stated order.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from cortex_jupyter import Agent, default_registry
from cortex_jupyter.magic import CortexMagics
from cortex_jupyter.models import OpenAIModel
from cortex_jupyter.session import CortexRunError
from tests.models.fake_openai_server import Error, FakeOpenAIServer, Stream, finish, texts


def reply(text: str) -> Stream:
    return Stream([*texts(text, 9), finish()])


@pytest.fixture
def magics(ip: InteractiveShell) -> Iterator[CortexMagics]:
    found = ip.magics_manager.registry[CortexMagics.__name__]
    assert isinstance(found, CortexMagics)
    saved = dict(ip.config.CortexMagics)
    yield found
    section = ip.config.CortexMagics
    section.clear()
    section.update(saved)


@pytest.fixture
def helper() -> Iterator[None]:
    Agent("req_helper", instructions="Help.", request={"min_p": 0.1, "seed": 5})
    yield
    default_registry.remove("agent", "req_helper")


def test_fields_reach_every_request_of_a_run_its_llm_actions_and_nested_agents(
    ip: InteractiveShell, server: FakeOpenAIServer, magics: CortexMagics, helper: None
) -> None:
    ip.run_line_magic("config", "CortexMagics.request = {'top_k': 20, 'seed': 7}")
    server.script(
        reply(
            '<action type="llm" id="s" mode="sync">{"name": "summarise", '
            '"parameters": {"text": "long"}}</action>'
            '<action type="agent" id="a">{"name": "req_helper", '
            '"parameters": {"task": "help"}}</action>'
        ),
        reply("Short."),  # the llm action and the nested agent answer in plain text
        reply("Inner."),
        reply("<response>All done.</response>"),
    )
    ip.run_cell_magic(
        "cortex",
        """--model gpt-test --text --max-tokens 50 --request '{"seed": 1, "temperature": 0}'""",
        "Go.",
    )
    record = ip.user_ns["_cortex"]
    assert (record.status, record.answer) == ("completed", "All done.")
    bodies = [request.json for request in server.requests]
    assert len(bodies) == 4
    for body in bodies:  # the session's, then the cell's over it
        assert (body["top_k"], body["temperature"]) == (20, 0)
    turns = [bodies[0], bodies[-1]]
    assert [(b["seed"], b["max_tokens"]) for b in turns] == [(1, 50), (1, 50)]
    nested = [b for b in bodies[1:3] if b.get("min_p") == 0.1]
    assert len(nested) == 1 and nested[0]["seed"] == 5  # its own request over its caller's
    (llm,) = [b for b in bodies[1:3] if "min_p" not in b]
    assert llm["seed"] == 1


@pytest.mark.parametrize(
    ("line", "setting", "temperature"),
    [
        ("""--request '{"temperature": 0.2}' --temperature 0.5""", None, 0.5),
        ("""--request '{"temperature": 0.2}'""", "CortexMagics.temperature = 0.9", 0.2),
        ("", "CortexMagics.request = {'temperature': 0.3}", 0.3),
        ("--temperature 0.4", "CortexMagics.request = {'temperature': 0.3}", 0.4),
    ],
)
def test_the_merge_order_is_setting_then_request_then_explicit_options(
    ip: InteractiveShell,
    server: FakeOpenAIServer,
    magics: CortexMagics,
    line: str,
    setting: str | None,
    temperature: float,
) -> None:
    if setting:
        ip.run_line_magic("config", setting)
    server.script(reply("Hi."))
    ip.run_cell_magic("cortex", f"--model gpt-test --text {line}", "Hi?")
    assert server.requests[0].json["temperature"] == temperature


def test_a_cell_request_goes_over_a_named_agents_own_and_its_model_loses_to_model(
    ip: InteractiveShell,
    server: FakeOpenAIServer,
    magics: CortexMagics,
    capsys: pytest.CaptureFixture[str],
) -> None:
    Agent(
        "req_own",
        model=OpenAIModel("agent-model"),
        temperature=0.9,
        request={"top_k": 3, "seed": 2},
    )
    try:
        server.script(reply("One."), reply("Two."))
        ip.run_cell_magic("cortex", "--agent req_own --text", "Hi?")
        ip.run_cell_magic(
            "cortex",
            """--agent req_own --model cell-model --text --request '{"temperature": 0}'""",
            "Hi?",
        )
    finally:
        default_registry.remove("agent", "req_own")
    first, second = (request.json for request in server.requests)
    assert (first["model"], first["temperature"], first["top_k"]) == ("agent-model", 0.9, 3)
    assert (second["model"], second["temperature"], second["top_k"]) == ("cell-model", 0, 3)
    out = capsys.readouterr().out
    assert "[end] agent-model" in out.split("Two.")[0]  # the header names the model asked
    assert "[end] cell-model" in out.split("Two.")[1]


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ("--request '{\"stream\": false}'", "the field 'stream' cannot be set"),
        ("--request '{\"messages\": []}'", "the field 'messages' cannot be set"),
        ('--request \'{"model": "x"}\'', "choose the model with --model"),
        ("--request '{\"n\": 2}'", "the field 'n' cannot be set"),
        ("--request '[1, 2]'", "must be a JSON object of request fields"),
        ("--request 'temperature=0'", "is not JSON"),
    ],
)
def test_a_bad_request_is_refused_in_one_line_before_anything_is_sent(
    ip: InteractiveShell, server: FakeOpenAIServer, line: str, says: str
) -> None:
    with pytest.raises(UsageError) as caught:
        ip.run_cell_magic("cortex", f"--model gpt-test {line}", "Hi?")
    message = str(caught.value)
    assert says in message and "\n" not in message and message.startswith("%%cortex: ")
    assert server.requests == []


def test_an_agent_refuses_a_protocol_field() -> None:
    with pytest.raises(ValueError, match=r"Agent\(request=...\): the field 'stream' cannot"):
        Agent(request={"stream": False})


def test_a_credential_in_a_request_field_is_redacted_where_a_server_quotes_it(
    ip: InteractiveShell, server: FakeOpenAIServer, capsys: pytest.CaptureFixture[str]
) -> None:
    token = "hf_notarealtoken0123456789"
    server.script(Error(400, {"error": {"message": f"unknown field hub_token={token}"}}))
    with pytest.raises(CortexRunError) as caught:
        ip.run_cell_magic(
            "cortex", f"""--model gpt-test --text --request '{{"hub_token": "{token}"}}'""", "Hi?"
        )
    assert "hub_token=[redacted]" in str(caught.value)
    assert server.requests[0].json["hub_token"] == token  # sent as it is
    record: Any = ip.user_ns["_cortex"]
    shown = capsys.readouterr()
    assert token not in shown.out + shown.err + str(caught.value) + record.to_jsonl()


def test_cortex_config_sets_the_session_request(
    ip: InteractiveShell, server: FakeOpenAIServer, magics: CortexMagics
) -> None:
    ip.run_line_magic("cortex", """config request='{"seed": 3}'""")
    assert magics.request == {"seed": 3}
    server.script(reply("Hi."))
    ip.run_cell_magic("cortex", "--model gpt-test --text", "Hi?")
    assert server.requests[0].json["seed"] == 3
