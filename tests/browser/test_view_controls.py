"""What a person does in the live view, in a real browser (JupyterLab and Notebook 7).

While a ``%%cortex --script`` cell still streams: an action's progress moves in its box
and its duration ticks; Approve and Deny answer two actions waiting for approval; a
click on a node opens its inspector with its parameters and output. In another run the
view's own Stop button ends the run within about a second, keeping what arrived. All of
it is asserted from the page, as a user sees it, and from ``_cortex`` afterwards.
"""

from __future__ import annotations

import json
import re
import time
from typing import TYPE_CHECKING, Any

import pytest

from .harness import (
    CELLS,
    UI,
    LabServer,
    expect,
    open_notebook,
    run_cell,
    screenshot,
    write_notebook,
)

if TYPE_CHECKING:
    from playwright.sync_api import Page

STDERR = '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]'
TOOLS = """%load_ext cortex_jupyter
import time
import cortex_jupyter

@cortex_jupyter.tool(name="bv_lookup")
def bv_lookup(city: str, days: int = 1) -> dict:
    \"\"\"The weather.\"\"\"
    return {"city": city, "forecast": ["sunny", "rain"][:days]}

@cortex_jupyter.tool(name="bv_crawl")
def bv_crawl(pages: int) -> int:
    \"\"\"Crawl slowly, reporting progress.\"\"\"
    for i in range(1, pages + 1):
        time.sleep(0.7)
        cortex_jupyter.progress(i, pages, "pages")
        print(f"crawled page {i}")
    return pages

@cortex_jupyter.tool(name="bv_send", approve=True)
def bv_send(to: str) -> str:
    \"\"\"Send a message (asks first).\"\"\"
    return f"sent to {to}"

@cortex_jupyter.tool(name="bv_delete", approve=True)
def bv_delete(path: str) -> str:
    \"\"\"Delete a file (asks first).\"\"\"
    return f"deleted {path}"

@cortex_jupyter.tool(name="bv_fail")
def bv_fail() -> None:
    \"\"\"Always fails.\"\"\"
    raise RuntimeError("the printer is on fire")

@cortex_jupyter.tool(name="bv_sleep")
def bv_sleep(seconds: float) -> float:
    \"\"\"Sleep.\"\"\"
    time.sleep(seconds)
    return seconds
"""
THOUGHT = "\n".join(f"Line {i}: still thinking while the tools run." for i in range(50))
RUN = f"""%%cortex --script --chunk-size 24 --delay 0.04
<thought>First the lookups.
<action id="oops">{{"name": "bv_fail"}}</action>
<action id="lookup">{{"name": "bv_lookup", "parameters": {{"city": "Lisbon", "days": 2}}}}</action>
<action id="crawl">{{"name": "bv_crawl", "parameters": {{"pages": 5}}}}</action>
<action id="mail">{{"name": "bv_send", "parameters": {{"to": "ops@example.com"}}}}</action>
<action id="rm">{{"name": "bv_delete", "parameters": {{"path": "/tmp/old-report"}}}}</action>
{THOUGHT}
</thought>
<response>All done.</response>
"""
CHECK = (
    "print(_cortex.status, _cortex.actions['mail'].status, _cortex.actions['rm'].status, "
    "_cortex.actions['rm'].error)"
)
SLOW = (
    "%%cortex --script --chunk-size 16 --delay 0.2\n<thought>\n"
    '<action id="long">{"name": "bv_sleep", "parameters": {"seconds": 30}}</action>\n'
    + "\n".join(
        f"Line {i}: a slow thought, streamed a few characters at a time." for i in range(60)
    )
)
STOP_CHECK = "print(_cortex.status, len(_cortex.thought) > 20, _cortex.actions['long'].status)"

# Samples the crawl node's box every 50 ms: its texts, its progress bar, its status.
SAMPLER_JS = """() => {
    const samples = [];
    window.__cxjSamples = samples;
    const timer = setInterval(() => {
        const node = document.querySelector(
            '.jp-NotebookPanel .cortex-graph g.cxj-node[data-id="crawl"]');
        if (!node) return;
        const texts = Array.from(node.querySelectorAll('text'), t => t.textContent).join(' | ');
        const bar = node.querySelector('rect.cxj-progress');
        samples.push([node.getAttribute('data-status'), texts,
                      bar ? Number(bar.getAttribute('width')) : null]);
        if (samples.length > 4000) clearInterval(timer);
    }, 50);
}"""


def output_text(page: Page, index: int) -> str:
    cell = page.locator(CELLS).nth(index)
    area = cell.locator(".jp-OutputArea-output").first
    expect(area).to_be_visible()
    return area.inner_text()


