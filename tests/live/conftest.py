"""The live model for tests/live: llama-server with SmolLM2-135M, built once into the cache
(``cortex_jupyter.local``) and started once for the whole session.

Without the built server (``python -m cortex_jupyter.local build``), cmake, a compiler or the
model package the live tests skip, saying why, except on CI
(``CI=true``), where they fail: a missing build tool must not pass unnoticed.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from IPython.core.interactiveshell import InteractiveShell

from cortex_jupyter import local
from cortex_jupyter.session import session_for

#: The tests' own server, apart from one a user started (``name="default"``).
NAME = "tests"


def unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"the live model server is needed on CI: {reason}", pytrace=False)
    pytest.skip(f"no live model server: {reason}")


@pytest.fixture(scope="session")
def live_server() -> Iterator[local.Server]:
    if not local.server_binary().is_file():
        # Not built here: the build takes 5 to 25 minutes on 2 cores, longer than a test's
        # timeout, so it happens before pytest (scripts/_local.sh), never inside it.
        unavailable(
            "llama-server is not built; build it once with `python -m cortex_jupyter.local "
            "build` (or ensure_local_model in scripts/_local.sh)"
        )
    try:
        local.ensure_built()
        server = local.start(name=NAME)
    except local.LocalServerError as exc:
        unavailable(str(exc))
    yield server
    local.stop(NAME)


@pytest.fixture
def live_ip(ip: InteractiveShell, live_server: local.Server) -> InteractiveShell:
    """The shell with ``--model smollm2`` answered by the live server (what
    ``%cortex local start`` sets up), and no OpenAI variables to lean on."""
    session_for(ip).endpoints[live_server.model] = (live_server.base_url, "local")
    return ip
