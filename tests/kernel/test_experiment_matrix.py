"""An experiment's live matrix in a real kernel (issue 34, "How it is checked"): the comm
messages show the matrix widget filling in as tries end, and the static copy (the matrix
table as HTML) is left under it at the end, for a saved notebook.

Order, not time: each try's one tool waits for a file that this test writes only once it
has *seen* the widget show the tries before it finished. So the tries end one after
another, and every state of the matrix between them must reach the front end.
"""

from __future__ import annotations

import re
from pathlib import Path

from .harness import Kernel, Message

CASES = 3
COLUMNS = ("steady", "wrong")
TRIES = CASES * len(COLUMNS)

SETUP = '''
import os
import time
from cortex_jupyter import Agent, Case, Dataset, default_registry, expect
from cortex_jupyter.models import ScriptModel

GATES = {gates!r}


@default_registry.tool(name="kt_gate")
def kt_gate(turn: int) -> int:
    """Wait until the test lets try number `turn` end."""
    deadline = time.monotonic() + 120  # never hang the kernel if the test died
    while not os.path.exists(os.path.join(GATES, str(turn))):
        if time.monotonic() > deadline:
            raise TimeoutError(f"try {{turn}} was never let go")
        time.sleep(0.01)
    return turn


def column_script(offset, answer):
    def script(prompt):
        turn = offset + int(prompt.split()[-1])
        return (
            f'<action id="g">{{{{"name": "kt_gate", '
            f'"parameters": {{{{"turn": {{turn}}}}}}}}}}</action>'
            f'\\n--- next turn ---\\n<response final="true">{{answer}}</response>'
        )
    return script


gated = Dataset(
    [Case(f"Say ok, case {{i}}", name=f"case-{{i}}", expect=expect.answer(contains="ok"))
     for i in range({cases})],
    name="gated",
)
columns = {{
    "steady": Agent(model=ScriptModel(column_script(0, "ok"))),
    "wrong": Agent(model=ScriptModel(column_script({cases}, "no"))),
}}
'''

RUN = "gated_experiment = gated.run(columns, view=True, progress=False)"

DONE = re.compile(r"(\d+)/(\d+) tries done")
FRACTION = re.compile(r'white-space:nowrap">(\d+)/(\d+)')


def finished_cells(html: str) -> int:
    """How many cells of the matrix HTML show a finished try (``1/1``, ``0/1``)."""
    return sum(1 for _passed, total in FRACTION.findall(html) if int(total) > 0)


def matrix_value(message: Message) -> str | None:
    if message.type not in ("comm_open", "comm_msg"):
        return None
    value = message.state.get("value")
    return value if isinstance(value, str) and DONE.search(value) else None


def test_the_matrix_fills_in_as_tries_end_then_leaves_its_static_copy(
    kernel: Kernel, tmp_path: Path
) -> None:
    gates = tmp_path / "gates"
    gates.mkdir()
    kernel.execute(SETUP.format(gates=str(gates), cases=CASES))
    (gates / "0").touch()

    def let_the_next_try_end(message: Message) -> None:
        value = matrix_value(message)
        if value is not None:
            done = int(DONE.search(value).group(1))  # type: ignore[union-attr]
            (gates / str(done)).touch()  # the matrix showed `done` tries: the next may end

    execution = kernel.execute(RUN, on_message=let_the_next_try_end, timeout=120)

    updates = [(i, value) for i, m in enumerate(execution.messages)
               if (value := matrix_value(m)) is not None]  # fmt: skip
    done = [int(DONE.search(value).group(1)) for _i, value in updates]  # type: ignore[union-attr]
    cells = [finished_cells(value) for _i, value in updates]
    # Every state between the tries reached the front end, in order: 0, 1, ..., 6 done,
    # and each showed one more finished cell than the one before.
    assert sorted(set(done)) == list(range(TRIES + 1)) and done == sorted(done), done
    before_the_end = [n for n in dict.fromkeys(cells) if 0 < n < TRIES]
    assert len(before_the_end) >= 2 and before_the_end == sorted(before_the_end), cells
    assert cells[-1] == TRIES
    # One widget carried them all: the live matrix.
    assert len({execution.messages[i].comm_id for i, _v in updates}) == 1
    last_update = updates[-1][0]
    final = updates[-1][1]
    assert final.count("1/1") == CASES and final.count("0/1") == CASES

    # Then the static copy: the matrix table as HTML, no script, shown after the last update.
    copies = [
        (i, m)
        for i, m in enumerate(execution.messages)
        if m.type == "display_data" and "<table" in m.content["data"].get("text/html", "")
    ]
    assert len(copies) == 1, [m.type for m in execution.messages]
    at, copy = copies[0]
    assert at > last_update
    html = copy.content["data"]["text/html"]
    assert f"{TRIES}/{TRIES} tries done" in html and "<script" not in html
    assert finished_cells(html) == TRIES and "answer lacks" in html
    assert "6/6 tries done" in copy.content["data"]["text/plain"]
    assert kernel.evaluate("gated_experiment.status") == "'completed'"
