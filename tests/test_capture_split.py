"""A secret a tool writes in pieces (issue 33 §2): ``sys.stdout.write(secret[:k])``, then
the rest a moment later (so the run's flusher sends the first piece on its own), on
stdout and on stderr. The run store's files (every table as ``iterdump`` writes it, and
the raw bytes of the file, its -wal and -shm), ``_cortex.to_jsonl()``, ``%cortex save``,
the node's ``.stdout`` / ``.stderr`` and the cell's output hold no six characters of it,
wherever the writes cut it; what the tool printed around it is all there."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from cortex_jupyter import default_registry
from cortex_jupyter.runtime.scheduler.capture import FLUSH_HZ
from tests.helpers import run_and_save

SECRET = "sk-SPLITsecret0123456789abcdefXYZ"
SIZE = 6
_CUT = {"at": 5}
SCRIPT = (
    '<action type="tool" mode="sync" id="w">{"name": "write_in_halves"}</action>'
    "<response>written</response>"
)


def fragments(text: str) -> list[str]:
    return sorted({SECRET[i : i + SIZE] for i in range(len(SECRET) - SIZE + 1)} & _grams(text))


def _grams(text: str) -> set[str]:
    return {text[i : i + SIZE] for i in range(len(text) - SIZE + 1)}


@pytest.fixture
def tool() -> Iterator[None]:
    @default_registry.tool(name="write_in_halves")
    def write_in_halves() -> str:
        """Write the key in two pieces, on stdout and on stderr."""
        cut = _CUT["at"]
        sys.stdout.write("key=" + SECRET[:cut])
        sys.stderr.write("err " + SECRET[:cut])
        time.sleep(4 / FLUSH_HZ)  # the flusher sends what came so far meanwhile
        sys.stdout.write(SECRET[cut:] + " end\n")
        sys.stderr.write(SECRET[cut:] + " end\n")
        return "ok"

    yield
    default_registry.remove("tool", "write_in_halves")


@pytest.mark.parametrize("cut", [1, 5, 16, len(SECRET) - 1])
@pytest.mark.parametrize("display", ["text", "widgets"])
def test_a_key_a_tool_writes_in_two_pieces_is_on_no_surface(
    ip: InteractiveShell,
    tool: None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    cut: int,
    display: str,
) -> None:
    monkeypatch.setenv("DB_PASSWORD", SECRET)
    monkeypatch.setitem(_CUT, "at", cut)
    ip.run_line_magic("config", f"CortexMagics.display = {display!r}")
    with capture_output() as cell:
        run, surfaces = run_and_save(ip, tmp_path, "--script --delay 0", SCRIPT)
    node = run.actions["w"]
    assert node.status == "done"
    assert node.stdout == "key=[redacted] end\n"
    assert node.stderr == "err [redacted] end\n"
    shown = [
        *surfaces,
        ("cell stdout", cell.stdout),
        ("cell stderr", cell.stderr),
        *(("cell output", str(o.data)) for o in cell.outputs),
    ]
    found = {name: fragments(text) for name, text in shown if fragments(text)}
    assert found == {}
    assert "key=[redacted] end" in run.to_jsonl()


@pytest.fixture
def byte_writer() -> Iterator[None]:
    @default_registry.tool(name="write_bytes")
    def write_bytes() -> str:
        """Write the key as bytes, on stdout's and stderr's binary buffers."""
        sys.stdout.buffer.write(f"key={SECRET} café\n".encode())
        sys.stdout.buffer.flush()
        sys.stderr.buffer.write(b"err " + SECRET.encode() + b" end\n")
        return "ok"

    yield
    default_registry.remove("tool", "write_bytes")


def test_what_a_tool_writes_is_not_in_ipythons_output_history(
    ip: InteractiveShell, tool: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """IPython 9 tees each cell's stdout and stderr into its output history
    (``history_manager.outputs``, what ``%history -o`` shows) by setting
    ``sys.stdout.write`` for the cell. What a tool writes inside its action is the
    action's (redacted, on its node), not the cell's: no piece of the key is there (the
    view's redacted lines are the cell's own output); what the cell prints still is."""
    if not hasattr(ip, "_tee"):
        pytest.skip("this IPython keeps no output history")
    monkeypatch.setenv("DB_PASSWORD", SECRET)
    with capture_output():
        ip.run_cell("print('the cell says hi')", store_history=True)
        said = ip.execution_count - 1
        for _ in range(2):  # (in a kernel, from the second cell on: the router is in place)
            ip.run_cell("%%cortex --script --delay 0\n" + SCRIPT, store_history=True)
        ran = ip.execution_count - 1
    run = ip.user_ns["_cortex"]
    assert run.actions["w"].stdout == "key=[redacted] end\n"
    history = ip.history_manager.outputs

    def streams(count: int) -> str:
        return "".join("".join(o.bundle.get("stream", [])) for o in history.get(count, []))

    assert "the cell says hi" in streams(said)
    kept = streams(ran)  # the cell's own output: the text view's lines, redacted
    assert "w | key=[redacted] end" in kept
    assert fragments(kept) == [] and SECRET[: _CUT["at"]] not in kept


#: ``sys.stdout.write`` as a module kept it when a plain cell ran (``write =
#: sys.stdout.write`` at import): set by the ``kept_write`` tool's test.
_KEPT: dict[str, object] = {}


TEXT = "--script --delay 0 --text"


def on_no_surface(
    surfaces: list[tuple[str, str]], cell: pytest.CaptureResult[str]
) -> dict[str, list[str]]:
    """The secret's fragments found on each of the run's saved surfaces and in the cell's
    stdout and stderr (empty: none anywhere)."""
    shown = [*surfaces, ("cell stdout", cell.out), ("cell stderr", cell.err)]
    return {name: fragments(text) for name, text in shown if fragments(text)}


def _tool_script(name: str) -> str:
    return (
        f'<action type="tool" mode="sync" id="w">{{"name": "{name}"}}</action>'
        "<response>written</response>"
    )


@pytest.fixture
def kept_write() -> Iterator[None]:
    @default_registry.tool(name="kept_write")
    def write_through_a_kept_write() -> str:
        """Print the key through a ``sys.stdout.write`` kept from before the run."""
        write = _KEPT.get("write")
        if write is None:  # a first cell: an action ran, the routers are in place
            return "warm"
        assert callable(write)
        write("key=" + SECRET + " end\n")
        return "ok"

    yield
    default_registry.remove("tool", "kept_write")
    _KEPT.clear()


def test_a_write_kept_from_before_the_run_is_captured(
    ip: InteractiveShell,
    kept_write: None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """A module that kept ``sys.stdout.write`` (outside actions: the router itself, or
    IPython's output-history tee over it, once a cortex cell ran) and calls it from a
    tool: the text went to the wrapped stream, past the action's capture and its
    redaction (the key whole in the cell's output and its output history, nothing on the
    node)."""
    monkeypatch.setenv("DB_PASSWORD", SECRET)
    ip.run_cell_magic("cortex", "--script --delay 0 --text", _tool_script("kept_write"))
    ip.run_cell("import sys; from tests.test_capture_split import _KEPT")
    ip.run_cell("_KEPT['write'] = sys.stdout.write")  # (in a kernel: a module imported)
    run, surfaces = run_and_save(ip, tmp_path, TEXT, _tool_script("kept_write"))
    node = run.actions["w"]
    assert node.status == "done"
    assert node.stdout == "key=[redacted] end\n"
    assert on_no_surface(surfaces, capfd.readouterr()) == {}
    history = ip.history_manager.outputs.values()
    kept = "".join("".join(o.bundle.get("stream", [])) for outs in history for o in outs)
    assert fragments(kept) == []
    n = _KEPT["write"]("outside\n")  # type: ignore[operator]
    assert n == len("outside\n") and "outside\n" in capfd.readouterr().out


@pytest.fixture
def threaded() -> Iterator[None]:
    from concurrent.futures import ThreadPoolExecutor

    @default_registry.tool(name="threaded")
    def print_from_threads() -> str:
        """Print the key from a thread it starts and from a thread pool's worker."""
        thread = threading.Thread(target=lambda: print("thread", SECRET))
        thread.start()
        thread.join()
        with ThreadPoolExecutor(2) as pool:
            pool.submit(lambda: sys.stderr.write(f"pool {SECRET}\n")).result()
        return "ok"

    yield
    default_registry.remove("tool", "threaded")


@pytest.mark.parametrize(
    ("writer", "name", "stdout", "stderr"),
    [
        ("byte_writer", "write_bytes", "key=[redacted] café\n", "err [redacted] end\n"),
        ("threaded", "threaded", "thread [redacted]\n", "pool [redacted]\n"),
    ],
    ids=["bytes", "own threads"],
)
def test_a_key_a_tool_writes_past_sys_stdout_write_is_its_actions_and_redacted(
    ip: InteractiveShell,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
    writer: str,
    name: str,
    stdout: str,
    stderr: str,
) -> None:
    """Bytes on ``sys.stdout.buffer`` / ``sys.stderr.buffer`` (the wrapped stream's own),
    and text printed from a ``threading.Thread`` or a ``ThreadPoolExecutor`` the tool
    started (outside the action's context): both skipped the action's capture and its
    redaction, so the key reached the cell's output whole and the node kept nothing."""
    request.getfixturevalue(writer)
    monkeypatch.setenv("DB_PASSWORD", SECRET)
    run, surfaces = run_and_save(ip, tmp_path, TEXT, _tool_script(name))
    node = run.actions["w"]
    assert node.status == "done"
    assert (node.stdout, node.stderr) == (stdout, stderr)
    assert on_no_surface(surfaces, capfd.readouterr()) == {}


def test_a_thread_pool_made_in_an_action_serves_plain_cells_as_before(
    ip: InteractiveShell, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """A pool whose threads an action started: a task a plain cell submits later prints
    into that cell, not into the action that happened to start the thread."""
    from concurrent.futures import ThreadPoolExecutor

    pool = ThreadPoolExecutor(1)
    monkeypatch.setitem(_KEPT, "pool", pool)

    @default_registry.tool(name="warm_pool")
    def warm_pool() -> str:
        """Start the pool's thread."""
        return str(pool.submit(lambda: "warm").result())

    try:
        ip.run_cell("from tests.test_capture_split import _KEPT")
        ip.run_cell_magic("cortex", "--script --delay 0 --text", _tool_script("warm_pool"))
        capfd.readouterr()
        ip.run_cell("_KEPT['pool'].submit(print, 'from the pool').result()")
    finally:
        default_registry.remove("tool", "warm_pool")
        pool.shutdown()
    assert "from the pool" in capfd.readouterr().out
    assert ip.user_ns["_cortex"].actions["w"].stdout == ""
