"""Tools off the kernel's process (issue 13 §2): ``@tool(executor="dask" | Executor)``,
through the real runtime (an ``Agent`` replaying a script).

One local cluster for the whole module (``executors.dask_client()`` starts it: two worker
processes on CI's two cores), one spawned one-process pool. Nothing here asserts on
wall-clock time (bench/executor_bench.py measures speed): waiting is always for a state,
with a deadline only so that a broken build fails instead of hanging.
"""

from __future__ import annotations

import _thread
import json
import logging
import multiprocessing
import os
import pickle
import sqlite3
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, ProcessPoolExecutor
from pathlib import Path
from typing import Any

import anyio
import dask
import pytest
from dask.system import CPU_COUNT
from distributed import Client

import cortex_jupyter
from cortex_jupyter.models import ScriptModel
from cortex_jupyter.runtime import (
    ActionNode,
    ActionOutput,
    Agent,
    Progress,
    RegistrationError,
    Registry,
    RetryPolicy,
    Run,
)
from cortex_jupyter.runtime.integrations import executors
from cortex_jupyter.runtime.integrations.executors import ClusterInfo, NotSendable, WorkerDied

pytestmark = pytest.mark.anyio

FAST_RETRY = RetryPolicy(base=0.01, factor=2.0, max_delay=0.05)


# ---- fixtures and helpers ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def _cluster() -> Iterator[None]:
    """The module's cluster settings, the way a notebook starts one (no address set); the
    cluster is closed when the module is done."""
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("DASK_SCHEDULER_ADDRESS", raising=False)
        executors.set_dask_address(None)
        try:
            yield
        finally:
            executors.close_all()


@pytest.fixture
def client(_cluster: None) -> Client:
    """The session's cluster: started once for the module and shared, started again only
    after a test closed it (the magic's unload closes it), so the tests run in any order."""
    return executors.dask_client()


@pytest.fixture(scope="module")
def pool() -> Iterator[ProcessPoolExecutor]:
    # spawn, not fork: this process runs threads (the Dask client's loop, anyio workers).
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        yield pool


@pytest.fixture(params=["dask", "pool", "client_executor"])
def executor(request: pytest.FixtureRequest, client: Client) -> Any:
    """Each kind of ``executor=``: the session's cluster, a process pool, and a Dask
    client's own ``concurrent.futures`` executor."""
    if request.param == "dask":
        return "dask"
    if request.param == "pool":
        return request.getfixturevalue("pool")
    return client.get_executor()  # type: ignore[no-untyped-call]


async def run_action(
    registry: Registry,
    name: str,
    parameters: dict[str, Any] | None = None,
    namespace: dict[str, Any] | None = None,
    run: Run | None = None,
    **fields: Any,
) -> ActionNode:
    """Run one action through an agent (a one-turn script) and return its node."""
    body = json.dumps({"name": name, "parameters": parameters or {}, **fields})
    agent = Agent(model=ScriptModel(f'<action id="a">{body}</action>'), registry=registry,
                  retry=FAST_RETRY)  # fmt: skip
    done = await agent.run("go", namespace=namespace, run=run)
    return done.actions["a"]


async def run_tool(
    executor: Any,
    func: Callable[..., Any],
    parameters: dict[str, Any] | None = None,
    namespace: dict[str, Any] | None = None,
    run: Run | None = None,
    **fields: Any,
) -> ActionNode:
    """Register ``func`` alone, as a tool on ``executor``, and run it once as ``run_action``
    does (its node)."""
    registry = Registry(builtins=False)
    registry.register(func, executor=executor)
    return await run_action(registry, func.__name__, parameters, namespace, run, **fields)


def cluster_tasks(client: Client, tool: str) -> list[str]:
    """The keys of ``tool``'s calls the scheduler still knows about."""

    def task_keys(dask_scheduler: Any) -> list[str]:
        return list(map(str, dask_scheduler.tasks))

    keys = client.run_on_scheduler(task_keys)  # type: ignore[no-untyped-call]
    return sorted(key for key in keys if key.startswith(f"cortex-{tool}-"))


