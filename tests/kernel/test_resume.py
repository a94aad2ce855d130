"""A run whose kernel is killed (SIGKILL) in the middle, resumed from the store in a new one.

Two kernels run the same two-action cell against one store at once, their model a fake
OpenAI server in this process (it counts requests). Kernel A is killed while its run's
second action runs; kernel B's run goes on and ends. A new kernel C lists A's run, resumes
it: the first action's tool is not called again (the calls are counted in a file), the
model is not asked again for the turn it answered, and the answer, the bindings and the
conversation sent for the next turn are those of the same run uninterrupted. Afterwards
the store shows both runs completed, A's under its own id with its whole history.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import time
from pathlib import Path
from typing import Any

from tests.models.fake_openai_server import FakeOpenAIServer, Stream, finish, texts

from .harness import Kernel

TURN_1 = (
    '<action id="a1">{"name": "kr_first", "parameters": {"x": 3}, "output_key": "kr_one"}'
    "</action>"
    '<action id="a2">{"name": "kr_second", "parameters": {"x": "$kr_one"}, '
    '"output_key": "kr_two"}</action>'
)
TURN_2 = "<response>First $kr_one, then $kr_two.</response>"
CELL = "%%cortex --model fake-model\nDo the two steps."
NODE = re.compile(r'<g class="cxj-node" data-id="([^"]+)" data-status="([^"]+)"')

TOOLS = '''
import pathlib, time
from cortex_jupyter import default_registry
_DIR = pathlib.Path({dir!r})

@default_registry.tool(name="kr_first")
def kr_first(x: int) -> int:
    """Double x."""
    with open(_DIR / "calls", "a") as out:
        out.write("first {tag}\\n")
    return x * 2

@default_registry.tool(name="kr_second")
def kr_second(x: int) -> int:
    """Add one to x (held while the hold file is there)."""
    with open(_DIR / "calls", "a") as out:
        out.write("second {tag}\\n")
    while (_DIR / "hold-{tag}").exists():
        time.sleep(0.02)
    return x + 1
'''


class StoreKernel(Kernel):
    """A kernel writing to the store ``store``, its model the fake server."""

    def __init__(self, base: Path, store: Path, server: FakeOpenAIServer) -> None:
        super().__init__(base)
        self.store, self.server = store, server

    def environment(self) -> dict[str, str]:
        env = super().environment()
        env.update(
            CORTEX_STORE=str(self.store),
            OPENAI_BASE_URL=self.server.url,
            OPENAI_API_KEY="sk-test-kernel-resume-0123456789",
        )
        return env


def reply(text: str) -> Stream:
    return Stream([*texts(text, 11), finish()])


def calls(work: Path) -> list[str]:
    path = work / "calls"
    return path.read_text().split("\n")[:-1] if path.exists() else []


def wait_for(condition: object, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.05)


def stored(store: Path, run_id: str) -> tuple[str, list[tuple[str, str]]]:
    db = sqlite3.connect(store)
    try:
        (status,) = db.execute("SELECT status FROM runs WHERE id = ?", (run_id,)).fetchone()
        events = [
            (kind, json.loads(body).get("status", ""))
            for kind, body in db.execute(
                "SELECT kind, body FROM events WHERE run = ? ORDER BY seq", (run_id,)
            )
        ]
    finally:
        db.close()
    return status, events


def committed_in_a2(store: Path) -> set[str]:
    """The stored runs whose action a2 is recorded as running."""
    if not store.exists():
        return set()
    db = sqlite3.connect(store, timeout=10)
    try:
        rows = db.execute("SELECT run, body FROM events WHERE kind = 'action_status'").fetchall()
    except sqlite3.OperationalError:  # not created yet
        return set()
    finally:
        db.close()
    return {
        run
        for run, body in rows
        if json.loads(body).get("id") == "a2" and json.loads(body).get("status") == "running"
    }


def start(name: str, work: Path, server: FakeOpenAIServer) -> StoreKernel:
    kernel = StoreKernel(work / f"kernel-{name}", work / "runs.db", server).start()
    kernel.execute("%load_ext cortex_jupyter")
    kernel.execute(TOOLS.format(dir=str(work), tag=name))
    return kernel


def kill(kernel: Kernel) -> None:
    os.kill(kernel.pid, signal.SIGKILL)
    assert kernel.km is not None and kernel.kc is not None
    kernel.kc.stop_channels()
    kernel.km.shutdown_kernel(now=True)  # reaps the dead process, frees its files
    kernel.km = kernel.kc = None


def test_a_killed_kernels_run_is_resumed_in_a_new_kernel_while_another_writes(
    tmp_path: Path, server: FakeOpenAIServer
) -> None:
    work = tmp_path
    (work / "hold-A").touch()
    (work / "hold-B").touch()
    first, second = start("A", work, server), start("B", work, server)
    third: StoreKernel | None = None
    try:
        server.script(reply(TURN_1), reply(TURN_1), reply(TURN_2))
        assert first.kc is not None and second.kc is not None
        first.kc.execute(CELL)
        b_cell = second.kc.execute(CELL)
        # Both runs are in their second action, writing to the store at once.
        wait_for(lambda: {"second A", "second B"} <= set(calls(work)), "both second actions")
        # Killed once the store holds both runs in their second action (it commits within
        # half a second): what a run had done by then is on disk.
        wait_for(lambda: len(committed_in_a2(work / "runs.db")) == 2, "both runs committed")
        kill(first)
        (work / "hold-B").unlink()
        second.listen(
            60,
            until=lambda m: (
                m.raw["parent_header"].get("msg_id") == b_cell
                and m.content.get("execution_state") == "idle"
            ),
        )
        assert len(server.requests) == 3  # A's turn 1, B's turns 1 and 2

        third = start("C", work, server)
        db = sqlite3.connect(work / "runs.db")
        rows = db.execute("SELECT id, status FROM runs ORDER BY started").fetchall()
        db.close()
        assert len(rows) == 2 and {status for _, status in rows} == {"running", "completed"}
        (killed,) = [run_id for run_id, status in rows if status == "running"]
        listed = third.execute("%cortex runs --text").stream("stdout")
        assert killed in listed

        server.script(reply(TURN_2))
        before = calls(work)
        # a2 runs again held until the view has drawn it once: the first picture of a2 is
        # then the one from before it ran again, whatever the machine's speed.
        hold = work / "hold-C"
        hold.touch()

        def release(message: Any) -> None:
            value = getattr(message, "state", {}).get("value")
            if hold.exists() and isinstance(value, str) and 'data-id="a2"' in value:
                hold.unlink()

        shown = third.execute(f"%cortex resume {killed}", on_message=release)
        assert calls(work)[len(before) :] == ["second C"]  # a1 restored, a2 run again
        assert len(server.requests) == 4  # only the turn never answered
        # The view: a1 done from its first frame on (restored), a2 running again to done
        # (the graph sends the nodes that changed after its first picture).
        frames = [dict(NODE.findall(svg)) for _, svg in shown.part_values("cortex-graph")]
        frames = [frame for frame in frames if frame]
        assert frames[0]["a1"] == "done"
        assert {frame["a1"] for frame in frames if "a1" in frame} == {"done"}
        a2 = [frame["a2"] for frame in frames if "a2" in frame]
        assert a2[0] != "done" and a2[-1] == "done", a2  # as it was when killed, then again
        resumed_sent = server.requests[-1].json["messages"][1:]
        resumed = (
            third.evaluate("_cortex.id"),
            third.evaluate("_cortex.status"),
            third.evaluate("_cortex.answer"),
            third.evaluate("(kr_one, kr_two)"),
        )

        # The same cell, uninterrupted, in the same kernel.
        third.execute("%cortex reset")
        server.script(reply(TURN_1), reply(TURN_2))
        third.execute(CELL)
        whole = (
            third.evaluate("_cortex.status"),
            third.evaluate("_cortex.answer"),
            third.evaluate("(kr_one, kr_two)"),
        )
        assert resumed == (repr(killed), *whole)
        assert whole[1] == "'First 6, then 7.'"
        assert resumed_sent == server.requests[-1].json["messages"][1:]

        status, events = stored(work / "runs.db", killed)
        assert status == "completed"
        kinds = [kind for kind, _ in events]
        assert kinds.count("turn") == 2 and kinds[-1] == "end"
        # a2's statuses: pending and running before the kill, then again, done.
        assert ("action_status", "done") in events
        assert all(status == "completed" for _, status in db_runs(work / "runs.db"))
    finally:
        for kernel in (first, second, third):
            if kernel is not None and kernel.km is not None:
                kernel.stop()


def db_runs(store: Path) -> list[tuple[str, str]]:
    db = sqlite3.connect(store)
    try:
        return db.execute("SELECT id, status FROM runs").fetchall()
    finally:
        db.close()
