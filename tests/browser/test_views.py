"""Views over a long day in a real JupyterLab (issue 19, items 1 to 3).

A notebook keeps only its newest view live (``CortexMagics.live_views = 1`` here): the
older cell shows its static copy and nothing else. The live one draws its graph from the
code its shared widget sent once, and a click on a node still opens the inspector. After
a kernel restart the live view is disconnected: its static copy shows instead, as in a
saved notebook, with no disconnected-widget icons.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from .harness import CELLS, LabServer, expect, open_notebook, run_all, screenshot, write_notebook

if TYPE_CHECKING:
    from playwright.sync_api import Page

SETUP = """%load_ext cortex_jupyter
%config CortexMagics.live_views = 1
import cortex_jupyter

@cortex_jupyter.tool(name="lv_add")
def lv_add(a: int, b: int) -> int:
    \"\"\"Add.\"\"\"
    return a + b
"""


def cell(name: str) -> str:
    return (
        "%%cortex --script --chunk-size 200 --delay 0\n"
        f"<thought>Adding for {name}.</thought>\n"
        f'<action id="{name}">{{"name": "lv_add", "parameters": {{"a": 2, "b": 3}}, '
        f'"output_key": "{name}"}}</action>\n'
        f"<response>The {name} sum is ${name}.</response>\n"
    )


def test_old_views_and_a_restarted_kernel_show_the_static_copy(
    page: Page, lab_server: LabServer
) -> None:
    path = write_notebook(lab_server, "views.ipynb", [SETUP, cell("first"), cell("second")])
    open_notebook(page, lab_server, path)
    assert run_all(page) == ["[1]:", "[2]:", "[3]:"]
    first, second = page.locator(CELLS).nth(1), page.locator(CELLS).nth(2)

    # The older view let go: its static copy is all that shows (no empty output box).
    expect(first.locator(".cortex-view")).to_have_count(0)
    expect(first.locator(".cortex-static")).to_be_visible()
    expect(first.locator(".cortex-static")).to_contain_text("The first sum is 5")
    expect(first.locator(".jp-OutputArea-child:visible")).to_have_count(1)

    # The newest view is live: its graph came from the shared code, and clicks work.
    view = second.locator(".cortex-view")
    expect(view).to_be_visible()
    expect(second.locator(".cortex-static")).to_be_hidden()
    node = view.locator('.cortex-graph g.cxj-node[data-id="second"]')
    expect(node).to_have_attribute("data-status", "done")
    node.click()
    expect(view.locator(".cortex-inspector")).to_contain_text("lv_add")

    # Restart the kernel (Kernel > Restart Kernel…, then Restart).
    page.locator(".lm-MenuBar-item", has_text=re.compile(r"^Kernel$")).click()
    page.locator(".lm-Menu-item:visible .lm-Menu-itemLabel").filter(
        has_text=re.compile(r"^Restart Kernel…$")
    ).click()
    page.locator(".jp-Dialog .jp-mod-accept").click()
    expect(second.locator(".cortex-view.jupyter-widgets-disconnected")).to_have_count(1)
    expect(second.locator(".cortex-static")).to_be_visible()
    expect(second.locator(".cortex-static")).to_contain_text("The second sum is 5")
    expect(view).to_be_hidden()  # no broken-link icons, nothing to click that cannot send
    expect(first.locator(".cortex-static")).to_be_visible()
    screenshot(page, "views-after-restart")
