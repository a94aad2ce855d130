"""Tools from MCP servers (runtime/integrations/mcp/), against real servers these tests start.

``tests/mcp_servers/demo.py`` (the SDK's ``MCPServer``, once ``FastMCP``) runs over stdio
and over streamable HTTP on 127.0.0.1; the reference server
``@modelcontextprotocol/server-everything`` runs with node from ``.cache/npm``
(scripts/test.sh installs it). The tools run through the real parser and scheduler, as
protocol text a model would write. Nothing here reaches the internet.
"""

from __future__ import annotations

import inspect
import json
import os
import shutil
import socket
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import pytest
from mcp.types import BlobResourceContents, CallToolResult, EmbeddedResource, TextContent

import cortex_jupyter.mcp as facade
import cortex_jupyter.runtime.integrations.mcp as integration
from cortex_jupyter.runtime import Registry, Run, parse_chunks, run_stream
from cortex_jupyter.runtime.core.calls.registry import ToolSpec, default_registry
from cortex_jupyter.runtime.core.errors import InvalidArguments
from cortex_jupyter.runtime.core.record.graph import ActionNode
from cortex_jupyter.runtime.core.trust.secrets import redact
from cortex_jupyter.runtime.integrations.mcp import (
    NATIVE_NAME,
    McpConfigError,
    McpContent,
    McpManager,
    McpServerError,
    McpTool,
    NativeNames,
    ServerConfig,
    UnknownMcpServer,
    read_config,
    tool_output,
)
from tests.mcp_servers.harness import (
    DEMO,
    PATIENCE,
    TYPED,
    demo_http,
    processes,
    wait_until,
)

ROOT = Path(__file__).resolve().parents[2]
EVERYTHING = ROOT / ".cache/npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js"


# ---- helpers --------------------------------------------------------------------------


def demo_command(tag: str = "", *extra: str) -> list[str]:
    """The demo server over stdio; ``tag`` marks the process so a test can find it."""
    return [sys.executable, DEMO, "--tag", tag or uuid.uuid4().hex, *extra]


async def chunks(text: str, size: int = 16) -> AsyncIterator[str]:
    for start in range(0, len(text), size):
        await anyio.sleep(0)
        yield text[start : start + size]


def action(id: str, name: str, parameters: dict[str, Any], **fields: Any) -> str:
    body = json.dumps({"name": name, "parameters": parameters, **fields})
    return f'<action id="{id}">{body}</action>'


async def run_actions(registry: Registry, *actions: str, **options: Any) -> Run:
    """The actions as a model writes them (streamed in chunks, through the real parser)."""
    text = "<thought>Using the MCP tools.\n" + "\n".join(actions) + "\n</thought>"
    return await run_stream(parse_chunks(chunks(text)), registry=registry, **options)


def statuses(run: Run) -> dict[str, str]:
    return {id: node.status for id, node in run.actions.items()}


def on_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


# ---- fixtures -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def demo() -> Iterator[McpManager]:
    """One demo server over stdio, shared by the tests that leave it as they found it."""
    manager = McpManager(Registry(builtins=False))
    manager.add("demo", demo_command())
    yield manager
    manager.close_all()


@pytest.fixture
def fresh() -> Iterator[McpManager]:
    """A manager of its own (for tests that crash, change or remove servers)."""
    manager = McpManager(Registry(builtins=False))
    yield manager
    manager.close_all()


HTTP_TOKEN = "demo-bearer-" + uuid.uuid4().hex


@pytest.fixture(scope="module")
def http_url() -> Iterator[str]:
    """The demo server over streamable HTTP on a free port; it wants ``HTTP_TOKEN``."""
    with demo_http(HTTP_TOKEN) as url:
        yield url


@pytest.fixture
def everything() -> str:
    """The reference server's entry point: skipped when missing, except on CI."""
    node = shutil.which("node")
    if node is None or not EVERYTHING.is_file():
        missing = "node" if node is None else f"{EVERYTHING.relative_to(ROOT)}"
        message = (
            f"{missing} is not installed; scripts/test.sh installs "
            "@modelcontextprotocol/server-everything into .cache/npm"
        )
        if on_ci():
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return str(EVERYTHING)


# ---- listing and registering -------------------------------------------------------------


def test_tools_are_registered_with_their_schema_and_description(demo: McpManager) -> None:
    registry = demo.registry
    assert {"demo.add", "demo.stats", "demo.sleep", "demo.wipe"} <= set(registry.names("tool"))
    spec = registry.get("tool", "demo.add")
    assert isinstance(spec, McpTool) and isinstance(spec, ToolSpec)
    assert (spec.server, spec.tool, spec.is_async) == ("demo", "add", True)
    assert spec.schema() == {
        "type": "tool",
        "name": "demo.add",
        "description": "Add two whole numbers.",
        "parameters": spec.parameters,
    }
    assert spec.parameters["properties"]["a"]["type"] == "integer"
    assert spec.parameters["required"] == ["a", "b"]
    assert spec.takes() == "a: integer, b: integer"
    status = demo.status("demo")
    assert (status.state, status.transport, status.error) == ("ready", "stdio", None)
    assert "demo.add" in status.tools


