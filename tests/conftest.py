"""Fixtures shared across the test suite."""

from __future__ import annotations

import os
import random
import signal
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import settings
from IPython.core.interactiveshell import InteractiveShell
from traitlets.config import Config

from tests.models.fake_openai_server import FakeOpenAIServer, serve

# Property tests check behaviour, never speed: no per-example deadline (on a shared, busy
# 2-core machine one slow example is not a failure; bench/ measures speed).
settings.register_profile("cortex", deadline=None)
settings.load_profile("cortex")

#: What uses the live model's llama-server (cortex_jupyter.local's servers are the user's,
#: one per name, their state in the user's cache): these run in one worker, in turn.
LIVE_MODEL = (
    "tests/live/",
    "tests/browser/test_live_model_cell.py",
    "notebooks/04_live_model.ipynb",
)


def scope_of(nodeid: str) -> str:
    """The unit a pytest-xdist worker runs whole: the test's file (a notebook's cells
    share one kernel, a module's fixtures start once), or one unit for everything that
    uses the live model."""
    where = nodeid.split("::", 1)[0]
    return "live-model" if where.startswith(LIVE_MODEL) else where


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """With pytest-xdist (``-n 2``, as scripts/test.sh runs), tests are sent to the
    workers in the units ``scope_of`` names. (Not ``--dist loadgroup``'s markers:
    pytest-xdist 3.8 renames a grouped test's node id, which pytest 9.2 no longer lets
    it do, so every test went alone and a notebook's cells were split.)"""
    from xdist.scheduler import LoadScopeScheduling

    # Units go out in the order they are collected, not the largest first: the live
    # model's unit, the longest, then starts at once (its first test,
    # tests/browser/test_live_model_cell.py, is the first collected) instead of last.
    config.option.loadscopereorder = False

    class ByScope(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return scope_of(nodeid)

    return ByScope(config, log)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--shuffle",
        metavar="SEED",
        default=None,
        help="run the test files, and the tests inside each file, in an order drawn from "
        "SEED ('random' draws a seed and prints it, so a failure can be replayed). "
        "A notebook's cells keep their order: they share one kernel.",
    )


def pytest_configure(config: pytest.Config) -> None:
    # The seed is drawn once, in the first process (under xdist: the controller, whose
    # environment the workers it starts inherit), so every worker collects the same order,
    # as xdist requires.
    if config.getoption("--shuffle") == "random":
        seed = os.environ.setdefault(
            "CORTEX_SHUFFLE_SEED", str(random.SystemRandom().randrange(10**6))
        )
        config.option.shuffle = seed


def pytest_report_header(config: pytest.Config) -> str | None:
    seed = config.getoption("--shuffle")
    return None if seed is None else f"tests shuffled with --shuffle {seed} (to replay this order)"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    seed = config.getoption("--shuffle")
    if seed is None:
        return
    draw = random.Random(seed)
    files: dict[str, list[pytest.Item]] = {}
    for item in items:
        files.setdefault(item.nodeid.split("::", 1)[0], []).append(item)
    order = list(files)
    draw.shuffle(order)
    shuffled: list[pytest.Item] = []
    for where in order:
        tests = files[where]
        if not where.endswith(".ipynb"):
            draw.shuffle(tests)
        shuffled.extend(tests)
    items[:] = shuffled


_SIGINT_BEFORE = pytest.StashKey[Any]()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    item.stash[_SIGINT_BEFORE] = signal.getsignal(signal.SIGINT)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """A test (its fixtures included) that leaves SIGINT handled by anything but what it
    found fails by name: it would leave the Stop button (``_thread.interrupt_main``, the
    kernel's SIGINT) dead for every later test in its worker, as a library doing it would
    in a user's kernel."""
    report = yield
    if call.when != "teardown" or _SIGINT_BEFORE not in item.stash:
        return report
    before = item.stash[_SIGINT_BEFORE]
    after = signal.getsignal(signal.SIGINT)
    if after is not before:
        signal.signal(signal.SIGINT, before)  # the tests after it start as they should
        report.outcome = "failed"
        report.longrepr = (
            f"{item.nodeid} left SIGINT handled by {after!r} (it was {before!r}): a Stop "
            "(KeyboardInterrupt) would no longer reach the tests after it"
        )
    return report


@pytest.fixture(scope="session")
def _shell(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InteractiveShell]:
    """One real IPython shell for the session, kept away from the user's ~/.ipython."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("IPYTHONDIR", str(tmp_path_factory.mktemp("ipython")))
        config = Config()
        config.HistoryManager.hist_file = ":memory:"
        shell = InteractiveShell.instance(config=config)
        yield shell
        InteractiveShell.clear_instance()


@pytest.fixture(scope="session")
def _store_file(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("store") / "runs.db")


@pytest.fixture(autouse=True)
def _store_away(monkeypatch: pytest.MonkeyPatch, _store_file: str) -> None:
    """Every run the suite makes is stored (the store is on by default), in one file of
    the test session, never in the user's data directory. Kernels and subprocesses the
    tests start inherit it."""
    monkeypatch.setenv("CORTEX_STORE", _store_file)


@pytest.fixture
def ip(_shell: InteractiveShell) -> Iterator[InteractiveShell]:
    """The shell with ``cortex_jupyter`` loaded; unloaded and emptied again afterwards."""
    _shell.run_line_magic("load_ext", "cortex_jupyter")
    yield _shell
    _shell.run_line_magic("unload_ext", "cortex_jupyter")
    _shell.reset(new_session=False)
    # A test's %config CortexMagics... stays in the shell's config, and loading the
    # extension again would apply it to the next test: each test starts from defaults.
    _shell.config.pop("CortexMagics", None)


#: The API key the loopback server's tests set; nothing cortex shows may contain it.
SECRET = "sk-test-SECRET0123456789abcdef"


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAIServer]:
    """An OpenAI-compatible server on 127.0.0.1 (tests/models/fake_openai_server.py),
    with the openai SDK's own variables pointing at it and a key to keep secret."""
    for running in serve():
        monkeypatch.setenv("OPENAI_API_KEY", SECRET)
        monkeypatch.setenv("OPENAI_BASE_URL", running.url)
        yield running
