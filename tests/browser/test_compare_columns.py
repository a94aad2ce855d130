"""``%%cortex --compare`` in a real JupyterLab (issue 35, "How it is checked"): three
columns, each with its live graph, side by side at a wide window and stacked at a narrow
one; the screenshot is docs/images/compare-columns.png. The same notebook executed
headless and saved without widget state keeps a static copy of the three columns (each
graph a picture, no script) that an untrusted Lab shows.

The cell is a ``--script`` (no server): the script stands in for every column's model,
so the columns are three notebook ``Agent``s whose tools answer differently.
"""

from __future__ import annotations

import base64
import itertools
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .harness import CELLS, REPO_ROOT, LabServer, expect, open_notebook, run_all, write_notebook

if TYPE_CHECKING:
    from playwright.sync_api import Locator, Page

SETUP = '''%load_ext cortex_jupyter
from cortex_jupyter import Agent
from cortex_jupyter.runtime import Registry

def column(rate: float) -> Agent:
    registry = Registry()

    @registry.tool
    def cc_fetch_prices(city: str) -> list:
        """Prices in a city."""
        return [10, 20, 30]

    @registry.tool
    def cc_convert(prices: list) -> float:
        """Their total in euros."""
        return round(sum(prices) * rate, 2)

    return Agent(registry=registry)

euro, pound, yen = column(1.0), column(0.85), column(160.0)
'''
COMPARE = """%%cortex --compare euro,pound,yen --script --delay 0
<thought>Fetch the prices, then convert them. <script>alert(1)</script></thought>
<action id="f">{"name": "cc_fetch_prices", "parameters": {"city": "Porto"}, "output_key": "p"}
</action>
<action id="c">{"name": "cc_convert", "parameters": {"prices": "$p"}, "output_key": "t"}
</action>
<response>The basket costs $t.</response>
"""
COLUMNS = ("euro", "pound", "yen")
NAMES = ("cc_fetch_prices", "cc_convert")
ANSWERS = ("The basket costs 60.0.", "The basket costs 51.0.", "The basket costs 9600.0.")
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
SHOT = REPO_ROOT / "docs" / "images" / "compare-columns.png"


def boxes(locator: Locator) -> list[dict[str, float]]:
    found = [locator.nth(i).bounding_box() for i in range(locator.count())]
    assert all(box is not None for box in found), found
    return [box for box in found if box is not None]


def side_by_side(found: list[dict[str, float]]) -> bool:
    """One row: the same top, each to the right of the one before."""
    tops = {round(box["y"]) for box in found}
    return len(tops) == 1 and all(
        a["x"] + a["width"] <= b["x"] for a, b in itertools.pairwise(found)
    )


def stacked(found: list[dict[str, float]]) -> bool:
    """One column: the same left, each below the one before."""
    lefts = {round(box["x"]) for box in found}
    return len(lefts) == 1 and all(
        a["y"] + a["height"] <= b["y"] for a, b in itertools.pairwise(found)
    )


def test_three_columns_with_graphs_side_by_side_then_wrapped(
    page: Page, lab_server: LabServer
) -> None:
    # Wide enough beside Lab's file browser for three columns of at least 320 px (at
    # 1280 px two fit in a row and the third wraps below them).
    page.set_viewport_size({"width": 1600, "height": 1000})
    path = write_notebook(lab_server, "compare.ipynb", [SETUP, COMPARE])
    open_notebook(page, lab_server, path)
    assert run_all(page) == ["[1]:", "[2]:"]
    cell = page.locator(CELLS).nth(1)
    box = cell.locator(".cortex-compare.widget-box")  # the live box (the copy is hidden)
    expect(box).to_be_visible()
    expect(cell.locator("div.cortex-compare:not(.widget-box)")).to_be_hidden()
    headers = box.locator(".cortex-compare-header")
    expect(headers).to_have_count(3)
    for header, name in zip(headers.all(), COLUMNS, strict=True):
        expect(header).to_contain_text(name)
        expect(header).to_contain_text("completed")
    views = box.locator(".cortex-view")
    expect(views).to_have_count(3)
    for view, answer in zip(views.all(), ANSWERS, strict=True):
        for name in NAMES:  # the live graph's boxes, named
            expect(view.locator(".cortex-graph")).to_contain_text(name)
        expect(view.locator('.cortex-graph g.cxj-node[data-id="c"]')).to_have_attribute(
            "data-status", "done"
        )
        expect(view).to_contain_text(answer)
    assert cell.locator(".jp-OutputArea script").count() == 0

    # Wide: the three columns in one row.
    cell.evaluate("cell => cell.scrollIntoView({block: 'start'})")
    assert side_by_side(boxes(views)), boxes(views)
    cell.locator(".jp-Cell-outputArea").screenshot(path=str(SHOT))
    assert SHOT.stat().st_size > 10_000

    # Narrow: no room for two columns of 320 px, so they stack.
    page.set_viewport_size({"width": 620, "height": 900})
    page.wait_for_function(
        "el => { const v = el.querySelectorAll('.cortex-view');"
        " return v.length === 3 && v[1].getBoundingClientRect().top"
        " > v[0].getBoundingClientRect().bottom - 1; }",
        arg=box.element_handle(),
    )
    assert stacked(boxes(views)), boxes(views)


