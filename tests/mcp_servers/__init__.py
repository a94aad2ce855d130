"""MCP servers the MCP tests start as real subprocesses (stdio and streamable HTTP), and
the setup those tests share: where the demo server is, starting it over HTTP, finding
its processes and waiting for something to happen."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil
import pytest

#: The demo server (``python demo.py`` over stdio, ``--http PORT`` over HTTP).
DEMO = str(Path(__file__).resolve().parent / "demo.py")


def processes(tag: str) -> list[psutil.Process]:
    """Our descendant processes whose command line holds ``tag``."""
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if tag in child.cmdline() and child.status() != psutil.STATUS_ZOMBIE:
                found.append(child)
        except psutil.Error:  # it ended while we looked
            pass
    return found


def wait_until(condition: Callable[[], bool], what: str, patience: float = 15.0) -> None:
    deadline = time.monotonic() + patience
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"still waiting, after {patience:g} s, for {what}")
        time.sleep(0.05)


@contextmanager
def demo_over_http(token: str, patience: float = 15.0) -> Iterator[str]:
    """The demo server over streamable HTTP on a free port, wanting ``Bearer token``:
    its url, once it listens; it is stopped after."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(
        [sys.executable, DEMO, "--http", str(port)],
        env={**os.environ, "DEMO_TOKEN": token},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def answers() -> bool:
        if process.poll() is not None:
            pytest.fail(f"the demo HTTP server exited with {process.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        except OSError:
            return False
        return True

    try:
        wait_until(answers, "the demo HTTP server to listen", patience)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(timeout=10)
