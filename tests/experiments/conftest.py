"""Fixtures for the experiments tests: the anyio backend."""

from __future__ import annotations

import pytest


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
