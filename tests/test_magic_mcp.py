"""``%cortex mcp`` through a real IPython shell, against the demo MCP server
(``tests/mcp_servers/demo.py``) over stdio and streamable HTTP; and MCP tools offered as
native tools under names function calling allows."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest
from IPython.core.interactiveshell import InteractiveShell

from cortex_jupyter.runtime import Registry
from cortex_jupyter.runtime.core.calls.registry import default_registry
from cortex_jupyter.runtime.core.model.chunks import Finish, TextChunk, ToolCallReady
from cortex_jupyter.runtime.integrations.mcp import NATIVE_NAME
from tests.agents import run_agent
from tests.mcp_servers.harness import DEMO, demo_http, processes, wait_until
from tests.models.fake_openai_server import FakeOpenAIServer, Stream, finish, texts, tool_call
from tests.runtime.doubles import Scripted

TOKEN = "demo-bearer-" + uuid.uuid4().hex


def demo(tag: str = "") -> str:
    """The demo server's command line, marked with ``tag`` so a test can find it."""
    return f"{sys.executable} {DEMO} --tag {tag or uuid.uuid4().hex}"


def mcp(ip: InteractiveShell, line: str) -> None:
    ip.run_line_magic("cortex", f"mcp {line}")


def cortex_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.strip()]


@pytest.fixture
def added(ip: InteractiveShell, capsys: pytest.CaptureFixture[str]) -> Iterator[str]:
    """The demo server added over stdio as ``demo`` (the tag of its process)."""
    tag = uuid.uuid4().hex
    mcp(ip, f"add demo -- {demo(tag)}")
    capsys.readouterr()
    yield tag


@pytest.fixture(scope="module")
def http_url() -> Iterator[str]:
    """The demo server over streamable HTTP on a free port; it wants ``TOKEN``."""
    with demo_http(TOKEN) as url:
        yield url


# ---- add, list, call, remove -------------------------------------------------------------


def test_add_list_call_from_a_cell_and_remove(
    ip: InteractiveShell, capfd: pytest.CaptureFixture[str]
) -> None:
    tag = uuid.uuid4().hex
    mcp(ip, f"add demo -- {demo(tag)}")
    out = capfd.readouterr().out
    assert out.startswith("MCP server 'demo' is ready (stdio: ")
    assert "14 tools: demo.add, demo.cancellations," in out
    assert "demo.add" in default_registry.names("tool")

    mcp(ip, "list")
    listed = capfd.readouterr().out.splitlines()
    assert listed[0].startswith("demo  ready  stdio  ") and listed[0].endswith("(14 tools)")
    assert listed[1].startswith("  tools: demo.add, ")

    ip.run_cell_magic(
        "cortex",
        "--script --delay 0",
        '<action id="s">{"name": "demo.add", "parameters": {"a": 2, "b": 3}, '
        '"output_key": "total"}</action>\n<response>The total is $total.</response>',
    )
    record = ip.user_ns["_cortex"]
    assert record.actions["s"].status == "done"
    assert ip.user_ns["total"] == 5
    printed = capfd.readouterr()
    # The server's stderr is captured, never printed into the cell.
    assert "demo: server starting" not in printed.out + printed.err

    mcp(ip, "remove demo")
    assert capfd.readouterr().out == "Removed MCP server 'demo' and its 14 tools.\n"
    assert "demo.add" not in default_registry.names("tool")
    assert not processes(tag)
    mcp(ip, "list")
    assert capfd.readouterr().out.startswith("No MCP servers yet: %cortex mcp add NAME")


def test_list_name_shows_the_tools_and_the_stderr_tail(
    ip: InteractiveShell, added: str, capsys: pytest.CaptureFixture[str]
) -> None:
    mcp(ip, "list demo")
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("demo  ready  stdio  ")
    assert out[1].startswith("tools: demo.add, ")
    assert out[-2:] == ["stderr (last lines):", "  demo: server starting"]


def test_a_tool_call_cell_with_a_bad_argument_fails_that_action_only(
    ip: InteractiveShell, added: str, capsys: pytest.CaptureFixture[str]
) -> None:
    ip.run_cell_magic(
        "cortex",
        "--script --delay 0",
        '<action id="bad">{"name": "demo.add", "parameters": {"a": "two", "b": 3}}</action>\n'
        '<action id="ok">{"name": "demo.shout", "parameters": {"text": "hi"}}</action>',
    )
    actions = ip.user_ns["_cortex"].actions
    assert (actions["bad"].status, actions["ok"].status, actions["ok"].output) == (
        "failed",
        "done",
        "HI",
    )
    assert "'two' is not of type 'integer'" in (actions["bad"].error or "")
    assert "cortex: 1 action(s) failed: bad (demo.add)" in capsys.readouterr().err


