"""Make docs/images/phoenix-trace.png: a cortex run's trace in Phoenix's UI, by Playwright.

    python scripts/phoenix_screenshot.py [--out docs/images/phoenix-trace.png]

Starts a local Phoenix (tests/traces/phoenix_server.py: a temp working directory, free
ports), sends it the run of tests/traces/phoenix_cell.py (actions, a failed one, a nested
agent) through ``phoenix.otel.register()``, opens the trace's page in Debian's Chromium
and saves the picture. Run by hand when the trace or Phoenix's UI changes, never by the tests.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import tests.traces.phoenix_server as server_module  # noqa: E402
from tests.traces.phoenix_server import phoenix_server  # noqa: E402

server_module.PATIENCE = 900.0  # a busy machine: this is run by hand, once

CHROMIUM = os.environ.get("CORTEX_CHROMIUM", "/usr/bin/chromium")
PROJECT = "cortex"


def run_script(name: str, *args: str) -> str:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, "-W", "ignore", str(ROOT / "tests" / "traces" / name), *args],
        env=env, capture_output=True, text=True, check=True, timeout=600,
    )  # fmt: skip
    return done.stdout.strip().splitlines()[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out", default=str(ROOT / "docs" / "images" / "phoenix-trace.png"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder, phoenix_server(Path(folder)) as phoenix:
        print(f"Phoenix up in {phoenix.seconds_to_start:.1f} s at {phoenix.url}")
        spans = json.loads(run_script("phoenix_cell.py", phoenix.url, PROJECT, "11"))["spans"]
        root = next(s for s in spans if s["name"] == "invoke_agent weather")
        trace_id = root["context"]["trace_id"]  # type: ignore[index]
        with urllib.request.urlopen(f"{phoenix.url}/v1/projects") as reply:
            projects = json.load(reply)["data"]
        project_id = next(p["id"] for p in projects if p["name"] == PROJECT)
        shoot(f"{phoenix.url}/projects/{project_id}/traces/{trace_id}", Path(args.out))
    print(f"wrote {args.out}")


def shoot(url: str, out: Path) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM)
        page = browser.new_page(viewport={"width": 1400, "height": 820})
        page.goto(url, wait_until="networkidle", timeout=120_000)
        page.get_by_text("execute_tool researcher").first.wait_for(timeout=60_000)
        page.wait_for_timeout(1500)
        page.screenshot(path=str(out))
        browser.close()


if __name__ == "__main__":
    main()
