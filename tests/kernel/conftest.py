"""Fixtures for the real-kernel tests: one ipykernel (this venv's) for the whole module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .harness import Kernel

# Two tools the cells call: a slow one that binds a value, and one that always fails.
TOOLS = '''
import time
from cortex_jupyter import default_registry

@default_registry.tool(name="kt_slow")
def kt_slow(seconds: float, answer: int = 42) -> int:
    """Sleep, then answer."""
    time.sleep(seconds)
    return answer

@default_registry.tool(name="kt_fail")
def kt_fail(reason: str) -> str:
    """Always fails, after a moment."""
    time.sleep(0.2)
    raise ConnectionError(reason)
'''


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kernel]:
    """A started kernel with ``cortex_jupyter`` loaded and the two tools registered."""
    with Kernel(tmp_path_factory.mktemp("kernel")) as started:
        started.execute("%load_ext cortex_jupyter")
        started.execute(TOOLS)
        yield started
