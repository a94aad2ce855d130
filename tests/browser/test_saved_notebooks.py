"""A notebook run elsewhere and read without its kernel: the static copy, in a real browser.

A notebook is executed headless by nbclient (as papermill and CI do) and saved without
widget state. Opened in JupyterLab and Notebook 7 it is *untrusted*: their sanitizer
strips inline SVG and ``<style>``, and the widget view is not rendered at all. The run
must still read right: the graph as a picture that has loaded, the node names and the
answer as text, and no "Error displaying widget" / "model not found" placeholder. The
same notebook *trusted* (as a user's own notebook is, reopened the next day) renders the
widget view, whose model is gone: the copy's own CSS hides that placeholder; run again,
the live view shows and the same CSS hides the copy. Last,
``jupyter nbconvert --to html``: the picture is in the page, and no script the model
wrote.
"""

from __future__ import annotations

import base64
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from .harness import (
    CELLS,
    UI,
    LabServer,
    expect,
    open_notebook,
    run_all,
    screenshot,
    trust_notebook,
    write_notebook,
)

if TYPE_CHECKING:
    from playwright.sync_api import Locator, Page

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
TOOLS = """%load_ext cortex_jupyter
import cortex_jupyter

@cortex_jupyter.tool
def sv_lookup_city(name: str) -> dict:
    \"\"\"Facts about a city.\"\"\"
    print(f"looking up {name}")
    return {"city": name, "people": 545000}

@cortex_jupyter.tool
def sv_summarize(data: dict) -> str:
    \"\"\"One line about a city.\"\"\"
    return f"{data['city']} has {data['people']:,} people"
"""
RUN = """%%cortex --script --delay 0
<thought>First the facts, then one line about them. <script>alert(1)</script></thought>
<action id="l">{"name": "sv_lookup_city", "parameters": {"name": "Lisbon"}, "output_key": "city"}
</action>
<action id="s">{"name": "sv_summarize", "parameters": {"data": "$city"}, "output_key": "line"}
</action>
<response>
## Lisbon in one line

The city is **sunny and hilly**. <script>alert(2)</script>
</response>
"""
NAMES = ("sv_lookup_city", "sv_summarize")
ANSWER = "sunny and hilly"
PLACEHOLDERS = ("model not found", "Error displaying widget", "Loading widget")
# The graph's picture: loaded (decoded, with a size), and drawn with a height on the page.
PICTURES_JS = """cell => Array.from(cell.querySelectorAll('.jp-OutputArea-output img'), img => ({
    src: (img.getAttribute('src') || '').slice(0, 40),
    loaded: img.complete && img.naturalWidth > 0,
    height: img.getBoundingClientRect().height,
}))"""


@dataclass(frozen=True)
class Saved:
    untrusted: str  # paths relative to the server's root
    trusted: str
    notebook: Any  # the executed nbformat notebook


@pytest.fixture(scope="module")
def saved(lab_server: LabServer) -> Saved:
    """The notebook, executed by nbclient without widget state, saved twice."""
    import nbformat as _nbformat
    from nbclient import NotebookClient

    nbformat: Any = _nbformat  # untyped
    path = write_notebook(lab_server, "saved_untrusted.ipynb", [TOOLS, RUN])
    notebook = nbformat.read(str(lab_server.root / path), as_version=4)
    NotebookClient(notebook, kernel_name="python3", timeout=60, store_widget_state=False).execute()
    nbformat.write(notebook, str(lab_server.root / path))
    # A signature covers the content, not the path: the trusted copy must differ.
    trusted = nbformat.from_dict(notebook)
    trusted.metadata["cortex_test"] = "signed"
    nbformat.write(trusted, str(lab_server.root / "saved_trusted.ipynb"))
    trust_notebook(lab_server, "saved_trusted.ipynb")
    return Saved(untrusted=path, trusted="saved_trusted.ipynb", notebook=notebook)


def run_outputs(saved: Saved) -> list[dict[str, Any]]:
    outputs: list[dict[str, Any]] = saved.notebook.cells[1].outputs
    return outputs


def test_the_file_holds_the_view_and_a_static_copy_without_widget_state(saved: Saved) -> None:
    assert "widgets" not in saved.notebook.metadata
    view, copy = [o for o in run_outputs(saved) if o["output_type"] == "display_data"]
    assert set(view["data"]) == {WIDGET_MIME, "text/plain"} and view["data"]["text/plain"] == ""
    assert view["metadata"]["cortex"]["status"] == "done"
    assert WIDGET_MIME not in copy["data"]
    html = copy["data"]["text/html"]
    found = re.search(r'src="data:image/svg\+xml;base64,([^"]+)"', html)
    assert found is not None
    picture = base64.b64decode(found.group(1)).decode()
    assert all(name in picture for name in NAMES)
    assert "<script" not in html.lower() and "<script" not in picture.lower()
    assert "&lt;script&gt;alert(2)" in html
    assert ANSWER in copy["data"]["text/plain"]