def _saved(lab_server: LabServer) -> tuple[str, Any]:
    """The notebook executed by nbclient without widget state, saved (untrusted)."""
    import nbformat as _nbformat
    from nbclient import NotebookClient

    nbformat: Any = _nbformat  # untyped
    path = write_notebook(lab_server, "compare_saved.ipynb", [SETUP, COMPARE])
    notebook = nbformat.read(str(lab_server.root / path), as_version=4)
    NotebookClient(notebook, kernel_name="python3", timeout=60, store_widget_state=False).execute()
    nbformat.write(notebook, str(lab_server.root / path))
    return path, notebook


def test_the_saved_notebook_keeps_the_three_columns_as_a_static_copy(
    page: Page, lab_server: LabServer
) -> None:
    path, notebook = _saved(lab_server)
    assert "widgets" not in notebook.metadata
    outputs = notebook.cells[1].outputs
    copies = [o for o in outputs if o["output_type"] == "display_data"
              and "cortex-compare" in o["data"].get("text/html", "")]  # fmt: skip
    assert len(copies) == 1, [o["data"].keys() for o in outputs if "data" in o]
    copy = copies[0]
    assert WIDGET_MIME not in copy["data"]
    html = copy["data"]["text/html"]
    assert html.count('class="cortex-compare-column"') == 3
    assert "flex-wrap:wrap" in html
    pictures = re.findall(r'src="data:image/svg\+xml;base64,([^"]+)"', html)
    assert len(pictures) == 3
    for picture in (base64.b64decode(p).decode() for p in pictures):
        assert all(name in picture for name in NAMES)
        assert "<script" not in picture.lower()
    assert "<script" not in html.lower()
    for text in (*COLUMNS, *ANSWERS):
        assert text in html, text

    # Untrusted in Lab: the three columns' pictures load, the answers read, no widget.
    open_notebook(page, lab_server, path)
    cell = page.locator(CELLS).nth(1)
    cell.evaluate("cell => cell.scrollIntoView({block: 'start'})")
    expect(cell.locator(".cortex-view")).to_have_count(0)
    columns = cell.locator(".cortex-compare-column")
    expect(columns).to_have_count(3)
    page.wait_for_function(
        "cell => { const i = cell.querySelectorAll('.jp-OutputArea img');"
        " return i.length === 3 && Array.from(i).every(p => p.complete && p.naturalWidth > 0); }",
        arg=cell.element_handle(),
    )
    for column, name, answer in zip(columns.all(), COLUMNS, ANSWERS, strict=True):
        expect(column).to_contain_text(name)
        expect(column).to_contain_text(answer)
    assert cell.locator(".jp-OutputArea script").count() == 0
    # The inline flex styles survive the sanitizer: at 1280 px, beside the file browser,
    # two columns fit in a row and the third wraps below them.
    first, second, third = boxes(columns)
    assert side_by_side([first, second]), (first, second)
    assert third["y"] >= first["y"] + first["height"] and round(third["x"]) == round(first["x"])
    shot = Path(REPO_ROOT / "artifacts" / "screenshots" / "compare-saved-untrusted.png")
    shot.parent.mkdir(parents=True, exist_ok=True)
    cell.locator(".jp-Cell-outputArea").screenshot(path=str(shot))
