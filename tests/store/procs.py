"""What the store's process tests run in a process of their own (``python -m tests.store.procs``).

``write DB N TAG``: N runs stored in DB, each printing ``id events``; ``kill DB``: a run
whose first action finishes and whose second never does (it prints ``SECOND RUNNING`` once
the first was surely committed, and waits to be killed); ``open DB ID``: the stored run's
outputs as JSON lines, ``action kind value``.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any

import numpy as np

from cortex_jupyter import store
from cortex_jupyter.models import ScriptModel
from cortex_jupyter.runtime import Agent, Registry, Run
from cortex_jupyter.runtime.core.record import OutputRepr

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


def main(mode: str, path: str, *args: str) -> None:
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