def run_cell_of(page: Page) -> Locator:
    cell = page.locator(CELLS).filter(has_text="%%cortex").first
    cell.evaluate("cell => cell.scrollIntoView({block: 'start'})")
    return cell


def assert_reads_right(cell: Locator) -> None:
    """The graph as a loaded picture, the names and the answer as text, no placeholder."""
    outputs = cell.locator(".jp-OutputArea")
    expect(outputs.locator("img").first).to_be_visible()
    cell.page.wait_for_function(
        "cell => Array.from(cell.querySelectorAll('.jp-OutputArea img'))"
        ".some(img => img.complete && img.naturalWidth > 0)",
        arg=cell.element_handle(),
    )
    pictures = cell.evaluate(PICTURES_JS)
    assert len(pictures) == 1, pictures
    assert pictures[0]["src"].startswith("data:image/svg+xml;base64,"), pictures
    assert pictures[0]["loaded"] and pictures[0]["height"] > 40, pictures
    for name in NAMES:
        expect(outputs).to_contain_text(name)
    expect(outputs).to_contain_text(ANSWER)
    expect(outputs.locator("h2", has_text="Lisbon in one line")).to_be_visible()
    visible = outputs.inner_text()  # rendered text only: what is hidden is not in it
    for placeholder in PLACEHOLDERS:
        assert placeholder not in visible, visible
    assert outputs.locator("script").count() == 0
    # No layout leaks a stylesheet as text (a sanitizer that kept <style>'s text).
    assert "display:none" not in visible


@pytest.mark.parametrize("ui", ["lab", "notebook"])
def test_an_untrusted_notebook_shows_the_graph_as_a_picture(
    page: Page, lab_server: LabServer, saved: Saved, ui: UI
) -> None:
    open_notebook(page, lab_server, saved.untrusted, ui=ui)
    cell = run_cell_of(page)
    assert_reads_right(cell)
    # Untrusted: the widget view is never rendered, and the copy is sanitized (no styles).
    expect(cell.locator(".cortex-view")).to_have_count(0)
    screenshot(page, f"saved-untrusted-{ui}")


def test_a_trusted_notebook_without_its_widgets_shows_the_copy_not_an_error(
    page: Page, lab_server: LabServer, saved: Saved
) -> None:
    open_notebook(page, lab_server, saved.trusted)
    cell = run_cell_of(page)
    # The widget output is rendered (trusted), finds no model, and is hidden.
    widget_output = cell.locator(".jp-OutputArea-output.jupyter-widgets")
    expect(widget_output).to_have_text("Error displaying widget: model not found")
    expect(widget_output).to_be_hidden()
    expect(cell.locator(".jp-OutputArea-output.jp-mod-trusted img")).to_be_visible()
    assert_reads_right(cell)
    screenshot(page, "saved-trusted-lab")

    # Run again with a kernel: the live view shows, and the copy under it is hidden.
    run_all(page)
    cell = run_cell_of(page)
    expect(cell.locator(".cortex-view .cortex-header [data-phase]")).to_have_attribute(
        "data-phase", "done"
    )
    expect(cell.locator(".cortex-view")).to_be_visible()
    expect(cell.locator(".cortex-static")).to_have_count(1)
    expect(cell.locator(".cortex-static")).to_be_hidden()


def test_nbconvert_html_shows_the_picture_and_no_model_script(
    page: Page, lab_server: LabServer, saved: Saved, tmp_path: Path
) -> None:
    target = tmp_path / "saved.html"
    subprocess.run(
        [sys.executable, "-m", "jupyter", "nbconvert", "--to", "html", "--output",
         str(target), str(lab_server.root / saved.untrusted)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    html = target.read_text()
    assert 'src="data:image/svg+xml;base64,' in html
    assert "alert(2)" not in html.replace("&lt;script&gt;alert(2)", "")
    assert "<script>alert" not in html
    for text in (*NAMES, ANSWER):
        assert text in html, text
    # In a browser the page shows the copy (its CSS hides nothing here) and the picture.
    page.goto(target.as_uri(), wait_until="domcontentloaded")
    body = page.locator("body")
    expect(body).to_contain_text(ANSWER)
    page.wait_for_function(
        "() => Array.from(document.images).some(i => i.complete && i.naturalWidth > 0)"
    )
    visible = body.inner_text()
    for text in NAMES:
        assert text in visible, text
    assert not any(p in visible for p in PLACEHOLDERS), visible
    screenshot(page, "saved-nbconvert")
