"""``%cortex trace phoenix`` starts Phoenix as a child process: it never outlives the
kernel, whether the kernel exits or is killed (Jupyter kills a kernel that does not
answer its shutdown; nothing of the kernel's own runs then).

A stand-in server plays Phoenix (it answers as Phoenix does where it is asked and writes
its process id to a file), so no real Phoenix is started.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

STAND_IN = """\
import os, sys
from http.server import BaseHTTPRequestHandler, HTTPServer
open(sys.argv[1], "w").write(str(os.getpid()))
class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args): pass
    def do_GET(self):
        self.send_response(200); self.send_header("Content-Length", "6"); self.end_headers()
        self.wfile.write(b"20.0.0")
HTTPServer(("127.0.0.1", int(os.environ["PHOENIX_PORT"])), Handler).serve_forever()
"""

KERNEL = """\
import os, signal, socket, sys
from cortex_jupyter.runtime.integrations.tracing import setup
setup.SERVER = (sys.argv[1], sys.argv[2])
with socket.socket() as s:
    s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]
print(setup.start_phoenix(port), flush=True)
if sys.argv[3] == "killed":
    os.kill(os.getpid(), signal.SIGKILL)
"""


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (exited, not yet reaped by its parent) is not running
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(")")[-1].split()[0] == "Z")


@pytest.mark.skipif(not Path("/proc").exists(), reason="reads /proc to tell a zombie")
@pytest.mark.parametrize("end", ["exits", "killed"])
def test_the_phoenix_it_started_ends_with_the_kernel(tmp_path: Path, end: str) -> None:
    stand_in = tmp_path / "phoenix_stand_in.py"
    stand_in.write_text(STAND_IN, encoding="utf-8")
    pid_file = tmp_path / "pid"
    env = dict(os.environ, PYTHONPATH=str(ROOT), PHOENIX_WORKING_DIR=str(tmp_path))
    kernel = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(KERNEL), str(stand_in), str(pid_file), end],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert "Phoenix started at http://127.0.0.1:" in kernel.stdout, kernel.stderr
    assert kernel.returncode == (-signal.SIGKILL if end == "killed" else 0), kernel.stderr
    pid = int(pid_file.read_text())
    deadline = time.monotonic() + 60  # (a generous bound on ending, not a speed goal)
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if alive(pid):
        os.kill(pid, signal.SIGKILL)
        pytest.fail(f"the Phoenix the kernel started outlived it ({end})")
