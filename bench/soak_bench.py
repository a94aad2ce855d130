"""Soak benchmark: a long day in one notebook, in a real kernel and in a real JupyterLab.

    python bench/soak_bench.py [--cells 300] [--every 50] [--browser-cells 40]
                               [--browser-every 10] [--no-kernel] [--no-browser]
                               [--browser-control]

**Kernel part.** ``--cells`` ``%%cortex --script`` cells, each its own notebook cell (a
``cellId`` as JupyterLab sends it), run one after another in a real ipykernel (this venv's,
``tests/kernel/harness.py``). Each cell streams a short thought, one tool action that binds a
variable, and an answer that shows it: a graph, a thought box and a response, as a typical
cell. ``--fresh`` on every cell keeps the conversation from growing, so what grows is what
the views keep. Every ``--every`` cells it prints:

- live widgets: the widgets the kernel holds open (``ipywidgets``' registry);
- kernel RSS (``psutil``), and the blocks Python has allocated after a garbage collection
  (``sys.getallocatedblocks``: what a leak grows; RSS also grows with the allocator's
  fragmentation and with IPython's own history of each cell's source);
- comm messages and iopub bytes a cell (the view's ``comm_open/msg/close`` and display
  messages), averaged over the last ``--every`` cells;
- the saved notebook's size: the cells' outputs as a front end keeps them (display updates
  applied by display id), in nbformat JSON, plus the widget state JupyterLab would save with
  them (every live widget's state without its defaults, as JupyterLab saves it with "Save
  Jupyter widget state in notebooks" on).

**Browser part.** ``--browser-cells`` cells in a JupyterLab tab (headless ``/usr/bin/chromium``
through Playwright, as ``tests/browser/harness.py`` starts and drives Lab; widget state saving
on). The cells are run one by one (Shift+Enter); every ``--browser-every`` cells the notebook is
saved and it prints the JS heap in use after a garbage collection (CDP ``Runtime.getHeapUsage``),
the number of cortex views in the page, and the saved file's size. ``--browser-control`` runs
the same cells once more shown as text (``CortexMagics.display = "text"``, no widget): what a
cell costs the page whatever cortex shows.

Figures that stay flat after the first few cells are the point: nothing a finished cell
leaves behind should grow with the number of cells (``CortexMagics.live_views`` views stay
live, older ones keep only their static copy).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.kernel.harness import VIEW_TYPES, Execution, Kernel  # noqa: E402

TOOL = '''
import cortex_jupyter

@cortex_jupyter.tool(name="soak_add")
def soak_add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b
'''

COMM_TYPES = ("comm_open", "comm_msg", "comm_close")


def cell(i: int) -> str:
    thought = " ".join(f"step {k} of cell {i}." for k in range(12))
    return (
        "%%cortex --script --fresh --chunk-size 64 --delay 0\n"
        f"<thought>{thought}</thought>\n"
        f'<action id="add{i}">{{"name": "soak_add", "parameters": {{"a": {i}, "b": 1}}, '
        f'"output_key": "total{i % 7}"}}</action>\n'
        f"<response>## Cell {i}\n\nThe total is **$total{i % 7}**, as the tool said.\n"
        "- one point\n- another point\n</response>\n"
    )


# ---------------------------------------------------------------------------- kernel part

WIDGET_STATE = (
    "len(__import__('json').dumps({k: {'state': w.get_state(drop_defaults=True)} for k, w in "
    "__import__('ipywidgets').widgets.widget._instances.items()}, default=str))"
)
LIVE_WIDGETS = "len(__import__('ipywidgets').widgets.widget._instances)"
# Objects the kernel's Python holds after a collection: a leak grows it, while RSS also
# grows with the allocator's fragmentation and IPython's own history of every cell.
PY_BLOCKS = "(__import__('gc').collect(), __import__('sys').getallocatedblocks())[1]"


class Outputs:
    """The cells' outputs as a front end keeps them (display updates by display id)."""

    def __init__(self) -> None:
        self.cells: list[list[dict[str, Any]]] = []

    def add(self, execution: Execution) -> None:
        outputs: list[dict[str, Any]] = []
        self.cells.append(outputs)
        for message in execution.messages:
            content = message.content
            if message.type == "display_data":
                outputs.append(
                    {
                        "output_type": "display_data",
                        "data": content["data"],
                        "metadata": content.get("metadata") or {},
                        "_id": (content.get("transient") or {}).get("display_id"),
                    }
                )
            elif message.type == "update_display_data":
                target = (content.get("transient") or {}).get("display_id")
                for out in (o for c in self.cells for o in c):
                    if out.get("_id") == target:
                        out["data"], out["metadata"] = content["data"], content.get("metadata")
            elif message.type == "stream":
                outputs.append(
                    {"output_type": "stream", "name": content["name"], "text": content["text"]}
                )

    def notebook_bytes(self, widget_state: int) -> int:
        import nbformat

        notebook = nbformat.v4.new_notebook()
        for i, outputs in enumerate(self.cells):
            code = nbformat.v4.new_code_cell(cell(i), execution_count=i + 1)
            code.outputs = [
                nbformat.from_dict({k: v for k, v in o.items() if k != "_id"}) for o in outputs
            ]
            notebook.cells.append(code)
        return len(nbformat.writes(notebook).encode()) + widget_state


