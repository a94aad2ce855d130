"""Fixtures for the real-browser tests: a Jupyter server, headless Chromium, one page per test.

Every test under tests/browser is marked ``browser``; deselect them with ``-m "not browser"``.
A missing Chromium or Playwright skips them with the reason, except on CI (``CI=true``), where
it fails them: CI must never pass without having looked at a real page.

The server and the browser are shared by all the tests here, but are ``package``-scoped, not
``session``-scoped: Playwright's sync API leaves its asyncio loop marked as running in the main
thread while it is open, which breaks every anyio/asyncio test run after it in the same pytest
session ("Cannot run the event loop while another loop is running"). Package scope closes it as
soon as the last browser test is done. For the same reason, browser tests are plain ``def``s.
"""

from __future__ import annotations

import contextlib
import importlib.util
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from .harness import (
    CHROMIUM,
    CHROMIUM_ARGS,
    EXPECT_TIMEOUT_MS,
    PAGE_TIMEOUT_MS,
    SCREENSHOTS_DIR,
    LabServer,
    missing,
    screenshot,
)

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

HERE = Path(__file__).resolve().parent


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "browser: drives JupyterLab / Notebook 7 in headless Chromium (tests/browser)"
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(item.path).resolve().parents:
            item.add_marker(pytest.mark.browser)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    # Keep each phase's report on the item so the page fixture knows whether the test failed.
    report = yield
    setattr(item, f"report_{report.when}", report)
    return report


@pytest.fixture(scope="package")
def browser() -> Iterator[Browser]:
    """Headless system Chromium, driven by Playwright (which never downloads a browser here)."""
    if importlib.util.find_spec("playwright") is None:
        missing("Playwright", "install the test tools: pip install -e '.[test]'")
    if not CHROMIUM.exists():
        missing(
            f"Chromium ({CHROMIUM})",
            "install it with: sudo apt-get install chromium "
            "(or point CORTEX_CHROMIUM at a Chromium/Chrome binary)",
        )
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=EXPECT_TIMEOUT_MS)

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture(scope="package")
def lab_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabServer]:
    """``jupyter lab`` (this venv's) on a private copy of notebooks/, stopped at the end."""
    base = tmp_path_factory.mktemp("lab")
    server = LabServer(base=base, root=base / "root")
    try:
        server.start()
        # The notebooks' "python3" kernel must be this venv's interpreter.
        spec = server.api("kernelspecs")["kernelspecs"]["python3"]["spec"]
        assert Path(spec["argv"][0]) == Path(sys.executable), spec["argv"]
        yield server
    finally:
        server.stop()


@pytest.fixture
def page(request: pytest.FixtureRequest, browser: Browser, lab_server: LabServer) -> Iterator[Page]:
    """A fresh 1280x900 page; afterwards its kernels are shut down and notebooks/ restored.

    A failed test leaves a screenshot, artifacts/screenshots/FAILED-<test>.png.
    """
    test_name = re.sub(r"[^\w.-]+", "_", request.node.name)
    failed_shot = SCREENSHOTS_DIR / f"FAILED-{test_name}.png"
    failed_shot.unlink(missing_ok=True)  # from an earlier run
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(PAGE_TIMEOUT_MS)
    page = context.new_page()
    try:
        yield page
    finally:
        report = getattr(request.node, "report_call", None)
        if report is not None and report.failed:
            with contextlib.suppress(Exception):  # a page that crashed has nothing to show
                screenshot(page, failed_shot.stem)
        context.close()
        lab_server.shutdown_sessions()
        lab_server.restore_notebooks()