# ---- failures: one cortex: line, the kernel goes on ------------------------------------------


#: Lines after ``%cortex mcp`` and the start of the one line each writes to stderr.
FAILURES = [
    (
        "add broken -- /nonexistent/server --stdio",
        "cortex: MCP server 'broken' did not start: command '/nonexistent/server' could not "
        "be started (No such file or directory)",
    ),
    (
        f"add broken -- {sys.executable} -c \"import sys; sys.exit('no config here')\"",
        "cortex: MCP server 'broken' did not start: exited before it answered "
        "(last stderr line: no config here)",
    ),
    ("remove nobody", "cortex: no MCP server named 'nobody' was added; servers: "),
    ("list nobody", "cortex: no MCP server named 'nobody' was added; servers: "),
    ("add", "cortex: mcp add: name the server first: %cortex mcp add NAME -- COMMAND"),
    ("add x", "cortex: mcp add: give the command after -- (stdio) or a URL"),
    ("add x server.py", "cortex: mcp add: 'server.py' is not an http(s) URL; a command goes"),
    ("add x --frob 1 -- cmd", "cortex: mcp add: unrecognized arguments: --frob 1"),
    ("add x --timeout soon -- cmd", "cortex: mcp add: argument --timeout: invalid float"),
    ("add x --header 'A: b' -- cmd", "cortex: MCP configuration of server 'x': headers are"),
    ("add 'a b' -- cmd", "cortex: MCP configuration server name 'a b': a name is 1-64"),
    ("add --config nowhere.json", "cortex: MCP configuration file 'nowhere.json': cannot be"),
    ("add --config f.json x", "cortex: mcp add: give --config FILE alone"),
    ("remove", "cortex: mcp remove: name one server, e.g. %cortex mcp remove fs"),
    ("frob", "cortex: mcp: unknown command 'frob'; use add, list or remove"),
]