@pytest.mark.parametrize("ui", ["lab", "notebook"])
def test_progress_approvals_and_the_inspector_while_the_run_streams(
    page: Page, lab_server: LabServer, ui: UI
) -> None:
    path = write_notebook(lab_server, "view_controls.ipynb", [TOOLS, RUN, CHECK])
    open_notebook(page, lab_server, path, ui=ui)
    tools = run_cell(page, 0)
    expect(tools.locator(".jp-InputPrompt")).to_have_text("[1]:")
    page.evaluate(SAMPLER_JS)
    cell = run_cell(page, 1)
    view = cell.locator(".cortex-view")
    badge = view.locator(".cortex-header [data-phase]")
    inspector = view.locator(".cortex-inspector")

    # --- a failed action's inspector opens by itself, with its error.
    expect(inspector).to_contain_text("the printer is on fire")
    expect(inspector.locator("[data-status]").first).to_have_attribute("data-status", "failed")

    # --- two actions wait for approval while the model is still writing.
    mail = view.locator(".cortex-approval", has_text="bv_send")
    rm = view.locator(".cortex-approval", has_text="bv_delete")
    expect(mail).to_contain_text("ops@example.com")
    expect(rm).to_contain_text("/tmp/old-report")
    graph = view.locator(".cortex-graph")
    expect(graph.locator('g.cxj-node[data-id="mail"]')).to_have_attribute("data-status", "awaiting")
    expect(badge).to_have_attribute("data-phase", "streaming")
    thought_before = len(view.locator(".cortex-thought").inner_text())
    screenshot(page, f"view-controls-{ui}-awaiting")
    mail.locator(".cortex-approve").click()
    rm.locator(".cortex-deny").click()
    expect(graph.locator('g.cxj-node[data-id="mail"]')).to_have_attribute("data-status", "done")
    expect(graph.locator('g.cxj-node[data-id="rm"]')).to_have_attribute("data-status", "skipped")
    expect(view.locator(".cortex-approval")).to_have_count(0)
    assert badge.get_attribute("data-phase") == "streaming"  # the stream went on meanwhile
    assert len(view.locator(".cortex-thought").inner_text()) > thought_before

    # --- a click on a node opens its inspector: parameters and output.
    lookup = graph.locator('g.cxj-node[data-id="lookup"]')
    expect(lookup).to_have_attribute("data-status", "done")
    lookup.click()
    expect(inspector).to_contain_text("bv_lookup")
    expect(inspector.locator('[data-cxj-section="parameters"]')).to_contain_text("Lisbon")
    expect(inspector.locator('[data-cxj-section="output"]')).to_contain_text("sunny")
    expect(lookup.locator("rect.cxj-selected")).to_have_count(1)
    inspector.scroll_into_view_if_needed()
    screenshot(page, f"view-controls-{ui}-inspector")

    # --- the crawl's progress, live: open its inspector while it runs.
    crawl = graph.locator('g.cxj-node[data-id="crawl"]')
    crawl.click()
    expect(inspector).to_contain_text("bv_crawl")
    expect(inspector.locator('[data-cxj-section="stdout"]')).to_contain_text("crawled page 5")
    expect(badge).to_have_attribute("data-phase", "done", timeout=60_000)
    # After the run the view still answers: the approved action's inspector.
    graph.locator('g.cxj-node[data-id="mail"]').click()
    expect(inspector.locator('[data-cxj-section="output"]')).to_contain_text("sent to ops@")

    samples: list[Any] = json.loads(page.evaluate("() => JSON.stringify(window.__cxjSamples)"))
    running = [s for s in samples if s[0] == "running"]
    shown = {m.group(0) for _, texts, _ in running if (m := re.search(r"\d/5", texts))}
    assert len(shown) >= 3, shown  # 1/5, 2/5, 3/5 ... seen while it ran
    bars = sorted({width for _, _, width in running if width is not None})
    assert len(bars) >= 3, bars
    ticks = {m.group(1) for _, texts, _ in running if (m := re.search(r"· ([\d.]+) s", texts))}
    assert len(ticks) >= 10, ticks  # the duration ticks in the page
    assert samples[-1][0] == "done"

    # --- afterwards, the record agrees.
    check = run_cell(page, 2)
    expect(check.locator(".jp-OutputArea-output").first).to_contain_text("completed done skipped")
    assert "denied by the user" in output_text(page, 2)


@pytest.mark.parametrize("ui", ["lab", "notebook"])
def test_the_views_stop_button_ends_the_run(page: Page, lab_server: LabServer, ui: UI) -> None:
    path = write_notebook(lab_server, "view_stop.ipynb", [TOOLS, SLOW, STOP_CHECK])
    open_notebook(page, lab_server, path, ui=ui)
    tools = run_cell(page, 0)
    expect(tools.locator(".jp-InputPrompt")).to_have_text("[1]:")
    cell = run_cell(page, 1)
    view = cell.locator(".cortex-view")
    badge = view.locator(".cortex-header [data-phase]")
    expect(view.locator(".cortex-thought")).to_contain_text("Line 1")
    expect(view.locator('.cortex-graph g.cxj-node[data-id="long"]')).to_have_attribute(
        "data-status", "running"
    )
    stop = view.locator(".cortex-stop")
    expect(stop).to_be_visible()
    clicked = time.monotonic()
    stop.click()
    expect(badge).to_have_attribute("data-phase", "interrupted", timeout=5_000)
    took = time.monotonic() - clicked
    assert took < 2.5, f"the run took {took:.2f} s to stop"
    expect(cell.locator(STDERR).first).to_contain_text("cortex: interrupted")
    expect(view.locator(".cortex-stop")).to_have_count(0)  # gone with the run
    screenshot(page, f"view-controls-{ui}-stopped")
    check = run_cell(page, 2)
    expect(check.locator(".jp-OutputArea-output").first).to_contain_text("cancelled True cancelled")