def test_annotations_are_kept_and_destructive_tools_ask_first(demo: McpManager) -> None:
    wipe = demo.registry.get("tool", "demo.wipe")
    assert isinstance(wipe, McpTool)
    assert wipe.annotations["destructiveHint"] is True
    assert wipe.approve is True
    add = demo.registry.get("tool", "demo.add")
    assert isinstance(add, McpTool) and add.approve is False


@pytest.mark.anyio
async def test_a_denied_destructive_tool_never_runs(demo: McpManager) -> None:
    async def deny(node: ActionNode) -> bool:
        return False

    run = await run_actions(demo.registry, action("w", "demo.wipe", {"path": "/"}), approve=deny)
    assert statuses(run) == {"w": "skipped"}


# ---- results ----------------------------------------------------------------------------


@pytest.mark.anyio
async def test_structured_text_and_image_results(demo: McpManager) -> None:
    run = await run_actions(
        demo.registry,
        action("sum", "demo.add", {"a": 1, "b": 2}),
        action("stats", "demo.stats", {"values": [1, 2, 6]}),
        action("loud", "demo.shout", {"text": "hi"}),
        action("parts", "demo.parts", {"n": 3}),
        action("pic", "demo.picture", {}),
    )
    assert statuses(run) == dict.fromkeys(["sum", "stats", "loud", "parts", "pic"], "done")
    out = {id: node.output for id, node in run.actions.items()}
    assert out["sum"] == 3  # {"result": 3}, unwrapped
    assert out["stats"] == {"count": 3, "total": 9.0, "mean": 3.0}
    assert out["loud"] == "HI"
    assert out["parts"] == "part 1\npart 2\npart 3"
    picture = out["pic"]
    assert isinstance(picture, McpContent)
    assert picture.text == "a pixel"
    assert [mime for mime, _ in picture.images] == ["image/png"]
    assert repr(picture) == "McpContent(text='a pixel', images=[image/png 68 bytes])"
    assert picture._repr_mimebundle_()["image/png"] == picture.images[0][1]


@pytest.mark.anyio
async def test_an_error_result_fails_the_node_with_the_servers_text(demo: McpManager) -> None:
    run = await run_actions(
        demo.registry,
        action("bad", "demo.fail", {"message": "disk full"}),
        action("after", "demo.add", {"a": 2, "b": 2}, depends_on=["bad"]),
        action("other", "demo.add", {"a": 2, "b": 2}),
    )
    assert statuses(run) == {"bad": "failed", "after": "skipped", "other": "done"}
    assert run.actions["bad"].error == (
        "MCP tool 'fail' of server 'demo' failed: Error executing tool fail: disk full"
    )


@pytest.mark.anyio
async def test_invalid_arguments_are_refused_before_the_call(demo: McpManager) -> None:
    run = await run_actions(
        demo.registry,
        action("wrong", "demo.add", {"a": "one", "c": 3}),
        action("nested", "demo.stats", {"values": [1, "two", 3]}),
    )
    assert statuses(run) == {"wrong": "failed", "nested": "failed"}
    wrong = run.actions["wrong"]
    assert wrong.started is None  # never ran: the server was not asked
    assert wrong.error == (
        "MCP tool 'demo.add' cannot be called: 'b' is a required property; "
        "a: 'one' is not of type 'integer'; it takes (a: integer, b: integer)"
    )
    assert isinstance(wrong.exception, InvalidArguments)  # what catches one catches both
    assert (wrong.exception.missing, wrong.exception.unexpected) == (("b",), ())
    assert run.actions["nested"].error is not None
    assert "values[1]: 'two' is not of type 'number'" in run.actions["nested"].error


@pytest.mark.anyio
async def test_a_name_value_is_fitted_to_the_input_schema_or_fails_naming_the_types(
    demo: McpManager,
) -> None:
    run = await run_actions(
        demo.registry,
        action("loud", "demo.shout", {"text": "$product"}),
        action("sum", "demo.add", {"a": "$half", "b": "$count"}),
        action("bad", "demo.add", {"a": 1, "b": "$word"}),
        action("own", "demo.shout", {"text": 42}),  # the model's literal: the schema's check
        namespace={"product": 42, "half": 2.0, "count": "3", "word": "three"},
    )
    assert statuses(run) == {"loud": "done", "sum": "done", "bad": "failed", "own": "failed"}
    assert run.actions["loud"].output == "42"
    assert run.actions["loud"].note == "$product (int) was passed to 'text' as string"
    assert run.actions["sum"].output == 5
    assert run.actions["sum"].note == (
        "$half (float) was passed to 'a' as integer; $count (str) was passed to 'b' as integer"
    )
    bad = run.actions["bad"]
    assert bad.started is None and bad.error == (
        "parameter 'b' of 'demo.add' wants an integer, but $word is a str, which cannot "
        "become one without loss; the action was not run"
    )
    assert "42 is not of type 'string'" in (run.actions["own"].error or "")