def executing(client: Client, tool: str) -> list[str]:
    """The keys of ``tool``'s calls some worker is still running."""
    per_worker = client.run(lambda dask_worker: [str(t.key) for t in dask_worker.state.executing])
    keys = [key for keys in per_worker.values() for key in keys]
    return sorted(key for key in keys if key.startswith(f"cortex-{tool}-"))


async def wait_for(condition: Callable[[], Any], what: str, deadline: float = 30.0) -> None:
    """Wait until ``condition()`` holds (a state, never a time; the deadline only stops a
    hang)."""
    with anyio.move_on_after(deadline):
        while not condition():
            await anyio.sleep(0.02)
        return
    pytest.fail(f"waited {deadline:g} s for {what}")


def spin(seconds: float) -> str:
    """CPU-bound, reporting progress as it goes (where a cancelled call stops)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        cortex_jupyter.progress(end - time.monotonic(), None, "spinning")
        sum(range(20_000))
    return "finished"


# ---- where it runs ---------------------------------------------------------------------------


async def test_a_tool_runs_in_another_process(executor: Any) -> None:
    offset = 1000  # a closure: the function travels by value, defined right here

    def heavy(n: int) -> tuple[int, int]:
        return os.getpid(), sum(range(n)) + offset

    node = await run_tool(executor, heavy, {"n": 3})

    assert node.status == "done", node.error
    pid, value = node.output
    assert value == 1003
    assert pid != os.getpid()


async def test_dask_tools_run_on_the_cluster_workers(client: Client) -> None:
    def where() -> int:
        return os.getpid()

    node = await run_tool("dask", where)

    assert node.output in client.run(os.getpid).values()


async def test_outputs_flow_to_dependent_actions(client: Client) -> None:
    registry = Registry(builtins=False)

    @registry.tool(executor="dask")
    def square(n: int) -> int:
        return n * n

    text = (
        '<action id="a">{"name": "square", "parameters": {"n": 3}, "output_key": "nine"}</action>'
        '<action id="b">{"name": "square", "parameters": {"n": "$nine"}}</action>'
        '<action id="c">{"name": "square", "parameters": {"n": 2}, "depends_on": ["b"]}</action>'
    )
    run = await Agent(model=ScriptModel(text), registry=registry).run("go")

    assert [run.actions[i].output for i in "abc"] == [9, 81, 4]
    finished_b = run.actions["b"].finished
    assert finished_b is not None and finished_b <= (run.actions["c"].started or 0.0)


def test_the_cluster_is_local_processes_one_thread_each_no_dashboard(client: Client) -> None:
    info = executors.cluster_info()

    assert (info.workers, info.threads) == (CPU_COUNT, CPU_COUNT)
    assert info.dashboard is None
    assert info.address is not None and info.address.startswith("tcp://127.0.0.1:")
    assert str(info).startswith(f"dask cluster at {info.address} (a local cluster started by")
    assert f"{CPU_COUNT} workers, {CPU_COUNT} threads" in str(info)
    assert str(info).endswith("dashboard: none")
    assert executors.dask_client() is client  # one cluster, not one per call


def test_cluster_info_before_any_cluster() -> None:
    assert str(ClusterInfo(None, "a local cluster started by cortex_jupyter")) == (
        'no cluster yet: the first executor="dask" tool will use a local cluster started by '
        "cortex_jupyter"
    )


# ---- cancellation ----------------------------------------------------------------------------


async def test_a_timeout_cancels_the_future_and_leaves_nothing_on_the_cluster(
    client: Client,
) -> None:
    node = await run_tool("dask", spin, {"seconds": 60}, timeout=1)

    assert node.status == "failed"
    assert node.error is not None and "timed out after 1 s" in node.error
    assert cluster_tasks(client, "spin") == []  # the scheduler forgot it before the node failed
    await wait_for(lambda: executing(client, "spin") == [], "the worker to stop the cancelled call")


async def test_stop_cancels_the_future_and_the_next_call_works(client: Client) -> None:
    registry = Registry(builtins=False)
    registry.register(spin, executor="dask")
    run = Run()

    async with anyio.create_task_group() as tg:
        tg.start_soon(run_action, registry, "spin", {"seconds": 60}, None, run)
        await wait_for(lambda: "a" in run.actions and run.actions["a"].progress, "progress")
        assert len(executing(client, "spin")) == 1
        tg.cancel_scope.cancel()  # what the Stop button does to the run

    assert run.actions["a"].status == "cancelled"
    assert cluster_tasks(client, "spin") == []
    await wait_for(lambda: executing(client, "spin") == [], "the worker to stop the cancelled call")

    registry.register(spin, name="again", executor="dask")
    node = await run_action(registry, "again", {"seconds": 0.01})
    assert (node.status, node.output) == ("done", "finished")


def quiet_spin(seconds: float) -> int:
    """CPU-bound pure Python that never reports: only the worker's watchdog can stop it."""
    end = time.monotonic() + seconds
    total = 0
    while time.monotonic() < end:
        total += sum(range(1000))
    return total


