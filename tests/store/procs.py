"""What the store's process tests run in a process of their own (``python -m tests.store.procs``).

``write DB N TAG``: N runs stored in DB, each printing ``id events``; ``kill DB``: a run
whose first action finishes and whose second never does (it prints ``SECOND RUNNING`` once
the first was surely committed, and waits to be killed); ``open DB ID``: the stored run's
outputs as JSON lines, ``action kind value``.

Through a real IPython shell, in the store ``$CORTEX_STORE`` (the tests' store), the tools
of ``register``: ``hold DIR``: a ``%%cortex --script`` cell (``CELL``) whose second action
holds while ``DIR/hold-holder`` is there (it prints ``SECOND RUNNING ID`` once the first
action's end is committed; more words are the cell's options); ``resume DIR ID``: says
``READY``, then ``%cortex resume ID`` as soon as ``DIR/go`` is there, then ``RESUMED
status`` when it went on (``_cortex`` is that run), else ``REFUSED``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from cortex_jupyter import store
from cortex_jupyter.models import ScriptModel
from cortex_jupyter.runtime import Agent, Registry, Run
from cortex_jupyter.runtime.core.record.run import OutputRepr

ROOT = Path(__file__).resolve().parents[2]


def start(*args: str) -> subprocess.Popen[str]:
    """``python -m tests.store.procs ARGS`` in a process of its own, this checkout first on
    its path, its output read as text."""
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    return subprocess.Popen(
        [sys.executable, "-m", "tests.store.procs", *args],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


WRITE = """<action id="a1">{"name": "slow", "parameters": {"tag": "TAG", "i": I},
  "output_key": "x"}</action>
<action id="a2">{"name": "grid", "parameters": {"n": 3}, "output_key": "g"}</action>
--- next turn ---
<response final="true">run I of TAG answered</response>"""

KILL = """<action id="a1" mode="sync">{"name": "first", "parameters": {},
  "output_key": "first"}</action>
<action id="a2">{"name": "second", "parameters": {}}</action>
--- next turn ---
<response>never reached</response>"""


def registry() -> Registry:
    tools = Registry()

    @tools.tool
    def slow(tag: str, i: int) -> dict[str, Any]:
        time.sleep(0.05)
        return {"tag": tag, "i": i}

    @tools.tool
    def grid(n: int) -> Any:
        return np.arange(n * n).reshape(n, n)

    @tools.tool
    def first() -> dict[str, str]:
        return {"kept": "after the kill"}

    @tools.tool
    def second() -> None:
        time.sleep(1.5)  # the first action's end has been committed by now (0.5 s)
        print("SECOND RUNNING", file=sys.__stdout__, flush=True)
        threading.Event().wait()

    return tools


CELL = """<action id="a1" mode="sync">{"name": "rt_first", "parameters": {"x": 3},
  "output_key": "rt_one"}</action>
<action id="a2">{"name": "rt_second", "parameters": {"x": "$rt_one"},
  "output_key": "rt_two"}</action>
--- next turn ---
<response>First $rt_one, then $rt_two.</response>"""
#: What a run of ``CELL`` answers, however often it was stopped and resumed.
ANSWER = "First 6, then 7."


def register(directory: Path, tag: str) -> None:
    """``rt_first`` and ``rt_second`` in the default registry: each call is a line
    ``NAME TAG`` in ``directory/calls``; ``rt_second`` holds while ``directory/hold-TAG``
    is there (having said ``SECOND RUNNING`` with the run's id, its first action's end
    committed)."""
    from IPython import get_ipython

    from cortex_jupyter import default_registry

    def called(name: str) -> None:
        with open(directory / "calls", "a") as out:
            out.write(f"{name} {tag}\n")

    def rt_first(x: int) -> int:
        """Double x."""
        called("first")
        return x * 2

    def rt_second(x: int) -> int:
        """Add one to x."""
        called("second")
        if (directory / f"hold-{tag}").exists():
            store.open_store().flush()  # the first action's end is in the store
            run_id = getattr(get_ipython().user_ns.get("_cortex"), "id", None)
            print("SECOND RUNNING", run_id, file=sys.__stdout__, flush=True)
            while (directory / f"hold-{tag}").exists():
                time.sleep(0.02)
        return x + 1

    default_registry.tool(name="rt_first")(rt_first)
    default_registry.tool(name="rt_second")(rt_second)


def shell() -> Any:
    """An IPython shell with cortex_jupyter loaded (its history in memory)."""
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    config = Config()
    config.HistoryManager.hist_file = ":memory:"
    ip = InteractiveShell.instance(config=config)
    ip.run_line_magic("load_ext", "cortex_jupyter")
    return ip


def in_shell(mode: str, directory: Path, *args: str) -> None:
    ip = shell()
    ip.user_ns["RtAnswer"] = str  # a type only this process knows (--output RtAnswer)
    if mode == "hold":
        register(directory, "holder")
        ip.run_cell_magic("cortex", " ".join(("--script --delay 0", *args)), CELL)
        return
    register(directory, f"resumer-{os.getpid()}")
    print("READY", flush=True)
    while not (directory / "go").exists():
        time.sleep(0.005)
    ip.run_line_magic("cortex", f"resume {args[0]}")
    run = ip.user_ns.get("_cortex")
    if run is not None and run.id == args[0]:
        print("RESUMED", run.status, flush=True)
    else:
        print("REFUSED", flush=True)
    store.open_store().flush()


def main(mode: str, path: str, *args: str) -> None:
    if mode in ("hold", "resume"):
        in_shell(mode, Path(path), *args)
        return
    kept = store.open_store(path)
    if mode == "write":
        count, tag = int(args[0]), args[1]
        for i in range(count):
            script = WRITE.replace("TAG", tag).replace("I", str(i))
            agent = Agent(model=ScriptModel(script, chunk_size=8, delay=0.002), registry=registry())
            run = agent.run_sync(f"question {i} from {tag}", store=kept)
            kinds = [
                e.kind for e in run.events if e.kind not in ("thought", "response", "text", "chunk")
            ]
            print(run.id, len(kinds), flush=True)
        kept.flush()
    elif mode == "kill":
        agent = Agent(model=ScriptModel(KILL, chunk_size=8), registry=registry())
        run = Run()
        print("ID", run.id, flush=True)
        agent.run_sync("a run that is killed", store=kept, run=run)
    elif mode == "open":
        run = store.open_run(args[0], store=path)
        for node in run.actions.values():
            output = node.output
            kind = "repr" if isinstance(output, OutputRepr) else type(output).__name__
            value = output.tolist() if isinstance(output, np.ndarray) else output
            print(json.dumps([node.id, kind, value, node.status]), flush=True)
        print(json.dumps(["answer", run.answer, run.status]), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