@pytest.mark.anyio
async def test_log_messages_and_progress_reach_the_node(demo: McpManager) -> None:
    run = await run_actions(demo.registry, action("talk", "demo.chatty", {"n": 3}))
    node = run.actions["talk"]
    assert (node.status, node.output) == ("done", "done")
    assert [line for line in node.logs if "step" in line] == [
        f"INFO demo: step {i} of 3" for i in (1, 2, 3)
    ]
    assert node.progress is not None
    assert (node.progress.done, node.progress.total, node.progress.note) == (3, 3, "step 3")


@pytest.fixture(scope="module")
def typed() -> Iterator[McpManager]:
    """tests/mcp_servers/typed.py: parameters declared with anyOf, null and $ref."""
    manager = McpManager(Registry(builtins=False))
    manager.add("typed", [sys.executable, TYPED])
    yield manager
    manager.close_all()


@pytest.mark.anyio
async def test_a_name_value_is_fitted_to_anyof_nullable_and_ref_parameters(
    typed: McpManager,
) -> None:
    # The SDK writes `int | None` as {"anyOf": [{"type": "integer"}, {"type": "null"}]}
    # and an enum as {"$ref": "#/$defs/Level"}: a "$name" holding "5" must still become 5.
    run = await run_actions(
        typed.registry,
        action("text", "typed.page", {"number": "$five"}),
        action("numpy", "typed.page", {"number": "$count"}),
        action("none", "typed.page", {"number": "$nothing"}),
        action("half", "typed.scale", {"factor": "$half"}),
        action("level", "typed.level", {"value": "$high"}),
        action("label", "typed.label", {"text": "$answer"}),
        action("word", "typed.page", {"number": "$word"}),
        namespace={
            "five": "5",
            "count": np.int64(7),
            "nothing": None,
            "half": "2.5",
            "high": "2",
            "answer": 42,
            "word": "five",
        },
    )
    outputs = {id: node.output for id, node in run.actions.items() if node.status == "done"}
    assert outputs == {
        "text": "int:5",
        "numpy": "int:7",
        "none": "NoneType:None",
        "half": "float:2.5",
        "level": "Level:<Level.HIGH: 2>",
        "label": "str:'42'",
    }
    notes = {id: node.note for id, node in run.actions.items()}
    assert notes["text"] == "$five (str) was passed to 'number' as integer"
    assert notes["numpy"] == "$count (numpy.int64) was passed to 'number' as integer"
    assert notes["none"] is None
    assert notes["half"] == "$half (str) was passed to 'factor' as number"
    assert notes["level"] == "$high (str) was passed to 'value' as integer"
    assert notes["label"] == "$answer (int) was passed to 'text' as string"
    word = run.actions["word"]
    assert (word.status, word.started) == ("failed", None)
    assert word.error == (
        "parameter 'number' of 'typed.page' wants an integer or null, but $word is a str, "
        "which cannot become one without loss; the action was not run"
    )


@pytest.mark.anyio
async def test_numpy_values_inside_the_arguments_reach_the_server_as_json_numbers(
    typed: McpManager,
) -> None:
    # A notebook's lists hold numpy's numbers (`[df.n.max(), 2]`, an array): the wire is JSON.
    run = await run_actions(
        typed.registry,
        action("array", "typed.total", {"values": "$arr"}),
        action("nested", "typed.total", {"values": ["$n", "$x", 2]}),
        namespace={"arr": np.array([1.5, 2.5]), "n": np.int64(3), "x": np.float32(0.5)},
    )
    assert {id: (node.status, node.output) for id, node in run.actions.items()} == {
        "array": ("done", "list:[1.5, 2.5]"),
        "nested": ("done", "list:[3.0, 0.5, 2.0]"),  # the server's pydantic makes floats
    }
    assert run.actions["array"].note == "$arr (numpy.ndarray) was passed to 'values' as array"


@pytest.mark.anyio
async def test_a_refusal_shows_the_types_anyof_and_ref_declare(typed: McpManager) -> None:
    run = await run_actions(
        typed.registry,
        action("page", "typed.page", {"number": "five"}),  # the model's own literal
        action("level", "typed.level", {"value": 3}),
    )
    assert (run.actions["page"].error or "").endswith("it takes (number: integer|null = null)")
    assert (run.actions["level"].error or "").endswith("it takes (value: integer)")


# ---- concurrency, timeouts and Stop --------------------------------------------------------


@pytest.mark.anyio
async def test_calls_from_several_actions_run_at_once(demo: McpManager) -> None:
    # Each call returns only once all three are in the server together.
    group = uuid.uuid4().hex
    run = await run_actions(
        demo.registry,
        *(
            action(f"m{i}", "demo.meet", {"group": group, "n": 3}, timeout=PATIENCE)
            for i in (1, 2, 3)
        ),
    )
    assert statuses(run) == {"m1": "done", "m2": "done", "m3": "done"}


async def sleeps(manager: McpManager) -> tuple[int, int]:
    """(sleep calls started, sleep calls cancelled) as the demo server counted them."""
    counts = await manager.call_tool("demo", "cancellations", {})
    return counts["calls"], counts["cancelled"]


