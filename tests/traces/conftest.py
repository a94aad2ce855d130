"""The Phoenix server of tests/traces/test_phoenix.py starts as soon as the session has
collected that test (its start-up takes half a minute or more), so it comes up while the
tests before it run; the test's fixture waits for it and stops it. (Under pytest-xdist the
fixture starts it: each worker collects every test.) Stopped at the
session's end too, if the test never ran (``-x``, a deselection)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from tests.traces.phoenix_server import Starting, installed, start

EARLY = pytest.StashKey[Starting]()


def pytest_collection_finish(session: pytest.Session) -> None:
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return  # every worker collects every test, and only one runs it: started when needed
    wanted = any(item.nodeid.startswith("tests/traces/test_phoenix.py") for item in session.items)
    if wanted and installed() and not session.config.option.collectonly:
        session.config.stash[EARLY] = start(Path(tempfile.mkdtemp(prefix="phoenix-")))


def pytest_sessionfinish(session: pytest.Session) -> None:
    early = session.config.stash.get(EARLY, None)
    if early is not None:
        early.stop()
