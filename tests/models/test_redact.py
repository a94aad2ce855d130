"""What servers echo is cleaned of keys; endpoints are shown without credentials or paths."""

from __future__ import annotations

import pytest

from cortex_jupyter.models._redact import endpoint_of, host_port, redact

KEY = "sk-proj-Ab12cd34EF56gh78IJ90kl12MN34op56QR78st90wxyz"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # OpenAI's 401 body: the key masked, its ends visible.
        (
            "Incorrect API key provided: sk-proj-Ab**********wxyz. You can find your API key",
            "Incorrect API key provided: [redacted]. You can find your API key",
        ),
        ("key sk-abc...wxyz refused", "key [redacted] refused"),
        ("key abcd1234…wxyz refused", "key [redacted] refused"),
        ("Authorization: Bearer abc.def.ghi", "Authorization: [redacted]"),
        ('{"authorization": "Bearer xyz"}', '{"authorization": "[redacted]"}'),
        ("api_key=hunter2hunter2 was sent", "api_key=[redacted] was sent"),
        ("got bearer tok3n", "got Bearer [redacted]"),
        (f"the key {KEY} is wrong", "the key [redacted] is wrong"),
        # What is not key-like stays as it was.
        ("model 'gpt-4o' not found... try again", "model 'gpt-4o' not found... try again"),
        ("the value is none", "the value is none"),
        ("a risk-free task-based sketch", "a risk-free task-based sketch"),
    ],
)
def test_redact(text: str, expected: str) -> None:
    assert redact(text, KEY) == expected


def test_the_keys_visible_ends_are_redacted_wherever_they_appear() -> None:
    cleaned = redact(f"prefix {KEY[:10]}XXXX and suffix XXXX{KEY[-4:]}", KEY)
    assert KEY[:8] not in cleaned
    assert KEY[-4:] not in cleaned


def test_a_placeholder_key_is_not_a_secret() -> None:
    assert redact("none of these", "none") == "none of these"


@pytest.mark.parametrize(
    ("url", "endpoint"),
    [
        ("https://api.openai.com/v1", "https://api.openai.com:443"),
        ("http://localhost:11434/v1", "http://localhost:11434"),
        ("http://user:secret@host.test/v1?key=1#x", "http://host.test:80"),
        ("http://[::1]:8000/v1", "http://[::1]:8000"),
        ("HTTP://Example.TEST/v1", "http://example.test:80"),
        ("localhost:11434/v1", "(invalid URL)"),
        ("http://host:notaport/v1", "(invalid URL)"),
    ],
)
def test_endpoint_of(url: str, endpoint: str) -> None:
    assert endpoint_of(url) == endpoint


def test_host_port() -> None:
    assert host_port("http://user:pw@127.0.0.1:9/v1") == "127.0.0.1:9"