async def eventually(condition: Callable[[], Awaitable[bool]], what: str) -> None:
    with anyio.move_on_after(PATIENCE):
        while not await condition():
            await anyio.sleep(0.05)
        return
    pytest.fail(f"still waiting, after {PATIENCE:g} s, for {what}")


@pytest.mark.anyio
async def test_a_timeout_cancels_the_request_and_the_session_stays_usable(
    demo: McpManager,
) -> None:
    calls, cancelled = await sleeps(demo)
    run = await run_actions(demo.registry, action("slow", "demo.sleep", {"seconds": 60}, timeout=1))
    assert statuses(run) == {"slow": "failed"}
    assert run.actions["slow"].error is not None
    assert "timed out after 1 s" in run.actions["slow"].error

    async def every_started_call_was_cancelled() -> bool:
        now_calls, now_cancelled = await sleeps(demo)
        return now_calls - calls == now_cancelled - cancelled

    await eventually(every_started_call_was_cancelled, "the server to see the cancellation")
    after = await run_actions(demo.registry, action("next", "demo.add", {"a": 4, "b": 5}))
    assert (after.actions["next"].status, after.actions["next"].output) == ("done", 9)


@pytest.mark.anyio
async def test_stop_cancels_the_request(demo: McpManager) -> None:
    calls, cancelled = await sleeps(demo)
    run = Run()

    async def model_run() -> None:
        protocol = action("slow", "demo.sleep", {"seconds": 60})
        await run_stream(parse_chunks(chunks(protocol)), registry=demo.registry, run=run)

    async with anyio.create_task_group() as tg:
        tg.start_soon(model_run)

        async def running_on_the_server() -> bool:
            return (await sleeps(demo))[0] == calls + 1

        await eventually(running_on_the_server, "the call to start")
        tg.cancel_scope.cancel()  # what Stop does to a run
    assert statuses(run) == {"slow": "cancelled"}

    async def cancelled_there() -> bool:
        return (await sleeps(demo))[1] == cancelled + 1

    await eventually(cancelled_there, "the server to see notifications/cancelled")
    assert await demo.call_tool("demo", "add", {"a": 1, "b": 1}) == 2


# ---- list changes ------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_list_changed_updates_the_registry(fresh: McpManager) -> None:
    await anyio.to_thread.run_sync(fresh.add, "grower", demo_command())
    registry = fresh.registry
    assert "grower.times_ten" not in registry.names("tool")
    run = await run_actions(registry, action("g", "grower.grow", {"name": "times_ten"}))
    assert run.actions["g"].output == "added times_ten"
    await anyio.to_thread.run_sync(
        wait_until, lambda: "grower.times_ten" in registry.names("tool"), "the new tool"
    )
    assert registry.get("tool", "grower.times_ten").description == "Added at run time as times_ten."
    run = await run_actions(registry, action("t", "grower.times_ten", {"x": 4}))
    assert run.actions["t"].output == 40
    run = await run_actions(registry, action("s", "grower.shrink", {"name": "times_ten"}))
    assert run.actions["s"].status == "done"
    await anyio.to_thread.run_sync(
        wait_until, lambda: "grower.times_ten" not in registry.names("tool"), "the tool to go"
    )
    assert "grower.times_ten" not in fresh.status("grower").tools


# ---- resources as feeds --------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_resource_reads_as_feed_text(demo: McpManager) -> None:
    assert await demo.read_resource("demo", "demo://readme") == "# Demo\nA server for tests."
    with pytest.raises(McpServerError, match=r"^MCP server 'demo' could not read 'demo://nope': "):
        await demo.read_resource("demo", "demo://nope")
    with pytest.raises(
        UnknownMcpServer, match="no MCP server named 'nope' was added; servers: demo"
    ):
        await demo.read_resource("nope", "demo://readme")


# ---- failures: crash, hang, bad command ---------------------------------------------------------


@pytest.mark.anyio
async def test_a_crash_mid_call_fails_the_node_and_leaves_no_process(fresh: McpManager) -> None:
    tag = uuid.uuid4().hex
    await anyio.to_thread.run_sync(fresh.add, "crashy", demo_command(tag))
    assert len(processes(tag)) == 1
    run = await run_actions(
        fresh.registry,
        action("boom", "crashy.crash", {}),
        action("later", "crashy.add", {"a": 1, "b": 1}, depends_on=["boom"]),
    )
    assert statuses(run) == {"boom": "failed", "later": "skipped"}
    assert run.actions["boom"].error == (
        "MCP server 'crashy' stopped: exited during the call to 'crash' "
        "(last stderr line: demo: crashing on purpose)"
    )
    status = fresh.status("crashy")
    assert status.state == "failed" and status.error is not None
    run = await run_actions(fresh.registry, action("again", "crashy.add", {"a": 1, "b": 1}))
    assert run.actions["again"].error == (
        f"MCP server 'crashy' is not running: {status.error}; add it again to restart it"
    )
    await anyio.to_thread.run_sync(wait_until, lambda: not processes(tag), "the process to go")
    # A fresh server (the same name, added again) works.
    await anyio.to_thread.run_sync(fresh.add, "crashy", demo_command())
    run = await run_actions(fresh.registry, action("ok", "crashy.add", {"a": 1, "b": 1}))
    assert run.actions["ok"].output == 2


