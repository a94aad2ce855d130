"""One live cell in a real JupyterLab: SmolLM2 on llama.cpp's server (issue 20 §2).

The notebook starts the local server from a cell (``%cortex local start``), asks the live
model a question, and stops the server. What is checked is the contract, never the
model's wisdom: the view streams and ends with a state word the record agrees with, and
the static copy shows the same run.
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING

import pytest

from cortex_jupyter import local

from .harness import CELLS, LabServer, expect, open_notebook, run_cell, screenshot, write_notebook

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = pytest.mark.live

START = "%load_ext cortex_jupyter\n%cortex local start"
ASK = "%%cortex --max-tokens 40 --max-turns 1\nName one colour, in one word."
CHECK = "print('record:', _cortex.status, _cortex.model)"
STOP = "%cortex local stop"


@pytest.fixture(autouse=True)
def built() -> None:
    try:
        local.find_model()
        if not local.server_binary().exists():
            raise local.LocalServerError("llama-server is not built")
    except local.LocalServerError as exc:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"the live model is unavailable on CI: {exc}")
        pytest.skip(f"the live model is unavailable: {exc}")


def test_a_live_cell_streams_and_ends_in_the_state_its_record_has(
    page: Page, lab_server: LabServer
) -> None:
    path = write_notebook(lab_server, "live.ipynb", [START, ASK, CHECK, STOP])
    open_notebook(page, lab_server, path)
    # One cell at a time, not Run All: a reply cut at --max-tokens ends its cell with a
    # one-line error (a run with no answer), and whether it is cut is the model's doing;
    # Run All would stop there.
    try:
        for index in range(4):
            prompt = run_cell(page, index).locator(".jp-InputPrompt")
            expect(prompt).to_have_text(re.compile(rf"^\[{index + 1}\]:$"), timeout=240_000)
    finally:
        screenshot(page, "live-model-cell")
    cells = page.locator(CELLS)
    view = cells.nth(1).locator(".cortex-view")
    expect(view).to_be_visible()
    header = view.locator(".cortex-header")
    expect(header).to_contain_text("smollm2")
    printed = cells.nth(2).locator(".jp-OutputArea-output").inner_text()
    status = printed.split()[1]
    assert status in ("completed", "truncated"), printed
    word = {"completed": "done", "truncated": "truncated"}[status]
    expect(header).to_contain_text(word)
    expect(cells.nth(3).locator(".jp-OutputArea-output")).to_contain_text("Stopped")
