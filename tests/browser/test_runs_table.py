"""What a newcomer sees after the quickstart (issue 37), in a real JupyterLab: the notebook
opens unchanged; ``%cortex runs`` is a table of the runs, newest first, whose ids open each
run in place; ``%cortex runs weather`` marks where it matched; a failure is reported once."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .harness import CELLS, LabServer, expect, open_notebook, run_all, screenshot

if TYPE_CHECKING:
    from playwright.sync_api import Locator, Page

QUICKSTART = "01_quickstart.ipynb"
STDERR = '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]'
TABLE = ".cortex-runs-view .cortex-runs"


def add_cell(page: Page, source: str) -> Locator:
    """A new code cell at the end holding ``source``, run; returns it."""
    count = page.locator(CELLS).count()
    page.locator(CELLS).last.locator(".jp-InputPrompt").click()
    page.keyboard.press("Escape")
    page.keyboard.press("b")
    page.keyboard.press("Enter")
    page.keyboard.type(source)
    page.keyboard.press("Shift+Enter")  # runs it (and opens an empty cell under it)
    return page.locator(CELLS).nth(count)


def test_runs_after_the_quickstart_read_and_open(page: Page, lab_server: LabServer) -> None:
    open_notebook(page, lab_server, QUICKSTART)
    # Opened with its kernel started, nothing is marked changed (item 6).
    page.wait_for_timeout(1500)
    expect(page.locator(".lm-TabBar-tab.jp-mod-current.jp-mod-dirty")).to_have_count(0)
    run_all(page)

    # One report per failure: the deliberate failure's cell says it in one stderr output.
    said = page.locator(CELLS).locator(STDERR).all_text_contents()
    failed = [text for text in said if "(book_table)" in text]
    assert len(failed) == 1 and "deliberate" not in failed[0], said  # the panel says why
    assert page.locator(".cortex-details").filter(has_text="deliberate").count() == 0

    listed = add_cell(page, "%cortex runs")
    table = listed.locator(TABLE)
    expect(table).to_be_visible()
    rows = table.locator("tbody tr")
    assert rows.count() >= 5
    expect(table).not_to_contain_text("<thought>")
    expect(table).not_to_contain_text("<action")
    expect(table.locator("td").filter(has_text="~").first).to_be_visible()
    listed.evaluate("cell => cell.scrollIntoView({block: 'start'})")
    screenshot(page, "runs-table")

    found = add_cell(page, "%cortex runs weather")
    table = found.locator(TABLE)
    expect(table.locator("mark").first).to_have_text("weather", ignore_case=True)
    first = table.locator("button.cortex-open").first
    run_id = first.get_attribute("data-open")
    assert run_id
    found.evaluate("cell => cell.scrollIntoView({block: 'start'})")
    screenshot(page, "runs-search")
    first.click()
    opened = found.locator(".cortex-runs-view .cortex-static")
    expect(opened).to_be_visible()
    expect(opened).to_contain_text("actions", ignore_case=True)
    screenshot(page, "runs-opened")