def test_a_server_that_will_not_start_gives_one_clear_line(fresh: McpManager) -> None:
    with pytest.raises(McpServerError) as raised:
        fresh.add("ghost", ["cortex-no-such-command", "--flag"])
    message = str(raised.value)
    assert message == (
        "MCP server 'ghost' did not start: command 'cortex-no-such-command' could not be "
        "started (No such file or directory)"
    )
    assert "\n" not in message
    status = fresh.status("ghost")
    assert (status.state, status.tools) == ("failed", ())
    assert status.error is not None and status.error in message
    assert (
        status.summary() == f"ghost  failed  stdio  cortex-no-such-command --flag  ({status.error})"
    )
    assert fresh.registry.names("tool") == []


def test_a_server_that_exits_at_once_says_why(fresh: McpManager) -> None:
    script = "import sys; print('fatal: no config found', file=sys.stderr); sys.exit(2)"
    with pytest.raises(McpServerError, match=r"^MCP server 'quitter' did not start: .*") as raised:
        fresh.add("quitter", [sys.executable, "-c", script])
    assert str(raised.value).endswith("(last stderr line: fatal: no config found)")


def test_a_server_that_hangs_at_start_times_out_and_is_killed(fresh: McpManager) -> None:
    tag = uuid.uuid4().hex
    with pytest.raises(McpServerError) as raised:
        # The server says its line at once, then never answers: 3 s is generous for it.
        fresh.add("sleepy", demo_command(tag, "--hang"), timeout=3)
    assert str(raised.value) == (
        "MCP server 'sleepy' did not start: did not answer within 3 s (raise timeout= if it "
        "is only slow to start) (last stderr line: demo: server starting)"
    )
    wait_until(lambda: not processes(tag), "the hung process to be killed")


@pytest.mark.usefixtures("demo")
def test_a_failed_server_does_not_stop_the_others(fresh: McpManager) -> None:
    fresh.add("good", demo_command())
    with pytest.raises(McpServerError):
        fresh.add("bad", ["cortex-no-such-command"])
    assert [(s.name, s.state) for s in fresh.servers()] == [("good", "ready"), ("bad", "failed")]

    async def call() -> Any:
        return await fresh.call_tool("good", "add", {"a": 20, "b": 22})

    assert anyio.run(call) == 42


# ---- stderr, closing, orphans --------------------------------------------------------------


def test_stderr_is_captured_and_never_printed(
    fresh: McpManager, capfd: pytest.CaptureFixture[str]
) -> None:
    fresh.add("noisy", demo_command())

    async def fail() -> None:
        with pytest.raises(Exception, match="oops"):
            await fresh.call_tool("noisy", "fail", {"message": "oops"})

    anyio.run(fail)
    wait_until(lambda: "oops" in fresh.stderr("noisy"), "the server's stderr")
    assert fresh.stderr("noisy").startswith("demo: server starting\n")
    assert "demo: server starting" in fresh.status("noisy").stderr
    printed = capfd.readouterr()
    assert "demo: server starting" not in printed.err + printed.out
    assert "oops" not in printed.err + printed.out


def test_remove_and_close_all_leave_no_process(fresh: McpManager) -> None:
    first, second, third = (uuid.uuid4().hex for _ in range(3))
    fresh.add("one", demo_command(first))
    entries = {
        n: {"command": sys.executable, "args": [DEMO, "--tag", t]}
        for n, t in (("two", second), ("three", third))
    }
    fresh.load_config({"mcpServers": entries})
    assert all(len(processes(tag)) == 1 for tag in (first, second, third))
    fresh.remove("one")
    assert not processes(first)
    assert "one.add" not in fresh.registry.names("tool")
    with pytest.raises(UnknownMcpServer):
        fresh.remove("one")
    fresh.close_all()
    assert not processes(second) and not processes(third)
    assert fresh.servers() == [] and fresh.registry.names("tool") == []
    # The manager starts again after close_all.
    fresh.add("four", demo_command())
    assert fresh.status("four").state == "ready"