async def test_stop_stops_a_call_that_never_reports_on_its_worker(client: Client) -> None:
    run = Run()

    async with anyio.create_task_group() as tg:
        tg.start_soon(run_tool, "dask", quiet_spin, {"seconds": 60}, None, run)
        await wait_for(lambda: executing(client, "quiet_spin"), "the call to start on a worker")
        tg.cancel_scope.cancel()

    assert run.actions["a"].status == "cancelled"
    assert cluster_tasks(client, "quiet_spin") == []
    # Well before its 60 s: the worker's thread is free again.
    await wait_for(lambda: executing(client, "quiet_spin") == [], "the worker to stop the call")
    client.wait_for_workers(CPU_COUNT, timeout=30)  # stopped, not killed


# ---- failures --------------------------------------------------------------------------------


async def test_retries_apply(tmp_path: Path) -> None:
    marker = tmp_path / "attempts"

    def flaky() -> str:
        tries = int(marker.read_text()) + 1 if marker.exists() else 1
        marker.write_text(str(tries))
        if tries == 1:
            raise ConnectionError("first attempt fails")
        return f"ok after {tries}"

    node = await run_tool("dask", flaky, retry=1)

    assert (node.status, node.output, node.attempts) == ("done", "ok after 2", 2)


async def test_an_exception_keeps_its_type_and_message(executor: Any) -> None:
    class NotEven(ValueError):
        pass

    def halve(n: int) -> int:
        if n % 2:
            raise NotEven(f"n must be even, got {n}")
        return n // 2

    node = await run_tool(executor, halve, {"n": 3})

    assert node.status == "failed"
    assert node.error == "NotEven: n must be even, got 3"
    assert isinstance(node.exception, ValueError)
    assert 'raise NotEven(f"n must be even' in str(node.exception.__cause__)  # where it raised


async def test_a_worker_that_dies_gives_a_clear_error(client: Client) -> None:
    def die() -> None:
        os._exit(3)

    node = await run_tool("dask", die)

    assert node.status == "failed"
    assert isinstance(node.exception, WorkerDied)
    assert node.error is not None
    assert node.error.startswith(
        "the worker running die() on the dask cluster died before it answered (KilledWorker"
    )
    client.wait_for_workers(CPU_COUNT, timeout=60)  # its nanny starts a new one


async def test_a_broken_process_pool_gives_a_clear_error() -> None:
    pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))

    def die() -> None:
        os._exit(3)

    try:
        node = await run_tool(pool, die)
    finally:
        pool.shutdown()

    assert node.error is not None
    assert node.error.startswith("the worker running die() on a ProcessPoolExecutor died")
    assert "make a new one" in node.error


