"""The types of the fixtures in tests/runtime/conftest.py, for test signatures."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cortex_jupyter.protocol.events import ActionReady

Act = Callable[..., ActionReady]  # the ``act`` fixture: an action event as the parser emits it
RunEvents = Callable[..., Any]  # the ``run_events`` fixture: ``await run_events(events)`` -> Run
