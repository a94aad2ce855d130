"""A real trace viewer receives our traces: a local Phoenix server (``arize-phoenix``, a test
dependency) gets a run's spans over OTLP through the docs' recipe
(``phoenix.otel.register()``), and Phoenix's own client reads them back with the right
parents.

Skipped where Phoenix is not installed, except on CI (``CI=true``), where that fails: CI
must not pass without having looked. Phoenix runs in subprocesses (its server, the traced
run, its client), so this process never imports it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.traces.conftest import EARLY
from tests.traces.phoenix_server import INSTALL, Phoenix, installed, phoenix_server

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent


def on_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


@pytest.fixture(scope="module")
def phoenix(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Phoenix]:
    if not installed():
        if on_ci():
            pytest.fail(f"Phoenix is not installed; CI must run this test ({INSTALL})")
        pytest.skip(f"Phoenix is not installed ({INSTALL})")
    early = request.config.stash.get(EARLY, None)  # started at collection (conftest.py)
    with phoenix_server(tmp_path_factory.mktemp("phoenix"), early) as server:
        print(f"Phoenix started in {server.seconds_to_start:.1f} s")
        yield server


def script(name: str, *args: str) -> str:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, "-W", "ignore", str(HERE / name), *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


# Phoenix's imports (~30 s a process) and start-up are slow: the server starts at collection
# (conftest.py); 160 s on a machine shared by seven test runs.
@pytest.mark.timeout(900)
def test_phoenix_holds_the_run_as_one_trace_with_the_right_parents(phoenix: Phoenix) -> None:
    # the run, its 2 chats, 4 tools; the nested run, its 2 chats, 1 tool: 11 spans, read
    # back in the run's own process (one import of Phoenix)
    sent = json.loads(script("phoenix_cell.py", phoenix.url, "cortex-test", "11"))
    run, spans = sent["run"], sent["spans"]
    assert run["actions"] == {"look": "done", "check": "done", "oops": "failed", "ask": "done"}
    by_id = {s["context"]["span_id"]: s for s in spans}
    names = sorted(s["name"] for s in spans)
    assert names == sorted(
        ["invoke_agent weather", "chat script", "chat script", "execute_tool lookup",
         "execute_tool convert", "execute_tool broken", "execute_tool researcher",
         "invoke_agent researcher", "chat script", "chat script", "execute_tool lookup"]
    )  # fmt: skip

    def parent(span: dict[str, Any]) -> dict[str, Any] | None:
        return by_id.get(span.get("parent_id") or "")

    def named(name: str, call_id: str | None = None) -> dict[str, Any]:
        (found,) = [
            s for s in spans
            if s["name"] == name
            and (call_id is None or s["attributes"].get("gen_ai.tool.call.id") == call_id)
        ]  # fmt: skip
        return found

    root = named("invoke_agent weather")
    assert parent(root) is None
    assert {s["context"]["trace_id"] for s in spans} == {root["context"]["trace_id"]}
    assert root["attributes"]["gen_ai.operation.name"] == "invoke_agent"
    assert root["attributes"]["cortex.run.id"] == run["id"]
    for call_id, tool in (("look", "lookup"), ("check", "convert"), ("oops", "broken")):
        span = named(f"execute_tool {tool}", call_id)
        assert parent(span) is root
        assert span["attributes"]["gen_ai.tool.name"] == tool
    assert named("execute_tool broken")["status_code"] == "ERROR"
    action = named("execute_tool researcher", "ask")
    inner = named("invoke_agent researcher")
    assert parent(inner) is action
    assert parent(named("execute_tool lookup", "r1")) is inner