# ---- what cannot be sent ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("executor_name", "where"), [("dask", "the dask cluster"), ("pool", "a ProcessPoolExecutor")]
)
async def test_an_unpicklable_argument_is_named(
    request: pytest.FixtureRequest, executor_name: str, where: str
) -> None:
    executor: str | Executor = "dask"
    if executor_name == "pool":
        executor = request.getfixturevalue("pool")
    else:
        request.getfixturevalue("client")

    def count_rows(conn: Any, table: str) -> int:
        return 0

    conn = sqlite3.connect(":memory:")
    try:
        node = await run_tool(
            executor, count_rows, {"conn": "$conn", "table": "t"}, namespace={"conn": conn}
        )
    finally:
        conn.close()

    assert node.status == "failed"
    assert isinstance(node.exception, NotSendable)
    assert node.error is not None
    assert node.error.startswith(
        f"cannot send parameter 'conn' (a sqlite3.Connection) to {where}: it cannot be pickled "
        "(cannot pickle 'sqlite3.Connection' object); pass something that can be"
    )


async def test_an_unpicklable_result_is_named(client: Client) -> None:
    def make_lock() -> Any:
        return threading.Lock()

    node = await run_tool("dask", make_lock)

    assert node.error is not None
    assert node.error.startswith(
        "cannot send the result of the tool (a _thread.lock) back from the dask cluster: "
        "it cannot be pickled (cannot pickle '_thread.lock' object)"
    )


def test_not_sendable_message() -> None:
    error = NotSendable("parameter 'conn'", "sqlite3.Connection", "the dask cluster", "nope")
    assert str(error) == (
        "cannot send parameter 'conn' (a sqlite3.Connection) to the dask cluster: it cannot "
        "be pickled (nope); pass something that can be (a path, a URL, a connection string) "
        "and open it inside the tool"
    )


@pytest.mark.parametrize(
    "error",
    [
        NotSendable("the result of f()", "", "the dask cluster", "nope", back=True),
        WorkerDied("die", "a ProcessPoolExecutor", "BrokenProcessPool"),
        executors.ClusterUnavailable("tcp://127.0.0.1:9", "set_dask_address", "OSError"),
    ],
)
def test_errors_pickle_with_their_message_and_fields(error: Exception) -> None:
    back = pickle.loads(pickle.dumps(error))

    assert (type(back), str(back), vars(back)) == (type(error), str(error), vars(error))


# ---- what the tool writes --------------------------------------------------------------------


def chatty(n: int) -> str:
    """Everything a tool can write, from the worker."""
    print("starting", n)
    print("a problem", file=sys.stderr)
    logging.getLogger("chatty").warning("disk at %d%%", 93)
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.warn("old API", DeprecationWarning, stacklevel=1)
    for i in range(n):
        cortex_jupyter.progress(i + 1, n, "rows")
    print("done")
    return "ok"


async def test_output_logs_warnings_and_progress_reach_the_node(executor: Any) -> None:
    run = Run()

    node = await run_tool(executor, chatty, {"n": 3}, run=run)

    assert node.status == "done", node.error
    assert node.stdout == "starting 3\ndone\n"
    assert node.stderr == "a problem\n"
    assert node.logs[0] == "WARNING chatty: disk at 93%"
    assert node.logs[1].startswith("DeprecationWarning: old API (")
    assert node.progress == Progress(3.0, 3.0, "rows")
    outputs = [e for e in run.events if isinstance(e, ActionOutput) and e.id == "a"]
    assert "".join(e.stdout for e in outputs) == node.stdout  # each line reported once


async def test_output_reaches_the_node_when_the_tool_raises(executor: Any) -> None:
    def fails() -> None:
        print("got this far")
        cortex_jupyter.progress(1, 2)
        raise RuntimeError("then it broke")

    node = await run_tool(executor, fails)

    assert (node.error, node.stdout) == ("RuntimeError: then it broke", "got this far\n")
    assert node.progress == Progress(1.0, 2.0, "")


