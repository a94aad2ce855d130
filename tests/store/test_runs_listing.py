"""``%cortex runs`` as a newcomer reads it (issue 37, item 1): one line a run, newest
first, the prompt as written (a script's words, not its tags), tokens as the view counted
them, where a search matched, how many more there are; ``runs()`` as a DataFrame."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell

import cortex_jupyter

SCRIPT = """<thought>Checking the weather in Paris before the picnic.</thought>
<action id="w">{"name": "cortex.cache.set", "parameters": {"key": "k", "value": 3}}</action>
--- next turn ---
<response>Sunny, 24 degrees.</response>"""

HOSTILE = (
    '<response>weather <img src=x onerror="alert(1)"> [mark] </mark><script>x()</script></response>'
)


@pytest.fixture
def shown(ip: InteractiveShell, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The bundles the cells display (their own store, so only their runs are listed)."""
    ip.run_line_magic("config", f"CortexMagics.store = {str(tmp_path / 'runs.db')!r}")
    published: list[Any] = []
    monkeypatch.setattr(ip.display_pub, "publish", lambda data, *a, **k: published.append(data))
    return published


def script(ip: InteractiveShell, body: str) -> Any:
    ip.run_cell_magic("cortex", "--script --delay 0 --text", body)
    return ip.user_ns["_cortex"]


def html_of(shown: list[Any]) -> str:
    return next(b["text/html"] for b in reversed(shown) if "text/html" in b)


def test_runs_in_a_notebook_is_an_html_table_one_row_a_run_newest_first(
    ip: InteractiveShell, shown: list[Any]
) -> None:
    first = script(ip, SCRIPT)
    second = script(ip, "<response>Nothing to add.</response>")
    ip.run_line_magic("cortex", "runs")
    html = html_of(shown)
    rows = re.findall(r'<tr data-run="([0-9a-f]+)">', html)
    assert rows == [second.id, first.id]
    # a script cell shows its words, never its tags
    assert "Checking the weather in Paris before the picnic." in html
    assert "&lt;thought&gt;" not in html and "&lt;action" not in html
    # the view's own estimate, marked ~: the header said the same
    header = re.search(r"(~\d+) tokens", shown_text(ip, first))
    assert header is not None and f">{header.group(1)}</td>" in html
    # a saved notebook still shows the id (and how to open it)
    assert f'title="%cortex open {first.id}"' in html
    assert "more" not in html  # all of them are shown


def shown_text(ip: InteractiveShell, run: Any) -> str:
    from cortex_jupyter.display import from_run, render_text

    return render_text(from_run(run, model="script"))


