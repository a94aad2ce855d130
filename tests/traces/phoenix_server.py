"""A local Phoenix server for the trace tests and the docs' screenshot: its working
directory in a temp folder, free ports for HTTP and gRPC, bound to 127.0.0.1.

Start-up is slow (its import alone takes ~30 s on a 2-core machine, then it creates its
SQLite database and runs its migrations): one server is shared by a test module, and
``tests/traces/conftest.py`` starts it (``start``) as soon as the session has collected
the Phoenix test, so it comes up while the tests before it run.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

#: The longest start-up waited for before the server counts as broken.
PATIENCE = 600.0
INSTALL = "pip install arize-phoenix"


def installed() -> bool:
    return importlib.util.find_spec("phoenix") is not None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class Phoenix:
    url: str
    seconds_to_start: float

    @property
    def traces(self) -> str:
        """The OTLP/HTTP endpoint spans are sent to."""
        return f"{self.url}/v1/traces"


@dataclass
class Starting:
    """A Phoenix server process on its way up (``start``)."""

    process: subprocess.Popen[bytes]
    url: str
    folder: Path
    started: float
    log: IO[bytes]

    def stop(self) -> None:
        """Stop the server and wait for it (a second stop does nothing)."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()


def start(folder: Path) -> Starting:
    """Start a Phoenix server working in ``folder``, without waiting for it."""
    port, grpc = free_port(), free_port()
    env = dict(
        os.environ,
        PHOENIX_WORKING_DIR=str(folder),
        PHOENIX_PORT=str(port),
        PHOENIX_GRPC_PORT=str(grpc),
        PHOENIX_HOST="127.0.0.1",
    )
    log = (folder / "server.log").open("wb")
    started = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, "-W", "ignore", "-m", "phoenix.server.main", "serve"],
        env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    return Starting(process, f"http://127.0.0.1:{port}", folder, started, log)


@contextlib.contextmanager
def phoenix_server(folder: Path, early: Starting | None = None) -> Iterator[Phoenix]:
    """A Phoenix server working in ``folder`` (or the one ``early`` started), once it
    answers; stopped (and waited for) afterwards."""
    server = early if early is not None else start(folder)
    try:
        _wait_until_up(server.process, server.url, server.folder / "server.log")
        yield Phoenix(server.url, time.monotonic() - server.started)
    finally:
        server.stop()


def _wait_until_up(process: subprocess.Popen[bytes], url: str, log: Path) -> None:
    deadline = time.monotonic() + PATIENCE
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = log.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"Phoenix exited ({process.returncode}) while starting:\n{tail}")
        with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=2) as reply:
            if reply.status == 200:
                return
        time.sleep(0.5)
    raise RuntimeError(f"Phoenix did not answer at {url} within {PATIENCE:.0f} s")