def test_failures_are_one_cortex_line_on_stderr_and_never_a_traceback(
    ip: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    for line, expected in FAILURES:
        result = ip.run_cell(f"%cortex mcp {line}")
        captured = capsys.readouterr()
        assert result.success, line
        assert [err for err in captured.err.splitlines() if err.strip()] == [
            captured.err.strip()
        ], line
        assert captured.err.startswith(expected), (line, captured.err)
        assert "Traceback" not in captured.out + captured.err
    ip.run_cell("%cortex mcp list")  # the extension keeps working
    captured = capsys.readouterr()
    assert captured.err == ""
    assert "broken  failed  stdio  " in captured.out  # listed, with its reason


def test_a_failed_servers_tools_fail_with_its_reason_and_others_work(
    ip: InteractiveShell, added: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # The server says its line at once, then never answers: 3 s is generous for the line.
    mcp(ip, f"add hung --timeout 3 -- {demo()} --hang")
    assert cortex_lines(capsys.readouterr().err) == [
        "cortex: MCP server 'hung' did not start: did not answer within 3 s (raise timeout= "
        "if it is only slow to start) (last stderr line: demo: server starting)"
    ]
    ip.run_cell_magic(
        "cortex",
        "--script --delay 0",
        '<action id="a">{"name": "demo.add", "parameters": {"a": 1, "b": 1}}</action>',
    )
    assert ip.user_ns["_cortex"].actions["a"].output == 2


# ---- streamable HTTP, headers from the environment ----------------------------------------------


def test_http_server_with_a_bearer_token_from_the_environment(
    ip: InteractiveShell,
    http_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("DEMO_MAGIC_TOKEN", TOKEN)
    mcp(ip, f"add web {http_url} --header 'Authorization: Bearer $DEMO_MAGIC_TOKEN'")
    mcp(ip, "list web")
    captured = capsys.readouterr()
    assert captured.err == ""
    assert captured.out.startswith(f"MCP server 'web' is ready (http: {http_url}); 14 tools")
    assert "headers: Authorization (values not shown)" in captured.out
    ip.run_cell_magic(
        "cortex",
        "--script --delay 0",
        '<action id="w">{"name": "web.shout", "parameters": {"text": "over http"}}</action>',
    )
    assert ip.user_ns["_cortex"].actions["w"].output == "OVER HTTP"
    assert TOKEN not in capsys.readouterr().out

    mcp(ip, f"add web {http_url} --header 'Authorization: Bearer wrong'")
    err = capsys.readouterr().err
    assert cortex_lines(err) == [
        "cortex: MCP server 'web' did not start: it answered HTTP 401 Unauthorized (are its "
        "headers right, e.g. its token?)"
    ]


def test_a_config_file_adds_every_server(
    ip: InteractiveShell, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tag = uuid.uuid4().hex
    config = tmp_path / "mcp.yaml"
    config.write_text(
        "mcpServers:\n"
        f"  one:\n    command: {sys.executable}\n    args: [{DEMO}, --tag, {tag}]\n"
        "  off:\n    command: nothing\n    disabled: true\n"
        "  gone:\n    command: /nonexistent/server\n",
        encoding="utf-8",
    )
    mcp(ip, f"add --config {config}")
    captured = capsys.readouterr()
    assert captured.out.startswith("MCP server 'one' is ready (stdio: ")
    assert cortex_lines(captured.err) == [
        "cortex: MCP server 'gone' did not start: command '/nonexistent/server' could not be "
        "started (No such file or directory)"
    ]
    assert len(processes(tag)) == 1


# ---- closing -------------------------------------------------------------------------------------


def test_unload_ext_closes_the_servers_and_leaves_no_process(
    ip: InteractiveShell, added: str
) -> None:
    assert len(processes(added)) == 1
    ip.run_line_magic("unload_ext", "cortex_jupyter")
    try:
        assert not processes(added)
        assert "demo.add" not in default_registry.names("tool")
    finally:
        ip.run_line_magic("load_ext", "cortex_jupyter")


def test_servers_close_at_interpreter_exit_without_unload() -> None:
    tag = uuid.uuid4().hex
    script = (
        "from IPython.core.interactiveshell import InteractiveShell\n"
        "ip = InteractiveShell.instance()\n"
        "ip.run_line_magic('load_ext', 'cortex_jupyter')\n"
        f"ip.run_line_magic('cortex', {f'mcp add demo -- {demo(tag)} --linger'!r})\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "MCP server 'demo' is ready" in done.stdout

    wait_until(lambda: not processes(tag, anywhere=True), "the server to be gone")


# ---- native tools --------------------------------------------------------------------------------


def test_mcp_tools_are_offered_natively_and_their_calls_run(
    ip: InteractiveShell, added: str, server: FakeOpenAIServer
) -> None:
    server.script(
        Stream(
            [*tool_call(0, "call_1", "demo__add", '{"a": 2, "b": 40}', 3), finish("tool_calls")]
        ),
        Stream([*texts("<response>It is 42.</response>", 8), finish()]),
    )
    ip.run_cell_magic("cortex", "--model gpt-test --native-tools --text", "Add 2 and 40.")
    record = ip.user_ns["_cortex"]
    assert record.status == "completed"
    node = record.actions["call_1"]
    assert (node.name, node.status, node.output) == ("demo.add", "done", 42)
    offered = {tool["function"]["name"] for tool in server.requests[0].json["tools"]}
    assert {"demo__add", "demo__shout"} <= offered
    assert all(NATIVE_NAME.match(name) for name in offered)
    messages = server.requests[1].json["messages"]
    assert messages[-2]["tool_calls"][0]["function"]["name"] == "demo__add"
    assert messages[-1] == {"role": "tool", "tool_call_id": "call_1", "content": "42"}


def test_native_names_that_collide_are_made_unique_and_map_back() -> None:
    registry = Registry(builtins=False)

    @registry.tool(name="a.b")
    def dotted(x: int) -> str:
        """The dotted one."""
        return f"dotted {x}"

    @registry.tool(name="a__b")
    def plain(x: int) -> str:
        """The one whose name is native already."""
        return f"plain {x}"

    def turn(*calls: tuple[str, str]) -> list[Any]:
        ready = [ToolCallReady(i, id, name, '{"x": 1}') for i, (id, name) in enumerate(calls)]
        return [*ready, Finish("tool_calls")]

    first = Scripted([TextChunk("<response>ok</response>"), Finish("stop")])
    anyio.run(partial(run_agent, "go", model=first, registry=registry, native_tools=True))
    offered = [tool["function"]["name"] for tool in first.tools[0] or ()]
    assert "a__b" in offered and len(set(offered)) == 2
    dotted_native = next(name for name in offered if name != "a__b")
    assert NATIVE_NAME.match(dotted_native)

    model = Scripted(
        turn(("c1", dotted_native), ("c2", "a__b")),
        [TextChunk("<response>done</response>"), Finish("stop")],
    )
    run = anyio.run(partial(run_agent, "go", model=model, registry=registry, native_tools=True))
    assert {id: (n.name, n.output) for id, n in run.actions.items()} == {
        "c1": ("a.b", "dotted 1"),
        "c2": ("a__b", "plain 1"),
    }
