"""Secrets in every form, on every surface (issue 25, section 1): each repro of the issue,
from the user's side (a real shell, the request the loopback server received, the
transcript, what the magic printed).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell

from cortex_jupyter import default_registry
from cortex_jupyter.runtime.core.record.run import summarize
from cortex_jupyter.runtime.core.values.answer import value_text
from tests.models.fake_openai_server import FakeOpenAIServer, Stream, finish, texts

#: A password holding a backslash: JSON and ``repr`` write it as ``hunter2\\backslash``.
PASSWORD = "hunter2\\backslash"
#: A 60-character key (no character that any escaping changes).
KEY = "sk-live-" + "QWERTYUIOPASDFGHJKLZXCVBNMqwertyuiopasdfghjklzxcvbnmQWER"[:52]


def fragments(secret: str, text: str, size: int = 6) -> list[str]:
    """Every ``size``-character piece of ``secret`` that ``text`` holds."""
    return sorted({secret[i : i + size] for i in range(len(secret) - size + 1)} & _pieces(text))


def _pieces(text: str, size: int = 6) -> set[str]:
    return {text[i : i + size] for i in range(len(text) - size + 1)}


@pytest.fixture
def secret_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DB_PASSWORD", PASSWORD)
    monkeypatch.setenv("SERVICE_API_KEY", KEY)


def reply(server: FakeOpenAIServer, *turns: str) -> None:
    server.script(*(Stream([*texts(text, 11), finish()]) for text in turns))


@pytest.fixture
def config_tool() -> Iterator[None]:
    @default_registry.tool(name="db_config")
    def db_config() -> dict[str, Any]:
        """The database settings."""
        import os

        return {"db": {"password": os.environ["DB_PASSWORD"], "host": "db.local"}}

    yield
    default_registry.remove("tool", "db_config")


def test_a_secret_with_a_backslash_is_redacted_once_json_encoded(
    ip: InteractiveShell, server: FakeOpenAIServer, secret_env: None, config_tool: None
) -> None:
    reply(
        server,
        '<action id="c">{"name": "db_config", "output_key": "cfg"}</action>',
        "<response>Read it.</response>",
    )
    ip.run_cell_magic("cortex", "--model gpt-test --text", "Read the db config.")
    run = ip.user_ns["_cortex"]
    assert ip.user_ns["cfg"]["db"]["password"] == PASSWORD  # the user's data stays exact
    sent = json.dumps([request.json["messages"] for request in server.requests])
    assert "hunter2" not in sent and "db.local" in sent and "[redacted]" in sent
    assert "hunter2" not in run.to_jsonl()


def test_a_repr_of_an_object_holding_the_secret_is_redacted(secret_env: None) -> None:
    class Conn:
        def __repr__(self) -> str:
            return f"Conn(password={PASSWORD!r}, url={'x?p=' + PASSWORD!r})"

    for shown in (summarize(Conn()), value_text(Conn()), summarize({"c": Conn()})):
        assert "hunter2" not in shown and "[redacted]" in shown


def test_a_summary_of_repeated_keys_keeps_no_part_of_one(secret_env: None) -> None:
    assert fragments(KEY, summarize("\n".join([KEY] * 5))) == []


def test_a_long_log_of_keys_cut_for_the_answer_keeps_no_part_of_one(secret_env: None) -> None:
    shown = value_text(KEY * 700, "log")
    assert fragments(KEY, shown) == [] and "more characters; the whole value is log" in shown


def test_pandas_cutting_a_cell_leaves_no_prefix_of_a_key(secret_env: None) -> None:
    pd = pytest.importorskip("pandas")
    from cortex_jupyter.display.rich import rich_html

    frame = pd.DataFrame({"name": ["svc"], "auth": ["token=" + KEY + " tail" * 20]})
    series = frame["auth"]
    for shown in (
        value_text(frame),
        value_text(series),
        rich_html(frame),
        rich_html(series),
        summarize(frame),
    ):
        assert fragments(KEY, shown) == [], shown
    assert frame["auth"][0].startswith("token=" + KEY)  # the frame itself is untouched


def test_cortex_config_prints_the_request_defaults_redacted(
    ip: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    token = "tok-9f8e7d6c5b4a39281706"
    bearer = "Zq1Xw2Cv3Bn4Mm5Ll6Kk7Jj8"
    ip.run_line_magic(
        "config",
        "CortexMagics.request = "
        + repr({"api_token": token, "extra_headers": {"Authorization": f"Bearer {bearer}"}}),
    )
    capsys.readouterr()
    ip.run_line_magic("cortex", "config")
    out = capsys.readouterr().out
    assert "request = " in out and "[redacted]" in out
    assert fragments(token, out) == [] and fragments(bearer, out) == []
    # the nested header's key is a secret from now on, wherever it turns up
    assert fragments(bearer, summarize(f"got {bearer} back")) == []


def test_a_list_of_twelve_cities_and_a_long_dict_show_whole_in_the_answer() -> None:
    cities = [f"City{i}" for i in range(12)]
    assert value_text(cities) == repr(cities)
    record = {f"key{i}": "v" * 20 for i in range(12)}  # over 200 characters
    assert value_text(record) == repr(record)
    huge = list(range(100_000))  # past the limit: cut with a marker, never all made
    shown = value_text(huge, "n")
    assert shown.startswith("[0, 1, 2") and shown.endswith("; the whole value is n]")


#: A bearer token a service's variable holds with its scheme (``Authorization: Bearer x``).
BARE = "Zq1Xw2Cv3Bn4Mm5Ll6Kk7Jj8"


@pytest.fixture
def echo_tool() -> Iterator[None]:
    """A tool that gives back what it is asked for from the environment, as a client
    library would hold it (a DSN's password, a token without its scheme)."""

    @default_registry.tool(name="env_echo")
    def env_echo(what: str) -> dict[str, Any]:
        """Give back a credential."""
        import base64
        import os
        import urllib.parse

        if what == "dsn":
            url = urllib.parse.urlsplit(os.environ["DATABASE_URL"])
            return {"password": url.password, "url": os.environ["DATABASE_URL"]}
        scheme, _, token = os.environ["SERVICE_AUTH_TOKEN"].partition(" ")
        decoded = base64.b64decode(token).decode() if scheme == "Basic" else ""
        print("token:", token)
        return {"token": token, "password": decoded.partition(":")[2]}

    yield
    default_registry.remove("tool", "env_echo")


def echo(ip: InteractiveShell, server: FakeOpenAIServer, what: str) -> tuple[Any, str]:
    """A cell whose model has ``env_echo`` read ``what`` (action ``e``), then answers; it
    completes: its run, and every message the server was sent, as JSON."""
    body = json.dumps({"name": "env_echo", "parameters": {"what": what}})
    reply(server, f'<action id="e">{body}</action>', "<response>Done.</response>")
    ip.run_cell_magic("cortex", "--model gpt-test --text", f"Read the {what}.")
    run = ip.user_ns["_cortex"]
    assert run.status == "completed"
    return run, json.dumps([request.json["messages"] for request in server.requests])


def _stored(ip: InteractiveShell) -> str:
    """The bytes of the session's store files, as text."""
    import os
    from pathlib import Path

    from cortex_jupyter import store

    store.open_store().flush()
    path = store.current_path()
    assert path is not None
    files = [Path(path + suffix) for suffix in ("", "-wal", "-shm")]
    return "".join(f.read_bytes().decode("utf-8", "replace") for f in files if os.path.exists(f))


@pytest.mark.parametrize("scheme", ["Bearer", "Token", "Basic"])
def test_a_credential_with_an_auth_scheme_hides_its_bare_token(
    ip: InteractiveShell,
    server: FakeOpenAIServer,
    monkeypatch: pytest.MonkeyPatch,
    echo_tool: None,
    scheme: str,
) -> None:
    import base64

    password = "pw-" + BARE[::-1]
    token = base64.b64encode(f"ann:{password}".encode()).decode() if scheme == "Basic" else BARE
    monkeypatch.setenv("SERVICE_AUTH_TOKEN", f"{scheme} {token}")
    run, sent = echo(ip, server, "token")
    assert run.actions["e"].output["token"] == token
    assert "[redacted]" in sent
    for shown in (sent, run.to_jsonl(), _stored(ip)):
        assert fragments(token, shown) == []
        if scheme == "Basic":
            assert fragments(password, shown) == []


@pytest.mark.parametrize(
    ("url", "password"),
    [
        ("postgres://admin:s3cr3t-Passw0rd@db.example/app", "s3cr3t-Passw0rd"),
        ("redis://:p%40ss-w0rd-here@db.example:6379/0", "p@ss-w0rd-here"),  # encoded @
        ("mysql://root:p@ss@word!x@db.example/app", "p@ss@word!x"),  # an @ left in it
        ("https://a:b@x, postgres://admin:pw@db.example/app", "admin:pw"),  # short: userinfo
    ],
)
def test_a_url_with_a_password_in_any_variable_is_a_secret(
    ip: InteractiveShell,
    server: FakeOpenAIServer,
    monkeypatch: pytest.MonkeyPatch,
    echo_tool: None,
    url: str,
    password: str,
) -> None:
    monkeypatch.setenv("DATABASE_URL", url)  # not a credential's name
    run, sent = echo(ip, server, "dsn")
    assert run.actions["e"].output["url"] == url
    assert "db.example" in sent and "[redacted]" in sent  # the host is not a secret
    for shown in (sent, run.to_jsonl(), _stored(ip)):
        assert fragments(password, shown) == []
