"""The static snapshot left in a saved notebook, and the run's output metadata."""

from __future__ import annotations

import base64
import json
import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser

import pytest

from cortex_jupyter.display import endpoint_host, run_metadata, static_html, static_text
from cortex_jupyter.display.static import (
    STATIC_CLASS,
    SWITCH_CSS,
    WIDGET_MIME,
    picture_uri,
    saved_copy,
)

from .helpers import finished_run


def pictures(html: str) -> list[str]:
    """The SVG text of every ``data:image/svg+xml`` picture in ``html``."""
    found = re.findall(r'src="data:image/svg\+xml;base64,([^"]+)"', html)
    return [base64.b64decode(encoded).decode("utf-8") for encoded in found]


def test_static_html_holds_graph_details_and_rendered_response() -> None:
    html = static_html(finished_run(), values={"cats": "many cats"})
    # The graph is a picture (sanitizers strip inline <svg>, and keep an <img> data URI).
    assert "<svg" not in html
    (graph,) = pictures(html)
    assert graph.startswith("<svg") and 'data-id="a3"' in graph
    assert '<img class="cortex-graph"' in html and 'alt="action graph: ' in html
    # Every action as text too, with what the inspector would show.
    assert "<b>search</b> (a1)" in html and "<b>compare</b> (a3)" in html
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
    # the failure is in its action's row, once: no callout repeats it (issue 37)
    assert re.search(r'class="cortex-actions".*ValueError: no model', html, re.S)
    assert not re.search(r"background:#fbeee5[^>]*>\s*<ul", html)


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


def test_a_finished_run_leaves_the_view_and_a_static_copy_apart() -> None:
    widget = {"version_major": 2, "version_minor": 0, "model_id": "abc"}
    saved = saved_copy(finished_run(), {"cats": "many cats"}, widget=widget)
    live, live_meta = saved.live
    # The view's own output: the widget, and nothing else a renderer could show.
    assert live == {WIDGET_MIME: widget, "text/plain": ""}
    assert live_meta["cortex"]["status"] == "done"
    json.dumps(live_meta, allow_nan=False)
    # The copy: no widget, so every renderer shows its HTML or its text.
    data, _ = saved.static
    assert set(data) == {"text/html", "text/plain"}
    assert data["text/html"].startswith(f"<style>{SWITCH_CSS}</style>")
    assert f'class="{STATIC_CLASS} cortex-run"' in data["text/html"]
    assert "# Cats and dogs" in data["text/plain"]
    # Once the view is closed, its output shows nothing at all.
    closed = saved_copy(finished_run(), widget=None)
    assert closed.live[0] == {"text/plain": ""}


def test_the_switch_is_one_valid_rule_per_case() -> None:
    """One invalid selector drops its whole rule, and ``:has()`` may not nest."""
    rules = SWITCH_CSS.split("}")
    assert rules.pop() == "" and len(rules) == 5
    for rule in rules:
        selector, body = rule.split("{")
        assert body == "display:none"
        for inner in re.findall(r":has\(((?:[^()]|\([^()]*\))*)\)", selector):
            assert ":has(" not in inner, selector


def test_secrets_are_redacted_inside_the_picture(monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "sk-test-picture-secret-1234567890"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    state = finished_run()
    state.nodes["a1"].name = f"search {secret}"
    html = static_html(state)
    assert secret not in html
    assert all(secret not in svg for svg in pictures(html))
    assert secret not in base64.b64decode(picture_uri(f"<svg>{secret}</svg>")[26:]).decode()


def test_printed_text_cut_to_its_tail_keeps_no_part_of_a_secret(secret: str) -> None:
    state = finished_run()
    state.nodes["a3"].stdout = secret + "." * 780 + "\ndone"  # its last 800 cut the key
    shown = static_html(state) + static_text(state)
    assert [secret[-n:] for n in range(4, len(secret)) if secret[-n:] in shown] == []
    assert "." * 700 in shown  # (the tail is shown)


class _Tags(HTMLParser):
    """Counts ``<img>`` elements and collects event-handler attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.images = 0
        self.bad: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.images += tag == "img"
        self.bad += [f"{tag} {name}" for name, _ in attrs if name.lower().startswith("on")]
        if tag in ("script", "iframe", "svg"):
            self.bad.append(tag)


SVG_TAGS = {"svg", "defs", "marker", "path", "g", "title", "rect", "text", "line", "style"}


@pytest.mark.parametrize(
    "payload", ["<script>alert(1)</script>", '"><svg onload=alert(1)>', "</title><img src=x>"]
)
def test_model_text_stays_text_in_the_picture_and_around_it(payload: str) -> None:
    state = finished_run()
    for node in state.nodes.values():
        node.name = node.error = node.output = payload
    html = static_html(state)
    assert "<script" not in html.lower()
    tags = _Tags()
    tags.feed(html)
    assert tags.bad == []
    assert tags.images == 1  # the graph's own picture, nothing the model wrote
    (graph,) = pictures(html)
    for element in ET.fromstring(graph).iter():
        assert element.tag.rsplit("}", 1)[-1] in SVG_TAGS, element.tag
        assert not any(name.lower().startswith("on") for name in element.attrib)
