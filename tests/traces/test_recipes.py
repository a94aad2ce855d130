"""The Traces page's OTLP recipe, run as it is written against a small OTLP/HTTP receiver:
the collector gets the run's spans, decoded from the protobuf it was sent."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs" / "traces.md").read_text(encoding="utf-8")
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.DOTALL | re.MULTILINE)


def recipe(marker: str) -> str:
    return FENCE.findall(PAGE, PAGE.index(marker))[0]


class Receiver(ThreadingHTTPServer):
    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.requests: list[ExportTraceServiceRequest] = []
        self.paths: list[str] = []


class _Handler(BaseHTTPRequestHandler):
    server: Receiver

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        self.server.requests.append(request)
        self.server.paths.append(self.path)
        reply = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_the_otlp_recipe_sends_the_run_to_the_collector(tmp_path: Path, receiver: Receiver) -> None:
    script = tmp_path / "recipe.py"
    script.write_text(recipe("otlp-example"), encoding="utf-8")
    port = receiver.server_address[1]
    env = dict(
        os.environ,
        PYTHONPATH=str(ROOT),
        OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=f"http://127.0.0.1:{port}/v1/traces",
    )
    done = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "traced\n"
    assert set(receiver.paths) == {"/v1/traces"}
    spans = [
        span
        for request in receiver.requests
        for resource in request.resource_spans
        for scope in resource.scope_spans
        if scope.scope.name == "cortex_jupyter"
        for span in scope.spans
    ]
    names = sorted(span.name for span in spans)
    assert names == ["chat script", "invoke_agent demo"]
    root = next(s for s in spans if s.name == "invoke_agent demo")
    chat = next(s for s in spans if s.name == "chat script")
    assert chat.parent_span_id == root.span_id and chat.trace_id == root.trace_id
    attributes = {a.key: a.value.string_value for a in root.attributes}
    assert attributes["gen_ai.operation.name"] == "invoke_agent"
    assert attributes["gen_ai.agent.name"] == "demo"


def test_the_phoenix_recipe_is_what_the_phoenix_test_runs() -> None:
    """The page's register(...) line and the one tests/traces/phoenix_cell.py calls (with
    the endpoint of the server the test starts) are the same call."""
    shown = recipe("its one line does the same")
    assert "from phoenix.otel import register" in shown
    cell = (ROOT / "tests" / "traces" / "phoenix_cell.py").read_text(encoding="utf-8")
    assert "from phoenix.otel import register" in cell
    assert "register(endpoint=endpoint, project_name=project, batch=True" in cell
    assert 'register(project_name="cortex", batch=True)' in shown