def test_servers_close_at_interpreter_exit() -> None:
    # --linger: the server even outlives its stdin closing, so only a signal ends it.
    tag = uuid.uuid4().hex
    script = (
        "import sys\n"
        "from cortex_jupyter.runtime import Registry\n"
        "from cortex_jupyter.runtime.integrations.mcp import McpManager\n"
        "manager = McpManager(Registry(builtins=False))\n"
        f"manager.add('demo', {[*demo_command(tag), '--linger']!r})\n"
        "print(manager.status('demo').state)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "ready\n", "")

    wait_until(lambda: not processes(tag, anywhere=True), "the server to be gone")


# ---- configuration ----------------------------------------------------------------------------


def test_read_config_accepts_claude_and_vs_code_shapes(tmp_path: Path) -> None:
    claude = {
        "mcpServers": {
            "fs": {"command": "npx", "args": ["-y", "server-fs", "."], "env": {"A": "1"}},
            "gh": {"url": "https://example.com/mcp", "headers": {"Authorization": "Bearer x"}},
            "off": {"command": "nothing", "disabled": True},
        }
    }
    configs = read_config(claude)
    assert [(c.name, c.transport, c.target) for c in configs] == [
        ("fs", "stdio", "npx -y server-fs ."),
        ("gh", "http", "https://example.com/mcp"),
    ]
    assert configs[0].env == {"A": "1"}
    vscode = tmp_path / "mcp.yaml"
    vscode.write_text(
        "servers:\n"
        "  local: {type: stdio, command: python, args: [server.py], cwd: /tmp}\n"
        "  remote: {type: http, url: 'http://127.0.0.1:1/mcp', timeout: 5}\n",
        encoding="utf-8",
    )
    configs = read_config(vscode)
    assert [(c.name, c.transport, c.cwd, c.timeout) for c in configs] == [
        ("local", "stdio", "/tmp", 30.0),
        ("remote", "http", None, 5),
    ]
    settings = {"mcp": {"servers": {"s": {"type": "stdio", "command": "x"}}}}
    assert [c.name for c in read_config(settings)] == ["s"]


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        ({"command": "x", "url": "http://h/mcp"}, "give either a command (stdio) or a url (HTTP)"),
        ({}, "give either a command (stdio) or a url (HTTP)"),
        ({"type": "sse", "url": "http://h/sse"}, "type 'sse' is not supported"),
        ({"command": "x", "args": "--flag"}, "args must be a list of strings"),
        ({"url": "ftp://h/"}, "the url must start with http:// or https://"),
        ({"command": "x", "headers": {"A": "b"}}, "headers are for HTTP servers"),
        ({"command": "x", "timeout": -1}, "timeout must be a positive number"),
    ],
)
def test_bad_config_entries_say_what_is_wrong(entry: dict[str, Any], problem: str) -> None:
    with pytest.raises(McpConfigError, match=r"^MCP configuration .*server 's'") as raised:
        read_config({"mcpServers": {"s": entry}})
    assert problem in str(raised.value)


def test_bad_config_files_say_what_is_wrong(tmp_path: Path) -> None:
    with pytest.raises(McpConfigError, match="cannot be read"):
        read_config(tmp_path / "missing.json")
    broken = tmp_path / "broken.json"
    broken.write_text("{nope", encoding="utf-8")
    with pytest.raises(McpConfigError, match="is not valid JSON or YAML"):
        read_config(broken)
    with pytest.raises(McpConfigError, match="a name is 1-64 letters"):
        ServerConfig("has.dot", ("x",))


def test_load_config_adds_every_server_at_once(fresh: McpManager, tmp_path: Path) -> None:
    path = tmp_path / "claude_desktop_config.json"
    config = {
        "mcpServers": {
            "alpha": {"command": sys.executable, "args": [DEMO]},
            "beta": {"command": sys.executable, "args": [DEMO], "env": {"DEMO_FLAG": "1"}},
            "broken": {"command": "cortex-no-such-command"},
        }
    }
    path.write_text(json.dumps(config), encoding="utf-8")
    added = fresh.load_config(path)
    assert [(s.name, s.state) for s in added] == [
        ("alpha", "ready"),
        ("beta", "ready"),
        ("broken", "failed"),
    ]
    assert {"alpha.add", "beta.add"} <= set(fresh.registry.names("tool"))


# ---- streamable HTTP, headers and secrets ----------------------------------------------------


