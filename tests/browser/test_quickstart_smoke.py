"""Smoke test in a real browser: the quickstart notebook runs clean in JupyterLab and Notebook 7."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from .harness import CELLS, UI, LabServer, expect, open_notebook, run_all, screenshot

if TYPE_CHECKING:
    from playwright.sync_api import Page

QUICKSTART = "01_quickstart.ipynb"
STDERR = '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]'
ERROR = '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.error"]'


@pytest.mark.parametrize("ui", ["lab", "notebook"])
def test_quickstart_runs_clean(page: Page, lab_server: LabServer, ui: UI) -> None:
    open_notebook(page, lab_server, QUICKSTART, ui=ui)
    prompts = run_all(page, ui)
    cells = page.locator(CELLS)

    # Every cell ran, in order, and none raised.
    assert prompts == [f"[{n}]:" for n in range(1, len(prompts) + 1)]
    expect(cells.locator(ERROR)).to_have_count(0)
    # What goes to stderr is cortex's own one-line reports (the deliberate failure, the
    # refused `high-f` name), never a Python error.
    reports = [text.strip() for text in cells.locator(STDERR).all_inner_texts()]
    assert reports, "the deliberate failure was not reported"
    for report in reports:
        assert all(line.startswith("cortex: ") for line in report.splitlines()), report
    expect(cells.locator(".jp-OutputArea-output").filter(has_text="Traceback")).to_have_count(0)

    # `%cortex vars` lists what the runs bound, and which run bound it.
    # (The first such cell: a later one shows `%cortex expose`.)
    bound = cells.filter(has_text="%cortex vars").first.locator(".jp-OutputArea-output")
    expect(bound).to_contain_text("forecast = {'city': 'Lisbon'")
    expect(bound).to_contain_text("packing = 'sunglasses, an umbrella, a light jacket'")
    # After `%cortex expose trip`, the list says so; the notebook's private note stays out.
    exposed = cells.filter(has_text="%cortex expose trip").locator(".jp-OutputArea-output")
    expect(exposed).to_contain_text("Exposed to models: trip")
    expect(exposed).to_contain_text("trip = ")
    expect(exposed).not_to_contain_text("private_notes")

    # The cell that checks the notebook's facts by assertion ends with "all good".
    checks = cells.filter(has_text='print("all good")')
    expect(checks.locator(".jp-OutputArea-output")).to_have_text("all good")

    bound.evaluate("cell => cell.scrollIntoView({block: 'start'})")
    screenshot(page, f"quickstart-{ui}-vars")
    checks.evaluate("cell => cell.scrollIntoView({block: 'start'})")
    screenshot(page, f"quickstart-{ui}-all-good")
