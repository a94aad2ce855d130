"""Bad input and unexpected failures end a cell with one line, through a real IPython shell.

An unexpected error keeps the run and shows one ``cortex:`` line (``%cortex debug``
prints the traceback); ``%cortex save`` writes deep runs and says in one line why a
path cannot be written; a bad setting is refused when it is set, not in every later cell.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from cortex_jupyter import default_registry
from cortex_jupyter.display.text import TextRenderer
from cortex_jupyter.magic import CortexMagics, as_async_cell
from cortex_jupyter.protocol import xml
from cortex_jupyter.runtime import Run
from tests.helpers import config_refusal, magics, next_cell_runs
from tests.models.fake_openai_server import FakeOpenAIServer

KEY = "sk-bad-input-0123456789"


@pytest.fixture
def async_cells(ip: InteractiveShell, request: pytest.FixtureRequest) -> Iterator[bool]:
    """Run ``%%cortex`` cells as a kernel does (a top-level await), or as plain magics."""
    use = bool(request.param)
    if use:
        ip.input_transformers_cleanup.append(as_async_cell)
    yield use
    if use:
        ip.input_transformers_cleanup.remove(as_async_cell)


@pytest.fixture
def broken(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """A bug in the middle of a run, where the test asks: the parser raises on a chunk
    holding "boom" (inside the run's task group), or the view raises on the response
    (in the cell's own thread)."""
    where = str(request.param)
    if where == "parser":
        feed = xml.XmlParser.feed

        def failing(self: xml.XmlParser, chunk: str) -> Any:
            if "boom" in chunk:
                raise RuntimeError("parser broke")
            return feed(self, chunk)

        monkeypatch.setattr(xml.XmlParser, "feed", failing)
    else:
        show = TextRenderer.feed

        def failing_view(self: TextRenderer, event: Any, now: float) -> Any:
            if event.kind == "response":
                raise RuntimeError("view broke")
            return show(self, event, now)

        monkeypatch.setattr(TextRenderer, "feed", failing_view)
    return where


@pytest.mark.parametrize("broken", ["parser", "view"], indirect=True)
@pytest.mark.parametrize("async_cells", [False, True], indirect=True, ids=["sync", "async"])
def test_an_unexpected_failure_is_one_line_and_the_traceback_is_one_command_away(
    ip: InteractiveShell,
    async_cells: bool,
    broken: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    result = ip.run_cell(
        "%%cortex --script --delay 0 --chunk-size 40\n"
        "<thought>Thinking it over.</thought>\n<response>The answer: boom</response>"
    )
    assert result.error_in_exec is not None
    shown = capsys.readouterr()
    lines = [line for line in (shown.out + shown.err).splitlines() if line.strip()]
    assert "Traceback" not in shown.out + shown.err
    failure = [line for line in lines if line.startswith("cortex:")]
    assert failure == [
        f"cortex: the run failed: RuntimeError: {broken} broke. What arrived is on _cortex; "
        "%cortex debug shows the traceback."
    ]
    # Everything else is the kept view: what it had shown when the failure came.
    kept = ["[thought", "[interrupted", "[end"] if broken == "parser" else ["[thought"]
    assert [line.split("]")[0] for line in lines if line not in failure] == kept
    run = ip.user_ns["_cortex"]
    assert run.thought == "Thinking it over."
    assert (run.status, run.reason) == ("failed", f"RuntimeError: {broken} broke")
    assert isinstance(run.error, RuntimeError) and str(run.error) == f"{broken} broke"

    ip.run_line_magic("cortex", "debug")
    printed = capsys.readouterr().out
    assert printed.startswith("Traceback (most recent call last):")
    assert "in failing" in printed
    assert printed.rstrip().endswith(f"RuntimeError: {broken} broke")


def test_the_line_for_a_long_failure_is_cut_after_secrets_are_redacted(
    ip: InteractiveShell, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("BAD_INPUT_API_KEY", KEY)

    def failing(self: xml.XmlParser, chunk: str) -> Any:
        raise RuntimeError("x" * 295 + KEY)  # the cut falls inside the key

    monkeypatch.setattr(xml.XmlParser, "feed", failing)
    ip.run_cell("%%cortex --script --delay 0\n<response>hi</response>")
    shown = capsys.readouterr()
    line = next(line for line in shown.out.splitlines() if line.startswith("cortex:"))
    assert "x" * 295 + "…" in line  # 300 characters at most, no half "[redacted]"
    assert KEY[:4] not in shown.out + shown.err
    assert ip.user_ns["_cortex"].reason.endswith("x[redacted]")


def test_debug_says_when_there_is_nothing_to_show_and_shows_an_actions_exception(
    ip: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    @default_registry.tool(name="bad_input_fails")
    def fails() -> None:
        """Always raises."""
        raise LookupError("no such row")

    try:
        ip.run_cell_magic(
            "cortex",
            "--script --delay 0",
            '<action id="f">{"name": "bad_input_fails"}</action><response>ok</response>',
        )
    finally:
        default_registry.remove("tool", "bad_input_fails")
    capsys.readouterr()
    ip.run_line_magic("cortex", "debug")
    assert capsys.readouterr().out == (
        "cortex: the last run (completed) raised no exception to show; %cortex debug ID "
        "shows an action's: f.\n"
    )
    ip.run_line_magic("cortex", "debug f")
    printed = capsys.readouterr().out
    assert "in fails" in printed and printed.rstrip().endswith("LookupError: no such row")
    with pytest.raises(UsageError, match=r"the last run has no action 'g' \(f\)"):
        ip.run_line_magic("cortex", "debug g")


def test_save_writes_a_run_whose_output_is_nested_600_deep(
    ip: InteractiveShell, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BAD_INPUT_API_KEY", KEY)

    @default_registry.tool(name="bad_input_deep")
    def deep(levels: int) -> Any:
        """A list nested ``levels`` deep, with a secret at the bottom."""
        value: Any = [KEY]
        for _ in range(levels):
            value = [value]
        return value

    try:
        ip.run_cell_magic(
            "cortex",
            "--script --delay 0",
            '<action id="d">{"name": "bad_input_deep", "parameters": {"levels": 600}, '
            '"output_key": "tower"}</action><response>built</response>',
        )
    finally:
        default_registry.remove("tool", "bad_input_deep")
    path = tmp_path / "deep.jsonl"
    ip.run_line_magic("cortex", f"save {path}")
    text = path.read_text(encoding="utf-8")
    assert KEY not in text
    assert Run.load(path).actions["d"].status == "done"
    assert ip.user_ns["tower"][0][0]  # the notebook's value stays whole


@pytest.mark.parametrize("where", ["a directory", "a missing folder", "no permission"])
def test_save_to_a_path_that_cannot_be_written_is_one_line(
    ip: InteractiveShell, tmp_path: Path, where: str
) -> None:
    ip.run_cell_magic("cortex", "--script --delay 0", "<response>ok</response>")
    if where == "a directory":
        target = tmp_path
        why = f"{tmp_path} is a folder; give a file in it, e.g. {tmp_path / 'run.jsonl'}"
    elif where == "a missing folder":
        target = tmp_path / "nowhere" / "run.jsonl"
        why = f"the folder {target.parent} does not exist; create it first or pick another"
    elif os.geteuid() != 0:
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        target, why = locked / "run.jsonl", f"no permission to write {locked / 'run.jsonl'}"
    elif Path("/sys/kernel").is_dir():  # root may write anywhere but in sysfs
        target = Path("/sys/cortex-bad-input.jsonl")
        why = f"no permission to write {target}"
    else:
        pytest.skip("running as root, and there is no sysfs to be refused by")
    with pytest.raises(UsageError) as caught:
        ip.run_line_magic("cortex", f"save {target}")
    # One line that names what is wrong and what to do (issue 25, 3.10).
    assert str(caught.value) == f"%cortex save: {why}."


# ---- settings are checked when they are set ------------------------------------------

BAD_SETTINGS = [
    ("approve", "'sometimes'", "'ask', 'allow', 'deny' or a function"),
    ("dialect", "'klingon'", "any of ['cortex', 'sigil', 'cogency', 'hermes', 'auto']"),
    ("display", "'hologram'", "any of ['auto', 'widgets', 'text']"),
    ("max_turns", "0", "should not be less than 1"),
    ("max_turns", "True", "must be a whole number"),
    ("max_turns", "'many'", "expected an int"),
    ("chunk_size", "0", "should not be less than 1"),
    ("delay", "-1", "should not be less than 0"),
    ("temperature", "-0.5", "should not be less than 0"),
    ("context_tokens", "100", "should not be less than 256"),
    ("approve_timeout", "0", "a number of seconds above 0, or None"),
    ("native_tools", "'maybe'", "expected a boolean"),
    ("model", "''", "must name a model"),
    ("request", "{'n': 2}", "CortexMagics.request: the field 'n' cannot be set"),
    ("request", "{'stream': False}", "the field 'stream' cannot be set (the run always streams)"),
    ("request", "{'seed': object()}", "the field 'seed' must be a JSON value, not object"),
    ("request", "[1]", "expected a dict"),
]


@pytest.fixture
def settings(ip: InteractiveShell) -> Iterator[CortexMagics]:
    """The magics; the shell's ``CortexMagics`` config (where ``%config`` also keeps what
    it sets, refused or not) is put back afterwards, for the tests that come next."""
    saved = dict(ip.config.CortexMagics)
    yield magics(ip)
    section = ip.config.CortexMagics  # %config replaces the shell's config with a copy
    section.clear()
    section.update(saved)


@pytest.mark.parametrize(("name", "value", "says"), BAD_SETTINGS)
def test_config_refuses_a_bad_value_in_one_line_and_keeps_the_old_one(
    ip: InteractiveShell,
    settings: CortexMagics,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    name: str,
    value: str,
    says: str,
) -> None:
    assert says in config_refusal(ip, monkeypatch, name, value)
    next_cell_runs(ip, capsys)  # as if nothing had happened


@pytest.mark.parametrize(
    ("item", "says"),
    [
        ("approve=sometimes", "'ask', 'allow', 'deny' or a function (node) -> bool"),
        ("max_turns=0", "should not be less than 1"),
        ("max_turns=many", "it takes a whole number"),
        ("context_tokens=lots", "it takes a whole number or none"),
        ("native_tools=maybe", "it takes true or false"),
        ("dialect=klingon", "any of ['cortex', 'sigil', 'cogency', 'hermes', 'auto']"),
        ("request='{\"n\": 2}'", "CortexMagics.request: the field 'n' cannot be set"),
        ("request=temperature:0", "it takes a JSON object"),
    ],
)
def test_cortex_config_refuses_a_bad_value_and_says_what_stays(
    ip: InteractiveShell, settings: CortexMagics, item: str, says: str
) -> None:
    name = item.partition("=")[0]
    before = getattr(settings, name)
    with pytest.raises(UsageError) as caught:
        ip.run_line_magic("cortex", f"config {item}")
    message = str(caught.value)
    assert says in message and message.endswith(f"(it stays {before!r}).")
    assert getattr(settings, name) == before


def test_a_setting_refused_earlier_does_not_break_loading_again(
    ip: InteractiveShell, settings: CortexMagics, capsys: pytest.CaptureFixture[str]
) -> None:
    ip.run_line_magic("config", "CortexMagics.max_turns = 3")
    ip.run_line_magic("config", "CortexMagics.dialect = 'klingon'")  # refused, yet kept
    capsys.readouterr()
    ip.run_line_magic("reload_ext", "cortex_jupyter")
    reloaded = magics(ip)
    assert reloaded is not settings
    assert (reloaded.max_turns, reloaded.dialect) == (3, "cortex")
    assert capsys.readouterr().err == (
        "cortex: a setting was ignored: The 'dialect' trait of a CortexMagics instance "
        "expected any of ['cortex', 'sigil', 'cogency', 'hermes', 'auto'] "
        "(case-insensitive), not the str 'klingon'.\n"
    )


def test_good_values_are_still_taken(ip: InteractiveShell, settings: CortexMagics) -> None:
    ip.run_line_magic("config", "CortexMagics.approve = 'allow'")
    ip.run_line_magic("cortex", "config approve_timeout=2.5 context_tokens=none native_tools=off")
    assert settings.approve == "allow" and settings.approve_timeout == 2.5
    assert settings.context_tokens is None and settings.native_tools is False
    settings.approve = len  # a function (node) -> bool
    assert settings.approve is len


def test_a_request_field_holding_nan_is_refused_before_it_reaches_the_server(
    ip: InteractiveShell, server: FakeOpenAIServer
) -> None:
    # json.loads reads NaN and json.dumps writes it back: the server would get a body
    # that is no JSON, for this cell and, through CortexMagics.request, every later one.
    with pytest.raises(
        UsageError,
        match=r"'temperature' must be a JSON value, not float "
        r"holding NaN or infinity",
    ):
        ip.run_cell_magic("cortex", "--model m --request '{\"temperature\": NaN}'", "Hi.")
    assert server.requests == []


def test_a_missing_ssl_cert_file_is_one_line_naming_it_and_the_kernel_stays_usable(
    ip: InteractiveShell,
    server: FakeOpenAIServer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    from cortex_jupyter.models import _tls
    from tests.models.fake_openai_server import Stream, text

    monkeypatch.setattr(_tls, "_CONTEXTS", {})
    missing = str(tmp_path / "ca.pem")
    monkeypatch.setenv("SSL_CERT_FILE", missing)
    result = ip.run_cell("%%cortex --model m\nHi.")
    assert result.error_in_exec is not None
    shown = capsys.readouterr()
    failure = [line for line in (shown.out + shown.err).splitlines() if line.startswith("cortex:")]
    assert len(failure) == 1
    assert "SSL_CERT_FILE" in failure[0] and missing in failure[0]
    assert "FileNotFoundError" not in failure[0]
    monkeypatch.delenv("SSL_CERT_FILE")
    server.script(Stream([text("<response>fine</response>")]))
    ip.run_cell("%%cortex --model m\nHi.")
    assert ip.user_ns["_cortex"].response == "fine"