def kernel_part(cells: int, every: int, live_views: int | None = None) -> list[dict[str, Any]]:
    import psutil

    rows: list[dict[str, Any]] = []
    outputs = Outputs()
    with Kernel() as kernel:
        kernel.execute("%load_ext cortex_jupyter")
        kernel.execute(TOOL)
        if live_views is not None:
            kernel.execute(f"%config CortexMagics.live_views = {live_views}")
        where = kernel.evaluate("__import__('cortex_jupyter').__file__")
        print(f"the kernel's cortex_jupyter: {where}", flush=True)
        process = psutil.Process(kernel.pid)
        window: list[tuple[int, int]] = []
        started = time.monotonic()
        for i in range(cells):
            execution = kernel.execute(cell(i), cell_id=f"soak-{i}", timeout=120)
            outputs.add(execution)
            comms = len(execution.of(*COMM_TYPES))
            sent = execution.total_bytes(m for m in execution.messages if m.type in VIEW_TYPES)
            window.append((comms, sent))
            done = i + 1
            if done % every == 0 or done == cells or done in (1, 5):
                state = int(kernel.evaluate(WIDGET_STATE))
                row = {
                    "cells": done,
                    "live widgets": int(kernel.evaluate(LIVE_WIDGETS)),
                    "kernel RSS MB": process.memory_info().rss / 1e6,
                    "Python blocks k": int(kernel.evaluate(PY_BLOCKS)) / 1e3,
                    "comm msgs/cell": sum(c for c, _ in window) / len(window),
                    "KB/cell": sum(b for _, b in window) / len(window) / 1e3,
                    "notebook KB": outputs.notebook_bytes(state) / 1e3,
                    "widget state KB": state / 1e3,
                    "s": time.monotonic() - started,
                }
                rows.append(row)
                print(format_row(row), flush=True)
                window = []
    return rows


# ---------------------------------------------------------------------------- browser part

PROMPT_OF_JS = """(index) => {
    const prompts = document.querySelectorAll(
        '.jp-NotebookPanel .jp-Notebook .jp-CodeCell .jp-InputPrompt');
    return prompts[index] ? prompts[index].textContent : '';
}"""
VIEWS_JS = "() => document.querySelectorAll('.jp-NotebookPanel .cortex-view').length"
WIDGET_SETTINGS = "@jupyter-widgets/jupyterlab-manager/plugin.jupyterlab-settings"