def test_runs_with_text_is_the_plain_table_and_says_how_to_see_more(
    ip: InteractiveShell, shown: list[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    ids = [script(ip, f"<response>answer {i}</response>").id for i in range(3)]
    capsys.readouterr()
    ip.run_line_magic("cortex", "runs --text --limit 2")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == list(cortex_jupyter.commands.RUNS_HEADINGS)
    assert [line.split()[0] for line in lines[1:3]] == ids[:0:-1]
    assert lines[1].split()[7] == "~2"  # "answer 2": 8 characters, ~4 a token
    assert lines[-1] == "1 older run: %cortex runs --limit 3 shows it."


def test_a_search_highlights_where_it_matched_and_escapes_everything(
    ip: InteractiveShell, shown: list[Any]
) -> None:
    hostile = script(ip, HOSTILE)
    script(ip, "<response>no match here</response>")
    ip.run_line_magic("cortex", "runs weather")
    html = html_of(shown)
    assert re.findall(r'<tr data-run="([0-9a-f]+)">', html) == [hostile.id]
    assert re.search(r"<mark[^>]*>weather</mark>", html)
    # model text is untrusted: no tag or attribute of its own reaches the page, not even
    # a <mark> (the one mark is where "weather" matched)
    tags = Tags()
    tags.feed(html)
    assert {tag for tag, _ in tags.seen} <= {
        "style", "div", "table", "thead", "tbody", "tr", "th", "td", "code", "mark", "b", "span",
    }  # fmt: skip
    assert not [a for _, attrs in tags.seen for a in attrs if a.startswith("on")]
    assert [tag for tag, _ in tags.seen].count("mark") == 1
    assert "&lt;/mark&gt;" in html and "&lt;script&gt;" in html


class Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, list[str]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.seen.append((tag, [name for name, _ in attrs]))


def test_runs_convert_to_a_dataframe(ip: InteractiveShell, shown: list[Any]) -> None:
    pd = pytest.importorskip("pandas")
    run = script(ip, SCRIPT)
    rows = cortex_jupyter.runs()
    frame = rows.to_pandas()
    assert list(frame["id"]) == [run.id]
    assert frame.loc[0, "title"] == "Checking the weather in Paris before the picnic."
    assert bool(frame.loc[0, "estimated"]) and frame.loc[0, "tokens"] > 0
    assert list(pd.DataFrame(rows)["id"]) == [run.id]


def test_a_script_found_by_its_words_is_marked_in_its_words_not_its_tags(
    ip: InteractiveShell, shown: list[Any]
) -> None:
    script(ip, SCRIPT)
    ip.run_line_magic("cortex", "runs weather")
    html = html_of(shown)
    assert re.search(r"Checking the <mark[^>]*>weather</mark> in Paris", html)
    assert "&lt;thought" not in html and "thought&gt;" not in html


def test_a_script_found_only_in_its_actions_names_the_action_not_its_protocol(
    ip: InteractiveShell, shown: list[Any]
) -> None:
    script(
        ip,
        "<thought>Planning a weekend in Lisbon.</thought>\n"
        '<action id="w">{"name": "get_forecast", "parameters": {"city": "Lisbon"}}</action>\n'
        "<response>Sunny.</response>",
    )
    ip.run_line_magic("cortex", "runs forecast")
    html = html_of(shown)
    assert re.search(
        r"Planning a weekend in Lisbon\. .*action get_<mark[^>]*>forecast</mark>", html
    )
    for protocol in ("thought&gt;", "&lt;action", "&quot;name&quot;", "&quot;parameters"):
        assert protocol not in html, protocol


LATER = "ghp_abc_defghijklmnop1234"  # a token stored before it was set in the environment


@pytest.mark.parametrize("words", ["weather", "abc"])
def test_a_search_never_shows_a_secret_set_after_the_run_was_stored(
    ip: InteractiveShell,
    shown: list[Any],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    words: str,
) -> None:
    plain = script(ip, f"Read the weather with {LATER} please.")  # a prompt cortex ran
    found = script(ip, f"<response>weather {LATER} here</response>")
    cortex_jupyter.runs()  # the store has written them (a later write redacts anew)
    monkeypatch.setenv("LATER_TOKEN", LATER)  # %env: redaction reads it afresh
    capsys.readouterr()
    ip.run_line_magic("cortex", f"runs {words}")
    ip.run_line_magic("cortex", f"runs {words} --text")
    html, printed = html_of(shown), capsys.readouterr().out
    assert found.id in html and found.id in printed
    for text in (html, printed):
        # the whole token, and the part of it a search marked
        # ("ghp_[abc]_defgh...")
        assert "defghijklmnop" not in text and "[redacted]" in text
    del plain


def test_a_script_found_by_words_with_punctuation_marks_them_in_its_words(
    ip: InteractiveShell, shown: list[Any]
) -> None:
    run = script(ip, "<response>The weather in Paris, tomorrow.</response>")
    ip.run_line_magic("cortex", "runs weather* Paris,")
    row = cortex_jupyter.runs("weather* Paris,")[0]
    assert row.id == run.id and row.snippet is not None
    assert row.snippet.field == "prompt" and "actions" not in str(row.snippet)
    assert str(row.snippet) == "The [weather] in [Paris], tomorrow."


@pytest.mark.parametrize(
    ("script_text", "words"),
    [
        ("§THINK: Written in sigil. §RESPOND: Hello from sigil. §END:", "Written in sigil. Hello"),
        ('One sum. <execute>[{"name": "add", "args": {"a": 4}}]</execute>', "One sum."),
        ('<action id="cut">{"name": "echo", "parameters": {"value": 1}', "(no text)"),
        ("<thought>Hmm.</thought><response>Yes.</response>", "Hmm. Yes."),
    ],
)
def test_a_script_in_any_dialect_shows_its_words_never_its_protocol(
    script_text: str, words: str
) -> None:
    from cortex_jupyter.display.listing import prompt_words

    shown = prompt_words(script_text, script=True)
    assert shown.startswith(words)
    for protocol in ("<", "§", "{", "execute"):
        assert protocol not in shown, shown
