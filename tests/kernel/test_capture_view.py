"""What tools write reaches their node in the view, never the cell (a real kernel).

Tools that print in parallel, write to stderr, log, warn, report progress, and one that
prints after its timeout: the cell's own stream gets none of it; each action's inspector
(opened as the page opens it, by a message to the graph widget) shows its own lines; the
graph's boxes show the newest line and the progress while the tools run.
"""

from __future__ import annotations

import re

import pytest

from .harness import Execution, Kernel, Message

TOOLS = '''
import logging, sys, time, warnings
import cortex_jupyter

@cortex_jupyter.tool(name="kc_talk")
def kc_talk(who: str, lines: int = 8) -> str:
    """Print numbered lines, slowly."""
    for i in range(lines):
        print(f"{who} says line {i}")
        time.sleep(0.08)
    return who

@cortex_jupyter.tool(name="kc_noisy")
def kc_noisy() -> int:
    """Write to stderr, log and warn."""
    sys.stderr.write("kc-noisy on stderr\\n")
    logging.getLogger("kc.noisy").warning("kc-noisy logged a warning")
    warnings.warn("kc-noisy warns you")
    for i in range(1, 5):  # a second in all: long enough for the view to draw a report
        cortex_jupyter.progress(i, 4, "steps")
        time.sleep(0.25)
    return 7

@cortex_jupyter.tool(name="kc_late")
def kc_late() -> None:
    """Outlives its timeout, then prints."""
    time.sleep(0.8)
    print("kc-late printed after its timeout")
'''

CELL = """%%cortex --script --chunk-size 64 --delay 0.01
<thought>Three talkers, a noisy one and a late one.
<action id="alice">{"name": "kc_talk", "parameters": {"who": "alice"}}</action>
<action id="bob">{"name": "kc_talk", "parameters": {"who": "bob"}}</action>
<action id="carol">{"name": "kc_talk", "parameters": {"who": "carol"}}</action>
<action id="noisy">{"name": "kc_noisy"}</action>
<action id="late">{"name": "kc_late", "timeout": 0.3}</action>
</thought>
<response>done</response>
"""
WORDS = ("says line", "kc-noisy", "kc-late")
NODE = re.compile(r'<g class="cxj-node" data-id="([^"]+)"[^>]*>(.*?)</g>', re.S)


@pytest.fixture(scope="module")
def ran(kernel: Kernel) -> Execution:
    # Its view is clicked after any of the module's other cells (in any order, with
    # --shuffle): keep it live past the default ten (test_views tests the letting go).
    kernel.execute(TOOLS + "\n%config CortexMagics.live_views = 100")
    execution = kernel.execute(CELL, timeout=60)
    # The module's tests run in any order (--shuffle): later cells replace _cortex.
    kernel.execute("kc_capture_run = _cortex")
    return execution


def graph_id(execution: Execution) -> str:
    comm_id = execution.comm_of_class("cortex-graph")
    assert comm_id is not None, execution.widget_classes()
    return comm_id


def inspect_node(kernel: Kernel, execution: Execution, node_id: str) -> str:
    """Click ``node_id`` in the graph; the inspector's HTML the kernel sends back."""
    messages = kernel.send_comm(graph_id(execution), {"act": "select", "id": node_id})
    values = [
        m.state["value"]
        for m in messages
        if m.type in ("comm_open", "comm_msg") and "cxj-inspector" in str(m.state.get("value"))
    ]
    assert values, [m.type for m in messages]
    return values[-1]


def streams(messages: list[Message]) -> str:
    return "".join(m.content["text"] for m in messages if m.type == "stream")


def test_nothing_a_tool_writes_reaches_the_cell(kernel: Kernel, ran: Execution) -> None:
    cell = streams(ran.messages)
    for word in WORDS:
        assert word not in cell, cell
    assert ran.status == "ok"
    assert kernel.evaluate("kc_capture_run.actions['late'].status") == "'failed'"  # its timeout
    # The late print comes after the cell ended: it must not land in the next cells.
    later = kernel.execute("import time; time.sleep(1.0); print('next cell')")
    also = kernel.execute("print('and the one after')")
    assert streams(later.messages) == "next cell\n"
    assert streams(also.messages) == "and the one after\n"


def test_parallel_tools_keep_their_own_lines(kernel: Kernel, ran: Execution) -> None:
    for who in ("alice", "bob", "carol"):
        html = inspect_node(kernel, ran, who)
        lines = re.findall(r"(\w+) says line (\d)", html)
        assert lines == [(who, str(i)) for i in range(8)], (who, lines)


