"""The static snapshot left in a saved notebook, and the run's output metadata."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser

import pytest

from cortex_jupyter.display import endpoint_host, run_metadata, static_html, static_text

from .helpers import finished_run


def test_static_html_holds_graph_details_and_rendered_response() -> None:
    html = static_html(finished_run(), values={"cats": "many cats"})
    assert "<svg" in html and 'data-id="a3"' in html
    assert "ValueError: no model" in html  # the details list
    assert "<h1>Cats and dogs</h1>" in html
    assert "<strong>many cats</strong>" in html
    assert "<details" in html and "Thought (" in html
    assert "<script" not in html.lower() and "<style" not in html.lower()
    fetched = html.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "http://" not in fetched and "https://" not in fetched  # nothing to load


class _FixedColours(HTMLParser):
    """Elements whose text colour is a fixed light-theme colour with no fill of their own
    or around them: dark text that would vanish on a dark background (VS Code)."""

    VOID = frozenset(("br", "hr", "img", "input", "meta", "wbr", "col", "area", "source"))
    FIXED = re.compile(r"(?:^|;)\s*color:\s*#(?:1f2328|59636e)", re.IGNORECASE)

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[tuple[str, bool]] = []  # (tag, on a fill)
        self.bad: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        style = dict(attrs).get("style") or ""
        filled = any(on for _, on in self.stack) or "background" in style or tag == "svg"
        if self.FIXED.search(style) and not filled:
            self.bad.append(f"<{tag} style={style[:60]!r}>")
        if tag not in self.VOID:
            self.stack.append((tag, filled))

    def handle_endtag(self, tag: str) -> None:
        while self.stack:
            if self.stack.pop()[0] == tag:
                break


def test_the_static_copy_reads_in_a_dark_theme() -> None:
    """VS Code shows the static copy on its own background: text without a fill takes
    the theme's colour (light-theme colours only as the fallback), and the details list
    sits on a light fill like the live view's."""
    html = static_html(finished_run(), values={"cats": "many cats"})
    checker = _FixedColours()
    checker.feed(html)
    assert checker.bad == []
    assert "var(--vscode-foreground,#1f2328)" in html
    assert re.search(r"background:#fbeee5[^>]*>\s*<ul[^>]*>.*ValueError: no model", html, re.S)


def test_static_text_is_the_text_summary() -> None:
    text = static_text(finished_run())
    assert text.startswith("cortex · test-model · done")
    assert "# Cats and dogs" in text


def test_run_metadata_is_json_with_relative_times() -> None:
    meta = run_metadata(finished_run(), "https://user:sk-secret@api.example.com:8443/v1?key=k")
    json.dumps(meta, allow_nan=False)
    assert meta["model"] == "test-model"
    assert meta["endpoint"] == "api.example.com:8443"
    assert meta["status"] == "done"
    a1 = meta["actions"][0]
    assert (a1["id"], a1["status"], a1["duration"]) == ("a1", "done", 0.3)
    assert 0 < a1["started"] < 10
    assert "sk-secret" not in json.dumps(meta)


@pytest.mark.parametrize(
    ("endpoint", "host"),
    [
        ("http://localhost:11434/v1", "localhost:11434"),
        ("https://key:secret@proxy.example.org/openai", "proxy.example.org"),
        ("api.openai.com", "api.openai.com"),
        ("", None),
        (None, None),
        ("http://[::1]:8000", "::1:8000"),
    ],
)
def test_endpoint_host_drops_credentials_and_path(endpoint: str | None, host: str | None) -> None:
    assert endpoint_host(endpoint) == host
