"""Fixtures for the model tests: the anyio backend, a fake OpenAI server, a clean env."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .fake_openai_server import FakeOpenAIServer, serve

# Variables the openai SDK (or httpx under it) reads: none of the developer's may leak
# into a test, and no proxy may stand between the tests and 127.0.0.1.
_ENVIRONMENT = (
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "OPENAI_ADMIN_KEY",
    "OPENAI_ORG_ID",
    "OPENAI_PROJECT_ID",
    "OPENAI_CUSTOM_HEADERS",
    "OPENAI_LOG",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    yield from serve()