def browser_part(
    cells: int, every: int, text: bool = False, live_views: int | None = None
) -> list[dict[str, Any]]:
    from playwright.sync_api import sync_playwright

    from tests.browser.harness import (
        CHROMIUM,
        CHROMIUM_ARGS,
        LabServer,
        open_notebook,
        write_notebook,
    )

    rows: list[dict[str, Any]] = []
    base = Path(tempfile.mkdtemp(prefix="cortex-soak-lab-"))
    server = LabServer(base=base, root=base / "root")
    settings = base / "config" / "lab" / "user-settings" / WIDGET_SETTINGS
    settings.parent.mkdir(parents=True, exist_ok=True)
    settings.write_text(json.dumps({"saveState": True}))  # what the notebook keeps of widgets
    server.start()
    try:
        setup = "%load_ext cortex_jupyter\n" + TOOL
        if text:  # the control: the same cells shown as text, no widget at all
            setup += '\n%config CortexMagics.display = "text"\n'
        if live_views is not None:
            setup += f"\n%config CortexMagics.live_views = {live_views}\n"
        path = write_notebook(server, "soak.ipynb", [setup] + [cell(i) for i in range(cells)])
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
            )
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.set_default_timeout(60_000)
            cdp = page.context.new_cdp_session(page)
            open_notebook(page, server, path)
            page.locator(".jp-NotebookPanel .jp-CodeCell .jp-InputPrompt").first.click()
            started = time.monotonic()
            for index in range(cells + 1):
                page.keyboard.press("Shift+Enter")
                page.wait_for_function(
                    f"() => /\\d/.test(({PROMPT_OF_JS})({index}))", timeout=120_000, polling=100
                )
                done = index  # the first cell is the setup
                if done and (done % every == 0 or done == cells):
                    saved = server.root / path
                    before = saved.stat().st_mtime_ns
                    page.keyboard.press("Control+s")
                    deadline = time.monotonic() + 30
                    while saved.stat().st_mtime_ns == before and time.monotonic() < deadline:
                        time.sleep(0.1)
                    time.sleep(0.3)  # the write itself
                    cdp.send("HeapProfiler.collectGarbage")
                    heap = cdp.send("Runtime.getHeapUsage")
                    row = {
                        "cells": done,
                        "JS heap MB": heap["usedSize"] / 1e6,
                        "views in page": page.evaluate(VIEWS_JS),
                        "saved KB": (server.root / path).stat().st_size / 1e3,
                        "s": time.monotonic() - started,
                    }
                    rows.append(row)
                    print(format_row(row), flush=True)
            browser.close()
    finally:
        server.stop()
    return rows


# ---------------------------------------------------------------------------- output


def format_row(row: dict[str, Any]) -> str:
    return "  ".join(
        f"{key}={value:.1f}" if isinstance(value, float) else f"{key}={value}"
        for key, value in row.items()
    )


def table(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return ""
    keys = list(rows[0])
    lines = ["| " + " | ".join(keys) + " |", "|" + "---:|" * len(keys)]
    for row in rows:
        cells = [f"{row[k]:.1f}" if isinstance(row[k], float) else str(row[k]) for k in keys]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cells", type=int, default=300, help="kernel cells (default 300)")
    parser.add_argument("--every", type=int, default=50, help="report every N kernel cells")
    parser.add_argument("--browser-cells", type=int, default=40, help="browser cells (40)")
    parser.add_argument("--browser-every", type=int, default=10, help="report every N (10)")
    parser.add_argument("--no-kernel", action="store_true", help="skip the kernel part")
    parser.add_argument("--no-browser", action="store_true", help="skip the browser part")
    parser.add_argument(
        "--live-views",
        type=int,
        default=None,
        help="CortexMagics.live_views in both parts (default: the setting's default)",
    )
    parser.add_argument(
        "--browser-control",
        action="store_true",
        help="also run the browser part with the cells shown as text (no widgets): what a "
        "cell costs the page by itself",
    )
    args = parser.parse_args()
    if not args.no_kernel:
        print(f"\n## Kernel: {args.cells} cells\n", flush=True)
        rows = kernel_part(args.cells, args.every, args.live_views)
        print("\n" + table(rows))
    if not args.no_browser:
        print(f"\n## JupyterLab: {args.browser_cells} cells\n", flush=True)
        rows = browser_part(args.browser_cells, args.browser_every, live_views=args.live_views)
        print("\n" + table(rows))
    if args.browser_control:
        print(f"\n## JupyterLab, the same cells as text (control): {args.browser_cells}\n")
        rows = browser_part(args.browser_cells, args.browser_every, text=True)
        print("\n" + table(rows))


if __name__ == "__main__":
    main()
