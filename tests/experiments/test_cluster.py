"""Tries on a Dask cluster (issue 34 item 7): ``ClusterRunner`` on a real
``LocalCluster`` of two worker processes, one thread each.

The tools are this module's functions: cloudpickle sends them by reference and each
worker imports this module. Nothing here asserts on wall-clock time: waiting is for a
state (a file, an event), with a deadline only so that a broken build fails instead of
hanging.
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from distributed import Client, LocalCluster

from cortex_jupyter.experiments.cluster import ClusterRunner, WorkerLost
from cortex_jupyter.models import ScriptModel
from cortex_jupyter.runtime import Agent, Registry, Run
from cortex_jupyter.runtime.core.events import ActionStatus

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# ---- the tools (run on the workers) ------------------------------------------------------------


def where(folder: str, tag: str, others: int = 0) -> dict[str, Any]:
    """Writes this process's id under ``folder/tag``, waits until ``others`` more tries
    have written theirs (so they run at the same time), and returns it."""
    Path(folder, f"{tag}.pid").write_text(str(os.getpid()))
    while len(list(Path(folder).glob("*.pid"))) < others + 1:
        import time

        time.sleep(0.01)
    return {"pid": os.getpid(), "tag": tag}


async def hold(folder: str) -> str:
    """Writes its pid, then waits until cancelled; says so in ``folder/stopped``."""
    Path(folder, "hold.pid").write_text(str(os.getpid()))
    try:
        await anyio.sleep(3600)
    finally:
        Path(folder, "stopped").write_text("yes")
    return "never"


async def die_once(folder: str) -> str:
    """Kills its own worker the first time, at once (the events it sent may die with it);
    run again, says so in ``folder/again`` and holds, as a long tool would."""
    died = Path(folder, "died")
    if not died.exists():
        died.write_text(str(os.getpid()))
        os.kill(os.getpid(), signal.SIGKILL)
    Path(folder, "again").write_text(str(os.getpid()))
    await anyio.sleep(3600)
    return "never"


def tools() -> Registry:
    registry = Registry(builtins=False)
    registry.register(where)
    registry.register(hold)
    registry.register(die_once)
    return registry


def agent_calling(name: str, answer: str = "done", **parameters: Any) -> Agent:
    body = json.dumps({"name": name, "parameters": parameters, "output_key": "found"})
    script = f'<action id="a">{body}</action>\n--- next turn ---\n<response>{answer}</response>'
    return Agent(model=ScriptModel(script, delay=0), registry=tools(), tools=[name])


# ---- fixtures ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def client() -> Iterator[Client]:
    # An IPython shell an earlier test made leaves a ``__main__`` without ``__spec__``, which
    # multiprocessing's spawn (the nannies' way to start workers) reads: "None" is what a
    # script run with ``python -c`` has, and spawn takes it.
    main = sys.modules["__main__"]
    with pytest.MonkeyPatch.context() as patch:
        if not hasattr(main, "__spec__"):
            patch.setattr(main, "__spec__", None, raising=False)
        yield from _client()


def _client() -> Iterator[Client]:
    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, protocol="tcp",
            host="127.0.0.1", dashboard_address="127.0.0.1:0",
        ) as cluster,
        Client(cluster, set_as_default=False) as client,
    ):  # fmt: skip
        yield client


@pytest.fixture
def runner(client: Client) -> Iterator[ClusterRunner]:
    client.wait_for_workers(2, timeout=60)  # a test may have killed one: its nanny restarts it
    runner = ClusterRunner(client)
    yield runner
    runner.close()


async def wait_for(condition: Callable[[], Any], what: str, deadline: float = 60.0) -> None:
    with anyio.move_on_after(deadline):
        while not condition():
            await anyio.sleep(0.02)
        return
    pytest.fail(f"waited {deadline:g} s for {what}")


def try_tasks(client: Client) -> list[str]:
    def keys(dask_scheduler: Any) -> list[str]:
        return [str(key) for key in dask_scheduler.tasks]

    found = client.run_on_scheduler(keys)  # type: ignore[no-untyped-call]
    return [key for key in found if key.startswith("cortex-try-")]


# ---- the tests --------------------------------------------------------------------------------


async def test_a_try_runs_on_a_worker_and_its_events_come_back_in_order(
    runner: ClusterRunner, tmp_path: Path
) -> None:
    seen: list[tuple[Any, int]] = []
    run = Run()

    def on_event(event: Any) -> None:
        # In this process, the record filled up to this event, as a local observer sees it.
        seen.append((event, len(run.events)))

    agent = agent_calling("where", answer="found $found.pid", folder=str(tmp_path), tag="one")
    done = await runner.run_try(agent, "where are you?", {}, on_event, run=run)

    worker_pid = int((tmp_path / "one.pid").read_text())
    assert worker_pid != os.getpid()
    assert done is run
    assert done.status == "completed"
    assert done.answer == f"found {worker_pid}"
    node = done.actions["a"]
    assert (node.name, node.status) == ("where", "done")
    assert node.output == {"pid": worker_pid, "tag": "one"}
    assert done.variables == {"found": {"pid": worker_pid, "tag": "one"}}
    assert node.resolved == {"folder": str(tmp_path), "tag": "one"}
    assert node.action is not None and node.action.parameters["tag"] == "one"
    # Every event once, in the worker's order, each after the record took it in.
    assert [event for event, _ in seen] == done.events
    assert [count for _, count in seen] == list(range(1, len(done.events) + 1))
    statuses = [e.status for e, _ in seen if isinstance(e, ActionStatus) and e.id == "a"]
    assert statuses[-1] == "done" and "running" in statuses
    # Times are this process's clock, in the run's order.
    assert done.event_times == sorted(done.event_times)
    assert node.started is not None and node.finished is not None and done.ended is not None
    assert done.started <= node.started <= node.finished <= done.ended
    assert done.event_times[0] >= done.started


async def test_two_tries_at_once_run_on_two_workers(runner: ClusterRunner, tmp_path: Path) -> None:
    runs: dict[str, Run] = {}

    async def one(tag: str) -> None:
        agent = agent_calling("where", folder=str(tmp_path), tag=tag, others=1)
        runs[tag] = await runner.run_try(agent, f"try {tag}", {}, None)

    async with anyio.create_task_group() as group:
        group.start_soon(one, "x")
        group.start_soon(one, "y")

    pids = {tag: run.actions["a"].output["pid"] for tag, run in runs.items()}
    assert pids["x"] != pids["y"]
    assert {int((tmp_path / f"{tag}.pid").read_text()) for tag in "xy"} == set(pids.values())
    # Both tools ran at the same time (each waited for the other): their spans overlap.
    x, y = runs["x"].actions["a"], runs["y"].actions["a"]
    assert x.started < y.finished and y.started < x.finished  # type: ignore[operator]


async def test_cancelling_a_try_stops_it_on_its_worker(
    runner: ClusterRunner, client: Client, tmp_path: Path
) -> None:
    started = anyio.Event()

    def on_event(event: Any) -> None:
        if isinstance(event, ActionStatus) and event.status == "running":
            started.set()

    agent = agent_calling("hold", folder=str(tmp_path))
    async with anyio.create_task_group() as group:

        async def go() -> None:
            await runner.run_try(agent, "hold on", {}, on_event)

        group.start_soon(go)
        with anyio.fail_after(60):
            await started.wait()
        group.cancel_scope.cancel()

    await wait_for(lambda: (tmp_path / "stopped").exists(), "the tool to be cancelled")
    await wait_for(lambda: not try_tasks(client), "the cluster to forget the try")


async def test_a_worker_killed_mid_try_gives_a_clear_error(
    runner: ClusterRunner, tmp_path: Path
) -> None:
    agent = agent_calling("hold", folder=str(tmp_path))
    pid_file = tmp_path / "hold.pid"
    run = Run()
    failure: list[BaseException] = []

    async def go() -> None:
        try:
            await runner.run_try(agent, "hold on", {}, None, run=run, label="case-1 / gpt #1")
        except WorkerLost as exc:
            failure.append(exc)

    async with anyio.create_task_group() as group:
        group.start_soon(go)
        # The file is made, then written: wait for the whole pid, not the file alone.
        await wait_for(
            lambda: pid_file.exists() and pid_file.read_text().strip().isdigit(),
            "the tool to start",
        )
        os.kill(int(pid_file.read_text()), signal.SIGKILL)

    assert len(failure) == 1
    message = str(failure[0])
    assert message.startswith("the worker tcp://127.0.0.1:")
    assert "running case-1 / gpt #1 died before it finished" in message
    assert "\n" not in message


async def test_a_try_whose_worker_died_is_never_run_again_by_the_cluster(
    runner: ClusterRunner, client: Client, tmp_path: Path
) -> None:
    # The cluster runs a task again when its worker dies. The tools of the first attempt
    # ran (a refund): the second must not run them again, and the notebook must hear of
    # it even when none of the first attempt's events reached it (the worker killed at
    # once): it used to wait for the second attempt's tool, for ever.
    agent = agent_calling("die_once", folder=str(tmp_path))
    with anyio.fail_after(120), pytest.raises(WorkerLost) as lost:
        await runner.run_try(agent, "die", {}, None, label="case-2 / gpt #1")
    message = str(lost.value)
    assert message.startswith("the worker tcp://127.0.0.1:")
    assert f"(pid {(tmp_path / 'died').read_text()})" in message  # the worker that died
    assert "running case-2 / gpt #1 died before it finished" in message
    assert "started the try again on tcp://127.0.0.1:" in message
    await wait_for(lambda: not try_tasks(client), "the cluster to forget the try")
    assert not (tmp_path / "again").exists()  # the second attempt ran no tool


def test_the_same_try_sent_twice_runs_its_tools_once(client: Client, tmp_path: Path) -> None:
    # What the cluster does after a worker died (the task again, under the same try),
    # made on purpose: the second attempt answers "again" and runs nothing.
    from cortex_jupyter.experiments.cluster import TOPIC, _pack, _remote_try

    blob = _pack(agent_calling("where", folder=str(tmp_path), tag="t"), "where?", {})
    answers = [
        pickle.loads(
            client.submit(_remote_try, blob, "cortex-try-same", TOPIC, "r1", pure=False).result()
        )
        for _ in range(2)
    ]
    assert [a["kind"] for a in answers] == ["ok", "again"]
    assert answers[1]["first"] == f"{answers[0]['worker']} (pid {answers[0]['pid']})"
    assert "lines" not in answers[1] and len(list(tmp_path.glob("*.pid"))) == 1
    (tmp_path / "t.pid").unlink()
    # another try (another key) is a first attempt of its own
    other = client.submit(_remote_try, blob, "cortex-try-other", TOPIC, "r2", pure=False)
    assert pickle.loads(other.result())["kind"] == "ok"


def test_a_bad_executor_is_refused_in_one_line() -> None:
    with pytest.raises(ValueError, match=r"^executor= takes a distributed.Client or a Dask"):
        ClusterRunner(42)
    with pytest.raises(ValueError, match=r"is not a Dask scheduler's address"):
        ClusterRunner("localhost")


def set_environment(name: str, value: str | None) -> None:
    """Sets (``None``: removes) an environment variable of the process it runs in."""
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


def secret_from_environment(name: str) -> str:
    """Returns the worker's own environment variable ``name``."""
    return os.environ[name]


