"""The static snapshot left in a saved notebook, and the run's output metadata."""

from __future__ import annotations

import json

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
