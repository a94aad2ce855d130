"""A real-browser harness: a throwaway Jupyter server, and helpers that drive its pages.

The fixtures in ``conftest.py`` build on this; tests import the page helpers from here
(``open_notebook``, ``run_all``, ``screenshot``). Waits are event-driven (Playwright
``wait_for_*`` / ``expect``) or short polls of the server's REST API; nothing sleeps longer
than one polling interval.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NoReturn
from urllib.parse import quote

import pytest

from tests.kernel.harness import private_environment

if TYPE_CHECKING:  # Playwright is imported when used: without it the tests skip, not crash.
    from playwright.sync_api import Locator, Page
    from playwright.sync_api._generated import LocatorAssertions

REPO_ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS_DIR = REPO_ROOT / "notebooks"
SCREENSHOTS_DIR = REPO_ROOT / "artifacts" / "screenshots"

# Chromium from the system (apt-get install chromium): Playwright drives it, never downloads one.
CHROMIUM = Path(os.environ.get("CORTEX_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
]

UI = Literal["lab", "notebook"]

POLL = 0.1  # seconds between polls of the server
SERVER_START_TIMEOUT = 60.0
PAGE_TIMEOUT_MS = 60_000  # loading Lab cold takes ~11 s on 2 cores; leave plenty of room
KERNEL_IDLE_TIMEOUT = 60.0
RUN_ALL_TIMEOUT_MS = 90_000
EXPECT_TIMEOUT_MS = 15_000  # Playwright's default for expect() is 5 s

# Lab settings for the server's private config dir: no "fetch Jupyter news?" question and
# no update checks, so nothing covers the page and nothing leaves the machine.
LAB_USER_SETTINGS = {
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
        "fetchNews": "false",
        "checkForUpdates": False,
    },
}


def on_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


def missing(what: str, how: str) -> NoReturn:
    """Skip (on a developer's machine) or fail (on CI) because ``what`` is not installed."""
    message = f"{what} is not installed, so the browser tests cannot run; {how}"
    if on_ci():
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


def require_notebook7() -> None:
    if importlib.util.find_spec("notebook") is None:
        missing("Notebook 7 (the `notebook` package)", "install it with: pip install 'notebook>=7'")


def wait_until(
    condition: Callable[[], Any], timeout: float, what: str, interval: float = POLL
) -> Any:
    """Poll ``condition`` until it returns something truthy and return that; fail on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class LabServer:
    """A ``jupyter lab`` server in its own process group, on a private copy of notebooks/."""

    base: Path  # everything the server writes lives under here
    root: Path  # the server's root_dir: a copy of notebooks/
    token: str = field(default_factory=lambda: secrets.token_hex(16), repr=False)
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.base / "server.log"

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no server log)"
        return "\n".join(text.splitlines()[-lines:])

    # ------------------------------------------------------------------ REST API
    def api(self, path: str, method: str = "GET", timeout: float = 10.0) -> Any:
        request = urllib.request.Request(
            f"{self.url}/api/{path}",
            method=method,
            headers={"Authorization": f"token {self.token}"},
        )
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body = response.read()
        return json.loads(body) if body else None

    def sessions(self) -> list[dict[str, Any]]:
        sessions: list[dict[str, Any]] = self.api("sessions")
        return sessions

    def wait_kernel_idle(self, path: str, timeout: float = KERNEL_IDLE_TIMEOUT) -> None:
        """Wait until the notebook at ``path`` has a session whose kernel is idle."""

        def idle() -> bool:
            return any(
                session.get("path") == path
                and (session.get("kernel") or {}).get("execution_state") == "idle"
                for session in self.sessions()
            )

        try:
            wait_until(idle, timeout, f"the kernel of {path} to be idle")
        except TimeoutError as error:
            raise TimeoutError(f"{error}; sessions: {self.sessions()}") from None

    def shutdown_sessions(self) -> None:
        """Shut down every session (and its kernel), so the next test starts a fresh kernel."""
        for session in self.sessions():
            with contextlib.suppress(urllib.error.HTTPError):
                self.api(f"sessions/{session['id']}", method="DELETE", timeout=30.0)

    def restore_notebooks(self) -> None:
        """Put back pristine copies of notebooks/ (a test may have left outputs or edits)."""
        shutil.copytree(NOTEBOOKS_DIR, self.root, dirs_exist_ok=True)

    # ------------------------------------------------------------------ life cycle
    def _environment(self) -> dict[str, str]:
        """Keep the server away from the user's Jupyter config, data, kernels and workspaces."""
        return private_environment(
            self.base,
            # Searched before every other data dir: the kernelspec installed below wins over
            # any "python3" kernel of the user or the system.
            JUPYTER_PATH=str(self.base / "prefix" / "share" / "jupyter"),
            JUPYTER_PREFER_ENV_PATH="1",
        )

    def _prepare(self, env: dict[str, str]) -> None:
        shutil.copytree(NOTEBOOKS_DIR, self.root, dirs_exist_ok=True)
        settings_dir = self.base / "config" / "lab" / "user-settings"
        for name, values in LAB_USER_SETTINGS.items():
            target = settings_dir / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(json.dumps(values))
        # The notebooks' "python3" kernel must be this interpreter (the venv's): install its
        # kernelspec, with this interpreter's absolute path, where JUPYTER_PATH points.
        install = ["install", "--name", "python3", "--display-name", "Python 3 (ipykernel)"]
        subprocess.run(
            [sys.executable, "-m", "ipykernel", *install, "--prefix", str(self.base / "prefix")],
            env=env,
            check=True,
            capture_output=True,
        )

    def start(self) -> None:
        env = self._environment()
        self._prepare(env)
        for _attempt in range(3):  # a free port can be taken between choosing and binding it
            self.port = _free_port()
            command = [
                sys.executable,
                "-m",
                "jupyter",
                "lab",
                "--no-browser",
                "--ip=127.0.0.1",
                f"--port={self.port}",
                "--ServerApp.port_retries=0",
                f"--IdentityProvider.token={self.token}",
                f"--ServerApp.root_dir={self.root}",
                "--allow-root",
                "--ServerApp.open_browser=False",
                "--LabApp.news_url=None",
                "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
                "--LabApp.extension_manager=readonly",
            ]
            with self.log_path.open("ab") as log:
                log.write(f"\n$ {' '.join(command)}\n".encode())
                log.flush()
                self.proc = subprocess.Popen(
                    command,
                    cwd=self.base,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # its own process group, so stop() reaches it all
                )
            if self._wait_ready():
                return
        raise RuntimeError(f"jupyter lab did not start; its log ends with:\n{self.log_tail()}")

    def _wait_ready(self) -> bool:
        """True once /api/status answers; False if the server exited first."""
        assert self.proc is not None

        def ready() -> bool | None:
            if self.proc is not None and self.proc.poll() is not None:
                return True  # exited: stop polling, the caller looks at the return code
            try:
                self.api("status", timeout=2.0)
            except (OSError, ValueError):
                return None
            return True

        try:
            wait_until(ready, SERVER_START_TIMEOUT, "jupyter lab to answer /api/status")
        except TimeoutError as error:
            self.stop()
            raise TimeoutError(f"{error}; its log ends with:\n{self.log_tail()}") from None
        return self.proc.poll() is None

    def _leftover_kernels(self) -> list[int]:
        """Pids of kernels this server started that are still alive (Linux: via /proc).

        jupyter_client starts each kernel in a session of its own, so killing the server's
        process group does not reach them; their command line names a connection file in
        this server's private runtime dir.
        """
        marker = str(self.base / "runtime").encode()
        pids = []
        for entry in Path("/proc").glob("[0-9]*"):
            try:
                if marker in (entry / "cmdline").read_bytes():
                    pids.append(int(entry.name))
            except OSError:
                continue
        return pids

    def stop(self) -> None:
        """Stop the server and everything it started; safe to call more than once."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(OSError):
                self.shutdown_sessions()
            # SIGTERM lets the server shut its kernels down; SIGKILL if it does not finish.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=15)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # anything left in its group
        for pid in self._leftover_kernels():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


# ---------------------------------------------------------------------------- page helpers


def expect(locator: Locator) -> LocatorAssertions:
    """Playwright's ``expect`` for a locator, imported on first use."""
    from playwright.sync_api import expect as playwright_expect

    return playwright_expect(locator)


def notebook_url(server: LabServer, path: str, ui: UI = "lab") -> str:
    if ui == "lab":
        # A new workspace each time, or Lab restores the tabs of an earlier visit.
        workspace = f"cortex-{uuid.uuid4().hex[:12]}"
        return (
            f"{server.url}/lab/workspaces/{workspace}/tree/{quote(path)}?reset&token={server.token}"
        )
    return f"{server.url}/notebooks/{quote(path)}?token={server.token}"


def dismiss_popups(page: Page) -> None:
    """Close toast notifications (e.g. Jupyter news) that would cover screenshots."""
    for button in page.locator(".jp-Notification-Toast-Close").all():
        with contextlib.suppress(Exception):
            button.click(timeout=2_000)


def open_notebook(page: Page, server: LabServer, path: str, ui: UI = "lab") -> None:
    """Open ``path`` (relative to the server root) and wait until its kernel is idle; in
    the ``notebook`` UI, skip the test when Notebook 7 is not installed."""
    if ui == "notebook":
        require_notebook7()
    page.goto(notebook_url(server, path, ui), wait_until="domcontentloaded")
    notebook = page.locator(".jp-NotebookPanel:visible .jp-Notebook")
    expect(notebook.locator(".jp-Cell").first).to_be_visible(timeout=PAGE_TIMEOUT_MS)
    # Cells sent before the kernel is idle can be dropped silently: wait for it, on the
    # server and in the page.
    server.wait_kernel_idle(path)
    expect(page.locator(".jp-Dialog")).to_have_count(0)
    dismiss_popups(page)


CODE_CELL_PROMPTS_JS = """() => Array.from(
    document.querySelectorAll('.jp-NotebookPanel .jp-Notebook .jp-CodeCell .jp-InputPrompt'),
    prompt => prompt.textContent.trim())"""

# Finished: nothing is running or queued ("[*]") and at least one cell got its number.
RUN_FINISHED_JS = r"""() => {
    const prompts = Array.from(
        document.querySelectorAll('.jp-NotebookPanel .jp-Notebook .jp-CodeCell .jp-InputPrompt'),
        prompt => prompt.textContent);
    return !prompts.some(text => text.includes('*')) && prompts.some(text => /\d/.test(text));
}"""


def _click_menu(page: Page, menu: str, item: str) -> None:
    page.locator(".lm-MenuBar-item", has_text=re.compile(rf"^{re.escape(menu)}$")).click()
    entry = page.locator(".lm-Menu-item:visible .lm-Menu-itemLabel").filter(
        has_text=re.compile(rf"^{re.escape(item)}$")
    )
    entry.click()


def run_all(page: Page, ui: UI = "lab", timeout_ms: int = RUN_ALL_TIMEOUT_MS) -> list[str]:
    """Run every cell (menu Run > Run All Cells) and wait until the run has finished.

    Returns the code cells' prompts: ``[1]:`` … when every cell ran; a cell that raised stops
    the run, and the cells after it are back to ``[ ]:``. The same menu exists in Lab and
    Notebook 7.
    """
    from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

    del ui  # same menu in both; kept so callers say which UI they drive
    _click_menu(page, "Run", "Run All Cells")
    # "Run All" marks every code cell "[*]" at once; each gets its number once its reply and
    # outputs have arrived, and an error clears the queued ones.
    try:
        page.wait_for_function(RUN_FINISHED_JS, timeout=timeout_ms, polling=100)
    except PlaywrightTimeoutError:
        # Say where it stuck: the cell still running, what it shows, and a screenshot.
        stuck = page.evaluate(STUCK_CELL_JS)
        shot = screenshot(page, "run-all-timeout")
        raise AssertionError(f"Run All did not finish; still running: {stuck} ({shot})") from None
    prompts: list[str] = page.evaluate(CODE_CELL_PROMPTS_JS)
    return prompts


# The first cell still marked [*]: its source's first line and the end of its output.
STUCK_CELL_JS = r"""() => {
    const cells = Array.from(
        document.querySelectorAll('.jp-NotebookPanel .jp-Notebook .jp-CodeCell'));
    const cell = cells.find(c =>
        (c.querySelector('.jp-InputPrompt')?.textContent || '').includes('*'));
    if (!cell) { return 'no cell marked [*]'; }
    const source = cell.querySelector('.jp-InputArea-editor .cm-line')?.textContent || '';
    const output = (cell.querySelector('.jp-OutputArea')?.textContent || '').slice(-400);
    return `cell ${cells.indexOf(cell) + 1} (${source}): ${output}`;
}"""


def write_notebook(server: LabServer, name: str, cells: list[str]) -> str:
    """Write a notebook of code ``cells`` (the venv's "python3" kernel) into the server's
    root; returns its path for ``open_notebook``."""
    import nbformat

    notebook = nbformat.v4.new_notebook()
    notebook.metadata["kernelspec"] = {
        "display_name": "Python 3 (ipykernel)",
        "language": "python",
        "name": "python3",
    }
    notebook.cells = [nbformat.v4.new_code_cell(source) for source in cells]
    nbformat.write(notebook, str(server.root / name))
    return name


CELLS = ".jp-NotebookPanel:visible .jp-Notebook .jp-CodeCell"


def run_cell(page: Page, index: int) -> Locator:
    """Run the ``index``-th code cell (click its prompt, Shift+Enter); returns the cell."""
    cell = page.locator(CELLS).nth(index)
    cell.locator(".jp-InputPrompt").click()
    page.keyboard.press("Shift+Enter")
    return cell


def screenshot(page: Page, name: str) -> Path:
    """Save a screenshot of the page as artifacts/screenshots/<name>.png; return its path."""
    SCREENSHOTS_DIR.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS_DIR / f"{name}.png"
    page.screenshot(path=str(path))
    return path


def trust_notebook(server: LabServer, path: str) -> None:
    """Sign the notebook at ``path`` in the server's own trust database, as JupyterLab
    does for the notebooks it saves (a notebook reopened by its author is trusted)."""
    subprocess.run(
        [sys.executable, "-m", "jupyter", "trust", str(server.root / path)],
        env=server._environment(),
        check=True,
        capture_output=True,
    )