async def test_what_comes_back_is_redacted_with_the_workers_own_secrets(
    client: Client, tmp_path: Path
) -> None:
    # A credential only the workers have: the notebook's redaction cannot know it.
    secret = "wk-" + "7f3a9c1e5b2d4f60"
    client.run(set_environment, "WORKER_SERVICE_TOKEN", secret)  # type: ignore[no-untyped-call]
    registry = Registry(builtins=False)
    registry.register(secret_from_environment)
    body = json.dumps({"name": "secret_from_environment",
                       "parameters": {"name": "WORKER_SERVICE_TOKEN"}})  # fmt: skip
    script = f'<action id="s">{body}</action>\n--- next turn ---\n<response>ok</response>'
    agent = Agent(model=ScriptModel(script, delay=0), registry=registry)
    seen: list[Any] = []
    with ClusterRunner(client) as runner:
        run = await runner.run_try(agent, "read it", {}, seen.append)
    try:
        assert run.actions["s"].error is None
        assert run.actions["s"].status == "done"
        assert secret not in repr(seen)
        assert secret not in run.to_jsonl()
        assert "[redacted]" in repr(seen)
        # The notebook cannot redact what it does not know: the value stays redacted.
        assert run.actions["s"].output == "[redacted]"
    finally:
        client.run(set_environment, "WORKER_SERVICE_TOKEN", None)  # type: ignore[no-untyped-call]


