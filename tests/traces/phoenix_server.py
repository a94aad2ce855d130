"""A local Phoenix server for the trace tests and the docs' screenshot: its working
directory in a temp folder, free ports for HTTP and gRPC, bound to 127.0.0.1.

Start-up is slow (it creates its SQLite database and runs its migrations; ~10 s on an
idle 2-core machine, 30 s on a busy one): one server is shared by a test module.
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


@contextlib.contextmanager
def phoenix_server(folder: Path) -> Iterator[Phoenix]:
    """A Phoenix server working in ``folder``, stopped (and waited for) afterwards."""
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
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_until_up(process, url, folder / "server.log")
        yield Phoenix(url, time.monotonic() - started)
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


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