async def test_dask_progress_and_output_arrive_while_the_tool_runs(
    client: Client, tmp_path: Path
) -> None:
    """The tool waits for the test to have *seen* its first report on the node: it can
    finish only if progress and print travel live."""
    seen = tmp_path / "seen"

    def waits_to_be_seen(flag: str) -> str:
        print("half way")
        cortex_jupyter.progress(1, 2, "waiting to be seen")
        for _ in range(3000):
            if os.path.exists(flag):
                cortex_jupyter.progress(2, 2, "seen")
                return "seen live"
            time.sleep(0.01)
        return "never seen"

    run = Run()
    async with anyio.create_task_group() as tg:
        tg.start_soon(run_tool, "dask", waits_to_be_seen, {"flag": str(seen)}, None, run)
        await wait_for(lambda: "a" in run.actions and run.actions["a"].progress, "progress")
        assert run.actions["a"].status == "running"
        assert run.actions["a"].progress == Progress(1.0, 2.0, "waiting to be seen")
        await wait_for(lambda: run.actions["a"].stdout == "half way\n", "live stdout")
        seen.touch()

    node = run.actions["a"]
    assert (node.output, node.progress, node.stdout) == (
        "seen live", Progress(2.0, 2.0, "seen"), "half way\n"
    )  # fmt: skip


async def test_a_generator_tool_reports_partial_output(client: Client) -> None:
    def counts(n: int) -> Iterator[int]:
        yield from range(1, n + 1)

    run = Run()
    node = await run_tool("dask", counts, {"n": 3}, run=run)

    assert (node.status, node.output) == ("done", 3)
    partials = [e.partial for e in run.events if isinstance(e, ActionOutput) and e.partial]
    assert partials and partials[-1] == "3"


# ---- registration ----------------------------------------------------------------------------


def test_registration_refuses_an_async_function() -> None:
    async def fetch() -> None:
        pass

    with pytest.raises(RegistrationError, match="executor= runs sync functions elsewhere"):
        Registry(builtins=False).register(fetch, executor="dask")


def test_registration_refuses_what_is_not_an_executor() -> None:
    with pytest.raises(
        RegistrationError,
        match=r"executor must be 'dask' or a concurrent\.futures\.Executor, not 4",
    ):
        Registry(builtins=False).register(spin, executor=4)


def test_importing_executors_loads_no_engine() -> None:
    """A notebook that never sends a tool elsewhere never loads dask, distributed or
    cloudpickle: the package imports them on first use."""
    code = (
        "import sys\n"
        "from cortex_jupyter.runtime.integrations import executors\n"
        "print(sorted(m for m in ('cloudpickle', 'dask', 'distributed') if m in sys.modules))"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )

    assert (done.returncode, done.stdout.strip()) == (0, "[]"), done.stderr


# ---- through a script and through the magic ----------------------------------------------------

SCRIPT = """
import dataclasses
import json
import os

import psutil

import cortex_jupyter
from cortex_jupyter.models import ScriptModel
from cortex_jupyter.runtime.integrations import executors

@cortex_jupyter.tool(executor="dask")
def crunch(n: int) -> dict:
    print("crunching", n)
    cortex_jupyter.progress(n, n, "rows")
    return {"pid": os.getpid(), "total": sum(range(n))}

def children():
    # Not multiprocessing's resource tracker: the interpreter's own, it ends after us.
    kids = psutil.Process().children(recursive=True)
    return [p for p in kids if "resource_tracker" not in " ".join(p.cmdline())]

if __name__ == "__main__":  # the cluster's worker processes are spawned
    agent = cortex_jupyter.Agent(model=ScriptModel(
        '<action id="c">{"name": "crunch", "parameters": {"n": 10}, "output_key": "out"}</action>'
        "<response>done</response>"
    ))
    run = agent.run_sync("go")
    node = run.actions["c"]
    workers = sorted(executors.dask_client().run(os.getpid).values())
    started = children()
    executors.close_all()
    left = [" ".join(p.cmdline()) for p in children()]
    print(json.dumps({
        "me": os.getpid(), "status": node.status, "error": node.error, "output": node.output,
        "stdout": node.stdout, "progress": list(dataclasses.astuple(node.progress)),
        "workers": workers, "started": [p.pid for p in started], "left": left,
    }))
"""


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_agent_run_sync_in_a_script_and_close_all_leaves_no_process(tmp_path: Path) -> None:
    script = tmp_path / "heavy.py"
    script.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if k != "DASK_SCHEDULER_ADDRESS"}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[2]),
                                         env.get("PYTHONPATH", "")])  # fmt: skip
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120
    )

    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.splitlines()[-1])
    assert (result["status"], result["error"]) == ("done", None)
    assert result["output"]["total"] == 45
    assert result["output"]["pid"] in result["workers"] and result["output"]["pid"] != result["me"]
    assert (result["stdout"], result["progress"]) == ("crunching 10\n", [10.0, 10.0, "rows"])
    assert len(result["workers"]) == CPU_COUNT
    assert set(result["workers"]) <= set(result["started"])
    assert result["left"] == []  # close_all() ended every process the cluster had started
    assert [pid for pid in result["started"] if alive(pid)] == []  # and the script left none


