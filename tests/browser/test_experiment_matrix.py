"""An experiment's matrix in a real JupyterLab (issue 34, item 4): the live matrix of a
hand-made ``Matrix`` whose cells hold two real stored runs; clicking a cell's try opens
that run's graph, with its verdicts laid over it, under the matrix; the filter buttons
redraw from the kernel. The screenshot is docs/images/experiment-matrix.png."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .harness import REPO_ROOT, LabServer, expect, open_notebook, run_all, write_notebook

if TYPE_CHECKING:
    from playwright.sync_api import Page

SETUP = '''
import pathlib, tempfile
from dataclasses import dataclass, field
import ipywidgets
from IPython.display import display
from cortex_jupyter import open_run, store
from cortex_jupyter.display.matrix import MatrixView, try_view
from cortex_jupyter.display.matrix_data import AgentSummary, Matrix, MatrixCell
from cortex_jupyter.models import ScriptModel
from cortex_jupyter.runtime import Agent, Registry

registry = Registry()

@registry.tool
def lookup_order(n: int) -> int:
    """Look an order up."""
    return n * 7

@registry.tool
def refund_order(n: int) -> int:
    """Refund it."""
    return n

@registry.tool
def weather_now(city: str) -> str:
    """The weather."""
    return "sunny"

REFUND = """
<action id="a1">{"name": "lookup_order", "parameters": {"n": 3}, "output_key": "got"}</action>
<action id="a2">{"name": "refund_order", "parameters": {"n": 4}}</action>
--- next turn ---
<response final="true">Refunded $got.</response>"""
WEATHER = """<action id="w1">{"name": "weather_now", "parameters": {"city": "Lima"}}</action>
--- next turn ---
<response final="true">It is sunny.</response>"""

path = pathlib.Path(tempfile.mkdtemp()) / "runs.db"
kept = store.open_store(path)
def agent(script):
    return Agent(model=ScriptModel(script), registry=registry)

refund = agent(REFUND).run_sync("refund order 3", store=kept)
weather = agent(WEATHER).run_sync("weather in Lima", store=kept)
assert kept.flush()

@dataclass(frozen=True)
class Verdict:
    passed: bool
    score: float
    reason: str = ""
    details: dict = field(default_factory=dict)

def cell(case, agent, passed, total, tries, reasons=()):
    return MatrixCell(case, agent, passed, total, 0 < passed < total, 0.0, 120, 0.05,
                      reasons, None, tries)

cells = {
    ("refund", "gpt"): cell("refund", "gpt", 1, 2, ((0, refund.id), (1, refund.id)),
                            ("refund_order did not wait for lookup_order",)),
    ("refund", "local"): cell("refund", "local", 0, 1, ((0, refund.id),), ("tools 0.5",)),
    ("weather", "gpt"): cell("weather", "gpt", 1, 1, ((0, weather.id),)),
    ("weather", "local"): cell("weather", "local", 1, 1, ((0, weather.id),)),
}
matrix = Matrix(
    "support cases", ("refund", "weather"), ("gpt", "local"), cells,
    (AgentSummary("gpt", 2, 3, 0.667, 0.208, 0.939, 0.0, 0.05, 0.05, 0),
     AgentSummary("local", 1, 2, 0.5, 0.095, 0.905, 0.0, 0.05, 0.05, 0)),
    "gpt vs local on 2 cases: 1 vs 1 passed, McNemar exact p = 1.0", 5, 5)
VERDICTS = {
    "refund": {
        "answer": Verdict(True, 1.0, "contains 'Refunded'"),
        "graph": Verdict(False, 0.0, "refund_order did not wait for lookup_order",
                         {"broken": [["refund_order", "lookup_order"]]}),
    },
    "weather": {"answer": Verdict(True, 1.0, "contains 'sunny'")},
}
shown = ipywidgets.Output()

def on_open(case, agent, repeat, run_id):
    shown.clear_output()
    with shown:
        display(try_view(open_run(run_id, store=path), VERDICTS[case],
                         title=f"{case} / {agent} #{repeat + 1}"))

view = MatrixView(on_open, matrix=matrix)
display(view, shown)
'''


def test_a_click_on_a_cell_opens_that_tries_graph(page: Page, lab_server: LabServer) -> None:
    path = write_notebook(lab_server, "matrix.ipynb", [SETUP])
    open_notebook(page, lab_server, path)
    assert run_all(page) == ["[1]:"]
    live = page.locator(".cortex-matrix-view")
    expect(live.locator("table.cortex-matrix")).to_be_visible()
    expect(live.locator("tbody th[scope=row]")).to_have_count(2)

    # The filter is the kernel's: "Flaky" leaves the one case whose repeats disagree.
    live.locator("button[data-filter=flaky]").click()
    expect(live.locator("tbody th[scope=row]")).to_have_count(1)
    expect(live.locator("tbody th[scope=row]")).to_have_text("refund")
    live.locator("button[data-filter=all]").click()
    expect(live.locator("tbody th[scope=row]")).to_have_count(2)

    # The weather try opens the weather run's graph.
    live.locator('button.cortex-try[data-case="weather"][data-agent="local"]').click()
    opened = page.locator(".cortex-try-view")
    expect(opened).to_be_visible()
    expect(opened).to_contain_text("weather / local #1")
    expect(opened.locator("img.cortex-graph")).to_be_visible()
    expect(opened.locator(".cortex-actions")).to_contain_text("weather_now")

    # The refund try's second repeat: the other run, its broken edge named and outlined.
    live.locator('button.cortex-try[data-case="refund"][data-agent="gpt"][data-repeat="1"]').click()
    expect(opened).to_contain_text("refund / gpt #2")
    expect(opened.locator(".cortex-actions")).to_contain_text("lookup_order")
    expect(opened.locator(".cortex-actions")).to_contain_text("refund_order")
    expect(opened.locator(".cortex-legend")).to_contain_text("a before edge broken")
    expect(opened).not_to_contain_text("weather_now")
    alt = opened.locator("img.cortex-graph").get_attribute("alt") or ""
    assert "lookup_order" in alt and "refund_order" in alt

    shot = REPO_ROOT / "docs" / "images" / "experiment-matrix.png"
    cell = page.locator(".jp-NotebookPanel:visible .jp-CodeCell").first
    cell.locator(".jp-Cell-outputArea").screenshot(path=str(shot))
    assert shot.stat().st_size > 10_000
