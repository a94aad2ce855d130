"""What the MCP tests share: the demo server's path, finding its processes, waiting for
something a process does on its own, and the demo server over streamable HTTP."""

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

DEMO = str(Path(__file__).resolve().parent / "demo.py")
#: A server whose parameters are declared with anyOf, null and $ref (typed.py).
TYPED = str(Path(__file__).resolve().parent / "typed.py")
#: Longest wait for something that happens on its own (a process exits, a list changes).
PATIENCE = 20.0


def processes(tag: str, *, anywhere: bool = False) -> list[psutil.Process]:
    """Our descendant processes (with ``anywhere``, any process on the machine) whose
    command line holds ``tag``."""
    found = []
    pool = psutil.process_iter() if anywhere else psutil.Process().children(recursive=True)
    for process in pool:
        try:
            if tag in process.cmdline() and process.status() != psutil.STATUS_ZOMBIE:
                found.append(process)
        except psutil.Error:  # it ended while we looked
            pass
    return found


def wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + PATIENCE
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"still waiting, after {PATIENCE:g} s, for {what}")
        time.sleep(0.05)


@contextmanager
def demo_http(token: str) -> Iterator[str]:
    """The demo server over streamable HTTP on a free port, wanting ``token``; its URL."""
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
        wait_until(answers, "the demo HTTP server to listen")
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(timeout=10)
