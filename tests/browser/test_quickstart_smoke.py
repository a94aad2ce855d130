"""Smoke test in a real browser: the quickstart notebook runs clean in JupyterLab and Notebook 7."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import pytest

from .harness import UI, LabServer, expect, open_notebook, require_notebook7, run_all, screenshot

if TYPE_CHECKING:
    from playwright.sync_api import Page

QUICKSTART = "01_quickstart.ipynb"
PYTHON_ERROR = re.compile(r"Traceback|\w+(Error|Exception)\b")  # not the protocol's "error …"
STDERR = '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]'


@pytest.mark.parametrize("ui", ["lab", "notebook"])
def test_quickstart_runs_clean(page: Page, lab_server: LabServer, ui: UI) -> None:
    if ui == "notebook":
        require_notebook7()
    open_notebook(page, lab_server, QUICKSTART, ui=ui)
    prompts = run_all(page, ui)
    cells = page.locator(".jp-NotebookPanel:visible .jp-Notebook .jp-CodeCell")
    outputs = cells.locator(".jp-OutputArea-output")

    # No cell raised or wrote to stderr (the notebook's deliberate protocol error is stdout),
    # and every cell ran, in order. Lab and Notebook 7 show exceptions as stderr too.
    assert cells.locator(STDERR).all_text_contents() == []
    assert prompts == [f"[{n}]:" for n in range(1, len(prompts) + 1)]
    expect(outputs.filter(has_text=PYTHON_ERROR)).to_have_count(0)

    # The `%%cortex --script` cell lists what the parser understood.
    script = cells.filter(has_text="%%cortex --script").filter(has_text="get_weather").first
    listing = script.locator(".jp-OutputArea-output")
    expect(listing).to_contain_text("action fetch: get_weather (type=tool, mode=async)")
    expect(listing).to_contain_text("action summary: summarize (type=tool, mode=sync)")
    expect(listing).to_contain_text('depends_on: ["fetch"]')

    # The cell that checks the parser's results by assertion ends with "all good".
    checks = cells.filter(has_text='print("all good")')
    expect(checks.locator(".jp-OutputArea-output")).to_have_text("all good")

    script.evaluate("cell => cell.scrollIntoView({block: 'start'})")
    screenshot(page, f"quickstart-{ui}-listing")
    checks.evaluate("cell => cell.scrollIntoView({block: 'start'})")
    screenshot(page, f"quickstart-{ui}-all-good")
