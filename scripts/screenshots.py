"""Take the docs' screenshots from a real run in a real JupyterLab.

    python scripts/screenshots.py [--out docs/images]

Starts JupyterLab on a private copy of notebooks/ (tests/browser/harness.py, the same
harness the browser tests use), opens it in Debian's headless Chromium through Playwright,
registers the quickstart's tools and runs its "weekend in Lisbon" `%%cortex --script` cell:
a thought, four actions (two side by side, one waiting for another, one that fails) and a
markdown answer. It saves, into ``--out``:

- ``jupyterlab-run.png``: the finished cell in JupyterLab (the README's picture);
- ``graph-running.png``: the view while the model still writes, actions running;
- ``inspector.png``: the inspector of a clicked action, its parameters and output;
- ``timeline.png``: ``_cortex.timeline()`` of the same run.

Nothing is drawn by hand: every picture is the page as a user sees it. Run it again after
the view changes and commit the PNGs.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.browser.harness import (  # noqa: E402  (the repository root goes on the path first)
    CHROMIUM,
    CHROMIUM_ARGS,
    EXPECT_TIMEOUT_MS,
    PAGE_TIMEOUT_MS,
    LabServer,
    expect,
    open_notebook,
    run_cell,
    write_notebook,
)

if TYPE_CHECKING:
    from playwright.sync_api import Locator

QUICKSTART = REPO / "notebooks" / "01_quickstart.ipynb"
RUN_MARKER = "A weekend in Lisbon for two."
TOOLS_MARKER = "def get_weather("


def quickstart_cells() -> list[str]:
    """The quickstart's cells this script runs: the extension, its tools, `trip`, the run."""
    cells = json.loads(QUICKSTART.read_text(encoding="utf-8"))["cells"]
    sources = ["".join(cell["source"]) for cell in cells if cell["cell_type"] == "code"]

    def find(marker: str) -> str:
        for source in sources:
            if marker in source:
                return source
        raise SystemExit(f"no code cell of {QUICKSTART.name} contains {marker!r}")

    return [
        "%load_ext cortex_jupyter",
        find(TOOLS_MARKER),
        find("trip = {"),
        find(RUN_MARKER),
        "_cortex.timeline()",
    ]


CLIP_JS = """view => {
    const top = view.getBoundingClientRect();
    const graph = view.querySelector('.cortex-graph').getBoundingClientRect();
    return {x: top.x, y: top.y, width: top.width, height: graph.bottom - top.y + 8};
}"""


def view_clip(view: Locator) -> dict[str, float]:
    """The view from its header to the bottom of its graph, in page coordinates."""
    clip: dict[str, float] = view.evaluate(CLIP_JS)
    return clip


def take(out: Path) -> list[Path]:
    from playwright.sync_api import expect as playwright_expect
    from playwright.sync_api import sync_playwright

    playwright_expect.set_options(timeout=EXPECT_TIMEOUT_MS)
    out.mkdir(parents=True, exist_ok=True)
    saved: list[Path] = []
    with tempfile.TemporaryDirectory(prefix="cortex-shots-") as tmp:
        base = Path(tmp)
        server = LabServer(base=base, root=base / "root")
        server.start()
        try:
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(
                    executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
                )
                context = browser.new_context(
                    viewport={"width": 1100, "height": 900}, device_scale_factor=1
                )
                context.set_default_timeout(PAGE_TIMEOUT_MS)
                page = context.new_page()
                path = write_notebook(server, "weekend.ipynb", quickstart_cells())
                open_notebook(page, server, path)
                # The notebook alone, as when you close the file browser: click its tab.
                page.locator(".jp-SideBar.jp-mod-left .lm-TabBar-tab.lm-mod-current").click()
                for index in range(3):
                    cell = run_cell(page, index)
                    expect(cell.locator(".jp-InputPrompt")).to_have_text(f"[{index + 1}]:")

                cell = run_cell(page, 3)
                view = cell.locator(".cortex-view")
                graph = view.locator(".cortex-graph")
                # The cell's input folded away, as a user does with its blue bar: the view
                # is what the picture is about.
                cell.locator(".jp-Cell-inputCollapser").click()
                # While the model still writes: the lookups run side by side, packing waits
                # for the weather and the booking has just been written.
                cell.evaluate("cell => cell.scrollIntoView({block: 'start'})")
                weather = graph.locator('g.cxj-node[data-id="weather"]')
                expect(graph.locator('g.cxj-node[data-id="table"]')).to_have_count(1)
                saved.append(out / "graph-running.png")
                page.screenshot(path=str(saved[-1]), clip=view_clip(view))

                badge = view.locator(".cortex-header [data-phase]")
                expect(badge).to_have_attribute("data-phase", "done", timeout=60_000)
                inspector = view.locator(".cortex-inspector")
                # The failed action's inspector opened by itself; close it (its ✕) so the
                # picture shows the answer under the graph.
                inspector.locator('[data-cxj-act="close"]').click()
                expect(inspector.locator('[data-cxj-act="close"]')).to_have_count(0)
                page.mouse.move(0, 0)
                cell.evaluate("cell => cell.scrollIntoView({block: 'start'})")
                saved.append(out / "jupyterlab-run.png")
                page.screenshot(path=str(saved[-1]))

                weather.click()
                expect(inspector.locator('[data-cxj-section="output"]')).to_contain_text("Lisbon")
                inspector.evaluate("node => node.scrollIntoView({block: 'end'})")
                saved.append(out / "inspector.png")
                page.screenshot(path=str(saved[-1]))

                timeline = run_cell(page, 4)
                picture = timeline.locator(".jp-OutputArea-output").first
                expect(picture).to_be_visible()
                picture.evaluate("node => node.scrollIntoView({block: 'center'})")
                saved.append(out / "timeline.png")
                picture.screenshot(path=str(saved[-1]))
                context.close()
                browser.close()
        finally:
            server.stop()
    return saved


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "images")
    args = parser.parse_args()
    if not CHROMIUM.exists():
        raise SystemExit(f"no Chromium at {CHROMIUM}: apt-get install chromium")
    for path in take(args.out):
        print(f"{path.relative_to(REPO) if path.is_relative_to(REPO) else path}", end=" ")
        print(f"({path.stat().st_size // 1024} KB)")


if __name__ == "__main__":
    main()
