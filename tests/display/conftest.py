"""Fixtures for the display tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def secret(monkeypatch: pytest.MonkeyPatch) -> str:
    """An API key set in the environment, so that redaction knows it; the key."""
    key = "sk-qz-KEYVALUEghijkmnopqrstuvw"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    return key