@pytest.fixture
def magic_tools(client: Client) -> Iterator[None]:
    """Dask tools in the default registry (what ``@cortex_jupyter.tool`` fills)."""
    cortex_jupyter.tool(name="dask_pid", executor="dask")(_report_pid)
    cortex_jupyter.tool(name="dask_spin", executor="dask")(spin)
    yield
    for name in ("dask_pid", "dask_spin"):
        cortex_jupyter.default_registry.remove("tool", name)


def _report_pid(label: str) -> int:
    print("running", label)
    cortex_jupyter.progress(1, 1, label)
    return os.getpid()


def test_the_magic_runs_a_dask_tool_and_stop_cancels_its_call(
    ip: Any, magic_tools: None, client: Client
) -> None:
    """One test for both: unloading the extension afterwards closes the module's cluster."""
    ip.run_cell_magic(
        "cortex",
        "--script --delay 0",
        '<action id="p">{"name": "dask_pid", "parameters": {"label": "from a cell"}, '
        '"output_key": "worker_pid"}</action>\n<response>ran in $worker_pid</response>',
    )

    assert ip.user_ns["worker_pid"] in client.run(os.getpid).values()
    node = ip.user_ns["_cortex"].actions["p"]
    assert (node.status, node.stdout) == ("done", "running from a cell\n")
    assert node.progress == Progress(1.0, 1.0, "from a cell")

    def press_stop_once_it_runs() -> None:
        deadline = time.monotonic() + 30
        while not executing(client, "spin") and time.monotonic() < deadline:
            time.sleep(0.02)
        _thread.interrupt_main()  # what the kernel's Stop button does

    stopper = threading.Thread(target=press_stop_once_it_runs)
    stopper.start()
    try:
        with pytest.raises(KeyboardInterrupt):  # the cell ends at once, as in test_magic.py
            ip.run_cell_magic(
                "cortex",
                "--script --delay 0",
                '<action id="s">{"name": "dask_spin", "parameters": {"seconds": 60}}</action>',
            )
    finally:
        stopper.join()

    assert ip.user_ns["_cortex"].actions["s"].status == "cancelled"
    assert cluster_tasks(client, "spin") == []
    deadline = time.monotonic() + 30
    while executing(client, "spin") and time.monotonic() < deadline:
        time.sleep(0.02)
    assert executing(client, "spin") == []


# ---- the scheduler's address (last: it replaces the module's cluster) --------------------------


async def test_an_unreachable_scheduler_gives_a_clear_error(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = Registry(builtins=False)
    registry.register(spin, executor="dask")
    try:
        executors.set_dask_address("tcp://127.0.0.1:9")  # closes what it had opened
        assert str(executors.cluster_info()) == (
            'no cluster yet: the first executor="dask" tool will use the scheduler at '
            "tcp://127.0.0.1:9 (from set_dask_address)"
        )
        with dask.config.set({"distributed.comm.timeouts.connect": "1s"}):
            node = await run_action(registry, "spin", {"seconds": 0})
        assert node.error is not None
        assert node.error.startswith(
            "could not connect to the dask scheduler at tcp://127.0.0.1:9 (from "
            "set_dask_address): OSError: Timed out trying to connect"
        )
        monkeypatch.setenv("DASK_SCHEDULER_ADDRESS", "tcp://127.0.0.1:10")
        assert "tcp://127.0.0.1:9 (from set_dask_address)" in str(executors.cluster_info())
        executors.set_dask_address(None)
        assert "tcp://127.0.0.1:10 (from DASK_SCHEDULER_ADDRESS)" in str(executors.cluster_info())
    finally:
        executors.set_dask_address(None)
