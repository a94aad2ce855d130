"""What a newcomer reads (issue 37, items 2-4): ``%cortex tools`` as a table with the
built-ins folded, one report per failure and per refused name (never broken inside a
word), and a denial that says who decided: the user, a rule (named), or a policy."""

from __future__ import annotations

import builtins
import re
from collections.abc import Iterator
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell

from cortex_jupyter import default_registry


@pytest.fixture
def tools() -> Iterator[list[str]]:
    sent: list[str] = []

    @default_registry.tool(name="nw_send", approve=True)
    def send(to: str) -> str:
        """Send an *invite* to ``to``: a <b>real</b> email.

        The second paragraph is not shown in the table.
        """
        sent.append(to)
        return "sent"

    @default_registry.tool(name="nw_echo")
    def echo(text: str) -> str:
        """Echo."""
        return text

    @default_registry.tool(name="nw_broken")
    def broken(city: str) -> str:
        """Always fails."""
        raise ConnectionError(f"no route to {city}")

    yield sent
    default_registry.remove("tool", "nw_send")
    default_registry.remove("tool", "nw_broken")
    default_registry.remove("tool", "nw_echo")


@pytest.fixture
def shown(ip: InteractiveShell, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    published: list[Any] = []
    monkeypatch.setattr(ip.display_pub, "publish", lambda data, *a, **k: published.append(data))
    return published


def test_tools_is_a_table_of_the_users_tools_with_the_builtins_folded(
    ip: InteractiveShell, tools: list[str], shown: list[Any]
) -> None:
    ip.run_line_magic("cortex", "tools")
    html = shown[-1]["text/html"]
    mine, _, folded = html.partition("<details")
    row = re.search(r"<tr><td[^>]*><code[^>]*>nw_send</code>.*?</tr>", mine, re.S)
    assert row is not None
    # one line of description, as markdown, escaped; the parameters as the model passes them
    assert "<em>invite</em>" in row.group() and re.search(r"<code[^>]*>to</code>:", row.group())
    assert "&lt;b&gt;real&lt;/b&gt;" in row.group() and "<b>real</b>" not in html
    assert "second paragraph" not in html and "(to: str)" not in row.group()
    assert ">to: str<" in row.group()
    # cortex's own entries: under one summary line, none of them among the user's
    summary = re.search(r"<summary[^>]*>(.*?)</summary>", folded, re.S)
    assert summary is not None and summary.group(1).startswith("9 built in")
    assert "cache.get" in folded and "cache.get" not in mine
    assert "``" not in html


def test_a_failed_action_is_one_short_line_under_the_cell(
    ip: InteractiveShell, tools: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    ip.run_cell_magic(
        "cortex", "--script --delay 0 --text",
        '<action id="w">{"name": "nw_broken", "parameters": {"city": "Paris"}}</action>',
    )  # fmt: skip
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert err == ["cortex: 1 action(s) failed: w (nw_broken); its panel above says why."]


def test_a_refused_name_is_one_message_wrapped_between_words(
    ip: InteractiveShell, tools: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    ip.run_cell_magic(
        "cortex", "--script --delay 0 --text",
        '<action id="k">{"name": "nw_echo", "parameters": {"text": "x"}, '
        '"output_key": "high-f"}</action>',
    )  # fmt: skip
    err = capsys.readouterr().err
    assert err.count("output_key 'high-f'") == 1 and err.count("cortex:") == 1
    lines = err.strip().splitlines()
    assert all(len(line) <= 88 for line in lines)
    words = " ".join(line.strip() for line in lines)
    assert "output_key 'high-f'" in words and "not a Python identifier" in words
    assert ip.user_ns["_cortex"].actions["k"].note in words  # no word cut across lines


SEND = '<action id="mail">{"name": "nw_send", "parameters": {"to": "ada"}}</action>'


def no_mass_mail(node: Any) -> bool:
    return False


@pytest.mark.parametrize(
    ("setting", "said"),
    [
        ("'ask'", "denied by the user"),
        ("no_mass_mail", "denied by the rule no_mass_mail"),
        ("'deny'", "denied by the policy approval='deny'"),
    ],
)
def test_a_denial_says_who_decided(
    ip: InteractiveShell,
    tools: list[str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    setting: str,
    said: str,
) -> None:
    asked: list[str] = []
    monkeypatch.setattr(builtins, "input", lambda q: asked.append(q) or "n")
    ip.user_ns["no_mass_mail"] = no_mass_mail
    ip.run_line_magic("config", f"CortexMagics.approve = {setting}")
    try:
        ip.run_cell_magic("cortex", "--script --delay 0 --text", SEND)
    finally:
        ip.run_line_magic("config", "CortexMagics.approve = 'ask'")
    node = ip.user_ns["_cortex"].actions["mail"]
    assert tools == [] and node.status == "skipped" and node.error == said
    assert bool(asked) == (setting == "'ask'")  # nobody is asked unless the policy asks
    assert said in capsys.readouterr().out


KEY = "nwTOKENq7v2x9zk4p8"  # an MCP server or a default argument may show it


def test_tools_never_show_a_secret(
    ip: InteractiveShell,
    shown: list[Any],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("NW_SERVICE_TOKEN", KEY)

    def lookup(query: str, token: str = KEY) -> str:
        return query

    lookup.__doc__ = f"Look *up* a word (signed with {KEY})."
    default_registry.tool(name="nw_lookup")(lookup)
    try:
        ip.run_line_magic("cortex", "tools")
        ip.run_line_magic("cortex", "tools --text")
    finally:
        default_registry.remove("tool", "nw_lookup")
    bundle, printed = shown[-1], capsys.readouterr().out
    assert "nw_lookup" in bundle["text/html"] and "nw_lookup" in printed
    for text in (bundle["text/html"], bundle["text/plain"], printed):
        assert KEY not in text and "[redacted]" in text


def test_a_failure_line_never_shows_a_secret_nor_wraps_one(
    ip: InteractiveShell, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # a secret of several words: the line under the cell wraps between words, so a wrap
    # made before redacting would leave it on two lines, where no redaction finds it
    monkeypatch.setenv("NW_PASSWORD", "correct horse battery staple")
    monkeypatch.setenv("NW_API_KEY", KEY)
    ip.run_cell_magic(
        "cortex", "--script --delay 0 --text",
        f'<action id="a">{{"name": "{KEY}"}}</action>'
        '<action id="b">{"name": "mail correct horse battery staple"}</action>',
    )  # fmt: skip
    err = capsys.readouterr().err
    words = " ".join(line.strip() for line in err.splitlines())
    assert "2 action(s) failed" in words
    assert KEY not in words and "horse battery" not in words and "battery staple" not in words


class Unshowable:
    def __repr__(self) -> str:
        raise RuntimeError("no repr today")


def test_tools_lists_a_tool_whose_default_cannot_be_shown(
    ip: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    def tuned(x: int, config: object = Unshowable(), size=2**20) -> int:  # type: ignore[no-untyped-def]
        return x

    default_registry.tool(name="nw_tuned")(tuned)
    try:
        ip.run_line_magic("cortex", "tools --text")
    finally:
        default_registry.remove("tool", "nw_tuned")
    printed = capsys.readouterr().out
    line = next(line for line in printed.splitlines() if "x: int, config: object = " in line)
    assert "RuntimeError" in line and "size=1048576" in line