async def test_an_address_opens_a_client_that_close_closes(client: Client) -> None:
    address = client.scheduler.address
    runner = ClusterRunner(address)
    try:
        assert runner.client is not client
        agent = Agent(model=ScriptModel("<response>hello</response>", delay=0))
        run = await runner.run_try(agent, "hi", {}, None)
        assert (run.status, run.answer) == ("completed", "hello")
    finally:
        runner.close()
    assert runner.client.status == "closed"
    assert client.status == "running"


def test_a_dataset_runs_on_the_cluster_and_its_tries_are_stored_and_judged(
    client: Client, tmp_path: Path
) -> None:
    from cortex_jupyter import store
    from cortex_jupyter.experiments import expect
    from cortex_jupyter.experiments.cases import Case, Dataset

    client.wait_for_workers(2, timeout=60)
    cases = Dataset(
        [Case(f"where {tag}?", name=tag, expect=[expect.tools(["where"]),
              expect.answer(contains="found")]) for tag in ("x", "y")],
        name="on-the-cluster",
    )  # fmt: skip
    agent = agent_calling("where", answer="found $found.pid", folder=str(tmp_path), tag="t")
    experiment = cases.run({"a": agent}, executor=client, concurrency=2, progress=False)
    assert [t.passed for t in experiment.tries] == [True, True], [
        t.reasons() for t in experiment.tries
    ]
    for tried in experiment.tries:
        stored = store.open_run(tried.run_id or "")
        assert stored.options["experiment"] == experiment.id
        pid = stored.actions["a"].output["pid"]
        assert pid != os.getpid() and stored.answer == f"found {pid}"  # it ran on a worker