def test_http_server_with_a_bearer_token_from_the_environment(
    fresh: McpManager, http_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The variable's name does not look like a credential: the header makes it secret.
    monkeypatch.setenv("DEMO_BEARER_VALUE", HTTP_TOKEN)
    status = fresh.add(
        "web", url=http_url, headers={"Authorization": "Bearer ${DEMO_BEARER_VALUE}"}
    )
    assert (status.state, status.transport, status.headers) == ("ready", "http", ("Authorization",))

    async def calls() -> Run:
        return await run_actions(
            fresh.registry,
            action("sum", "web.add", {"a": 20, "b": 1}),
            action("read", "web.shout", {"text": "over http"}),
        )

    run = anyio.run(calls)
    assert {id: n.output for id, n in run.actions.items()} == {"sum": 21, "read": "OVER HTTP"}
    shown = [
        repr(fresh.servers()),
        repr(fresh.status("web")),
        repr(ServerConfig("web", url=http_url, headers={"Authorization": f"Bearer {HTTP_TOKEN}"})),
        fresh.stderr("web"),
        fresh.logs("web"),
    ]
    web = fresh.status("web")
    details = web.details()
    assert details.startswith(f"web  ready  http  {http_url}  ({len(web.tools)} tools)\n")
    assert "\ntools: web.add, web.cancellations, " in details
    assert details.endswith("\nheaders: Authorization (values not shown)")
    shown.append(details)
    assert not any(HTTP_TOKEN in text for text in shown)
    assert redact(f"token {HTTP_TOKEN}") == "token [redacted]"


def test_http_server_refusing_the_token_says_so_without_it(
    fresh: McpManager, http_url: str
) -> None:
    wrong = "wrong-" + uuid.uuid4().hex
    with pytest.raises(McpServerError) as raised:
        fresh.add("web", url=http_url, headers={"Authorization": f"Bearer {wrong}"})
    assert str(raised.value) == (
        "MCP server 'web' did not start: it answered HTTP 401 Unauthorized "
        "(are its headers right, e.g. its token?)"
    )
    assert wrong not in repr(fresh.servers())
    with pytest.raises(McpServerError, match=r"uses \$\{CORTEX_UNSET_VARIABLE\}, which is not set"):
        fresh.add("web", url=http_url, headers={"Authorization": "Bearer ${CORTEX_UNSET_VARIABLE}"})


def test_an_http_server_that_is_not_there(fresh: McpManager) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # free, so nothing listens there
    with pytest.raises(
        McpServerError, match=r"^MCP server 'gone' did not start: could not connect"
    ):
        fresh.add("gone", url=f"http://127.0.0.1:{port}/mcp", timeout=10)


# ---- the reference server from npm -----------------------------------------------------------


def test_the_reference_server_everything(fresh: McpManager, everything: str) -> None:
    fresh.add("ev", ["node", everything, "stdio"])
    registry = fresh.registry
    assert {"ev.echo", "ev.get-sum", "ev.get-tiny-image"} <= set(registry.names("tool"))
    echo = registry.get("tool", "ev.echo")
    assert isinstance(echo, McpTool) and echo.annotations["readOnlyHint"] is True

    async def calls() -> Run:
        return await run_actions(
            registry,
            action("echo", "ev.echo", {"message": "hello"}),
            action("sum", "ev.get-sum", {"a": 2, "b": 3}),
            action("weather", "ev.get-structured-content", {"location": "Chicago"}),
            action("image", "ev.get-tiny-image", {}),
            action("links", "ev.get-resource-links", {"count": 2}),
            action("bad", "ev.get-sum", {"a": "two"}),
        )

    run = anyio.run(calls)
    out = {id: n.output for id, n in run.actions.items()}
    assert out["echo"] == "Echo: hello"
    assert out["sum"] == "The sum of 2 and 3 is 5."
    assert set(out["weather"]) == {"temperature", "conditions", "humidity"}
    assert isinstance(out["image"], McpContent) and out["image"].images[0][0] == "image/png"
    assert isinstance(out["links"], McpContent) and len(out["links"].resources) == 2
    assert run.actions["bad"].status == "failed"
    assert "'b' is a required property" in (run.actions["bad"].error or "")


@pytest.mark.anyio
async def test_a_list_that_holds_itself_fails_its_action_in_one_line(
    typed: McpManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `loop = [loop, loop]` in a notebook: walking it for numpy values must stop at the loop
    # (2**64 paths before), and the schema check names what is wrong.
    from cortex_jupyter.runtime.integrations.mcp import schema as mcp_schema

    walked = 0
    walk = mcp_schema._json_ready

    def counted(*args: Any) -> Any:
        nonlocal walked
        walked += 1
        assert walked < 1000, "the arguments are walked without end"
        return walk(*args)

    monkeypatch.setattr(mcp_schema, "_json_ready", counted)
    loop: list[Any] = []
    loop += [loop, loop]
    run = await run_actions(
        typed.registry,
        action("loop", "typed.total", {"values": "$loop"}),
        action("fine", "typed.total", {"values": [1, 2]}),
        namespace={"loop": loop},
    )
    node = run.actions["loop"]
    assert (node.status, node.started) == ("failed", None)
    assert "is not of type 'number'" in (node.error or "") and "\n" not in (node.error or "")
    assert run.actions["fine"].output == "list:[1.0, 2.0]"


# ---- pure parts: checking arguments, reading results ---------------------------------------


def closed_tool() -> McpTool:
    async def call(arguments: dict[str, Any]) -> None:
        return None

    schema = {
        "type": "object",
        "properties": {"path": {"type": "string"}, "depth": {"type": "integer", "default": 1}},
        "required": ["path"],
        "additionalProperties": False,
    }
    return McpTool("fs.walk", "tool", call, "Walk a tree.", schema, server="fs", tool="walk")


def test_check_names_missing_and_unexpected_arguments() -> None:
    tool = closed_tool()
    assert tool.check({"path": "/tmp"}) == ([{"path": "/tmp"}], {})
    with pytest.raises(InvalidArguments) as raised:
        tool.check({"depth": "deep", "colour": "red"})
    error = raised.value
    assert (error.missing, error.unexpected) == (("path",), ("colour",))
    assert str(error) == (
        "MCP tool 'fs.walk' cannot be called: 'path' is a required property; Additional "
        "properties are not allowed ('colour' was unexpected); depth: 'deep' is not of type "
        "'integer'; it takes (path: string, depth: integer = 1)"
    )


@pytest.mark.parametrize(
    ("structured", "output_schema", "expected"),
    [
        ({"result": 5}, None, 5),
        ({"result": [1, 2]}, {"type": "object", "properties": {"result": {}}}, [1, 2]),
        # An object whose only field happens to be called result stays an object.
        ({"result": 5}, {"type": "object", "properties": {"result": {}, "n": {}}}, {"result": 5}),
        ({"a": 1}, None, {"a": 1}),
    ],
)
def test_structured_content_is_the_output(
    structured: dict[str, Any], output_schema: dict[str, Any] | None, expected: Any
) -> None:
    result = CallToolResult(
        content=[TextContent(type="text", text="ignored")], structured_content=structured
    )
    assert tool_output(result, output_schema) == expected


def test_content_without_structure_is_text_or_mcp_content() -> None:
    assert tool_output(CallToolResult(content=[])) is None
    texts = [TextContent(type="text", text="a"), TextContent(type="text", text="b")]
    assert tool_output(CallToolResult(content=texts)) == "a\nb"
    blob = EmbeddedResource(
        type="resource",
        resource=BlobResourceContents(uri="file:///x.bin", mime_type="app/x", blob="AAAA"),
    )
    out = tool_output(CallToolResult(content=[*texts, blob]))
    assert isinstance(out, McpContent)
    assert out.resources[0].blob == "AAAA"
    assert (
        repr(out) == "McpContent(text='a\\nb', resources=[<resource file:///x.bin app/x: 3 bytes>])"
    )


# ---- native tool names -----------------------------------------------------------------------


def test_native_names_are_valid_unique_and_reversible() -> None:
    names = [
        "demo.add",
        "demo__add",  # already native: keeps its name, so demo.add gets another
        "gh.search code",
        "x." + "y" * 80,
        "x." + "y" * 81,
        "plain",
    ]
    table = NativeNames(names)
    natives = [table.native(name) for name in names]
    assert all(NATIVE_NAME.match(native) for native in natives)
    assert len(set(natives)) == len(names)
    assert [table.original(native) for native in natives] == names
    assert table.native("demo__add") == "demo__add"
    assert table.native("plain") == "plain"
    assert table.native("gh.search code") == "gh__search_code"
    assert table.original("unknown") == "unknown"


# ---- the public facade ---------------------------------------------------------------------------


def test_the_facade_uses_the_default_registry() -> None:
    name = "facade" + uuid.uuid4().hex[:8]
    status = facade.add(name, demo_command())
    try:
        assert status.state == "ready"
        assert f"{name}.add" in default_registry.names("tool")
        assert [s.name for s in facade.servers() if s.name == name] == [name]
        assert "demo: server starting" in facade.stderr(name)
        assert anyio.run(facade.read_resource, name, "demo://readme").startswith("# Demo")
    finally:
        facade.remove(name)
    assert f"{name}.add" not in default_registry.names("tool")
    facade.close_all()


def test_the_facade_is_the_mcp_package_itself_by_name() -> None:
    """``cortex_jupyter.mcp`` and the integration package offer the same objects under the
    same names: one surface, not a second list that can drift from the first."""
    assert facade.__all__ == integration.__all__
    assert all(getattr(facade, name) is getattr(integration, name) for name in facade.__all__)
    assert {"add", "load_config", "servers", "McpManager", "McpServerError"} <= set(facade.__all__)


@pytest.mark.parametrize(
    "verb", ["add", "load_config", "remove", "servers", "status", "stderr", "logs", "close_all"]
)
def test_a_notebook_function_shows_the_managers_parameters_and_help(verb: str) -> None:
    function, method = getattr(facade, verb), getattr(McpManager, verb)
    manager_signature = inspect.signature(method)
    without_self = list(manager_signature.parameters.values())[1:]
    assert inspect.signature(function) == manager_signature.replace(parameters=without_self)
    assert function.__name__ == verb and function.__doc__ == method.__doc__


def test_a_schema_whose_refs_reach_themselves_is_read_once() -> None:
    # A server's input schema is not ours: a definition whose allOf points back at itself
    # 300 times (or at another one that does) must neither hang nor fail the listing.
    from cortex_jupyter.runtime.core.values import schema as core_schema

    read = 0
    resolve = core_schema.resolve_ref

    def counted(ref: str, root: Any) -> Any:
        nonlocal read
        read += 1
        assert read < 100, "the same $ref is read again and again"
        return resolve(ref, root)

    schema = {
        "type": "object",
        "$defs": {
            "Loop": {"allOf": [{"$ref": "#/$defs/Loop"}, {"$ref": "#/$defs/Wide"}] * 150},
            "Wide": {"anyOf": [{"$ref": "#/$defs/Page"}] * 300},
            "Page": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
        },
        "properties": {"x": {"$ref": "#/$defs/Loop"}, "y": {"$ref": "#/$defs/Wide"}},
    }
    tool = McpTool("odd.t", "tool", None, "Odd.", schema, server="odd", tool="t")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(core_schema, "resolve_ref", counted)
        assert tool.wants("x") == ("integer", "null")
        assert tool.wants("y") == ("integer", "null")
        assert tool.takes() == "x: integer|null (optional), y: integer|null (optional)"