def test_stderr_logs_warnings_and_progress_reach_the_inspector(
    kernel: Kernel, ran: Execution
) -> None:
    html = inspect_node(kernel, ran, "noisy")
    assert "kc-noisy on stderr" in html
    assert "WARNING kc.noisy: kc-noisy logged a warning" in html
    assert "UserWarning: kc-noisy warns you" in html
    assert "4/4 steps" in html


def test_the_graph_showed_progress_and_lines_while_tools_ran(ran: Execution) -> None:
    seen: dict[str, list[str]] = {}
    for _, value in ran.part_values("cortex-graph"):
        for node, body in NODE.findall(value):
            seen.setdefault(node, []).append(body)
    assert any("cxj-progress" in body for body in seen["noisy"]), "no progress bar drawn"
    talkers = [body for who in ("alice", "bob", "carol") for body in seen[who]]
    assert any(re.search(r"\w+ says line \d", body) for body in talkers), "no line drawn"


def test_a_late_print_stays_with_its_action(kernel: Kernel, ran: Execution) -> None:
    # Whatever the runtime kept of it, it is the action's, not a cell's.
    kept = kernel.evaluate("kc_capture_run.actions['late'].stdout")
    assert kept in ("''", "'kc-late printed after its timeout\\n'")


RICH_TOOLS = '''
import cortex_jupyter

class KcTable:
    def _repr_html_(self):
        return "<table><tr><th>city</th></tr><tr><td>Lisbon</td></tr></table><script>bad()</script>"

@cortex_jupyter.tool(name="kc_table")
def kc_table(rows: int) -> KcTable:
    """A table-like output."""
    return KcTable()
'''


def test_the_inspector_shows_an_outputs_rich_form(kernel: Kernel) -> None:
    import inspect

    from cortex_jupyter import session

    if "record=" not in inspect.getsource(session._WidgetView):
        pytest.skip("session.py does not pass the run record to the view yet")
    kernel.execute(RICH_TOOLS)
    run = kernel.execute(
        '%%cortex --script\n<action id="t">{"name": "kc_table", "parameters": {"rows": 2}}'
        "</action><response>ok</response>"
    )
    html = inspect_node(kernel, run, "t")
    assert "<th>city</th>" in html and "<td>Lisbon</td>" in html
    assert "<script" not in html and "bad()" not in html


CRUNCH_TOOLS = '''
import logging, time
import cortex_jupyter

@cortex_jupyter.tool(name="kc_crunch")
def kc_crunch(rows: int) -> int:
    """The quickstart's crunch: progress at the pace of the view's flushes."""
    total = 0
    for i in range(1, rows + 1):
        total += i
        cortex_jupyter.progress(i, rows, f"row {i}")
        print(f"row {i}")
        time.sleep(0.05)
    logging.getLogger("crunch").warning("row %d was odd", 7)
    return total
'''

CRUNCH = """%%cortex --script --delay 0.02
<action id="crunch">{"name": "kc_crunch", "parameters": {"rows": 20},
"output_key": "kc_crunched"}</action>
<response>Crunched **$kc_crunched**.</response>
"""


def test_a_cell_reporting_progress_from_a_thread_always_finishes(kernel: Kernel) -> None:
    """The quickstart's crunch cell once stopped at 14/20 in Notebook 7 and never ended (a
    worker's progress() waited for the loop while the loop's flusher waited for it). The
    same cell, many times, with the other core busy: every run ends with all 20 rows."""
    import subprocess
    import sys

    kernel.execute(CRUNCH_TOOLS)
    # A busy core, as CI's other work makes one (a process of its own: an earlier test's
    # shell may have replaced __main__, which multiprocessing's spawn needs).
    burn = "import time\nstop = time.monotonic() + 120\nwhile time.monotonic() < stop: pass"
    burner = subprocess.Popen([sys.executable, "-c", burn])
    try:
        for round_ in range(12):
            ran = kernel.execute(CRUNCH, timeout=60)
            assert ran.status == "ok"
            assert kernel.evaluate("(_cortex.status, kc_crunched)") == "('completed', 210)", round_
            progress = kernel.evaluate("str(_cortex.actions['crunch'].progress)")
            assert progress == "'20/20 row 20'", round_
    finally:
        burner.kill()
        burner.wait()
