"""``%cortex trace``: whether runs' spans go anywhere, and ``%cortex trace phoenix``."""

from __future__ import annotations

import importlib.util
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from cortex_jupyter.runtime.integrations.tracing import setup
from tests.otel_spans import sdk_provider


def refused(ip: InteractiveShell, capsys: pytest.CaptureFixture[str]) -> str:
    """``%cortex trace phoenix`` refused: nothing on stdout, one line on stderr (returned)."""
    ip.run_line_magic("cortex", "trace phoenix")
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1, captured
    return captured.err


def test_with_no_provider_it_says_tracing_is_off_and_how_to_turn_it_on(
    ip: InteractiveShell, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The API's own stand-in while no provider is set (a provider, once set, stays set
    # for the process, and other tests set one).
    monkeypatch.setattr(setup.trace, "get_tracer_provider", trace.ProxyTracerProvider)
    ip.run_line_magic("cortex", "trace")
    out = capsys.readouterr().out
    assert out.startswith("tracing: off (no OpenTelemetry tracer provider is configured")
    assert "%cortex trace phoenix" in out


def test_with_a_provider_it_names_its_processors_and_exporters(
    ip: InteractiveShell, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    provider = sdk_provider()
    secret = "sk-trace-endpoint-0123456789"
    monkeypatch.setenv("COLLECTOR_TOKEN", secret)
    exporter = OTLPSpanExporter(endpoint=f"http://127.0.0.1:4318/v1/traces?token={secret}")
    processor = BatchSpanProcessor(exporter)
    provider.add_span_processor(processor)
    try:
        ip.run_line_magic("cortex", "trace")
    finally:
        processor.shutdown()
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == "tracing: on; tracer provider opentelemetry.sdk.trace.TracerProvider"
    assert "  tests.otel_spans._Listening -> " in out  # the tests' own in-memory exporter
    assert (
        "  opentelemetry.sdk.trace.export.BatchSpanProcessor -> opentelemetry.exporter.otlp."
        "proto.http.trace_exporter.OTLPSpanExporter at http://127.0.0.1:4318/v1/traces?…"
    ) in lines
    assert secret not in out
    assert lines[-1].startswith("content (prompts, replies, arguments, results): not recorded")


@pytest.mark.parametrize("line", ["trace phonix", "trace phoenix now", "trace --on"])
def test_anything_else_is_a_usage_error(ip: InteractiveShell, line: str) -> None:
    with pytest.raises(UsageError, match=r"^%cortex trace: .* is not a command here; use "):
        ip.run_line_magic("cortex", line)


@pytest.mark.usefixtures("listen")
@pytest.mark.parametrize(
    "endpoint",
    [
        "https://team:pa55-w0rd-XYZ@collector.example:4318/v1/traces",
        "https://collector.example/v1/traces?api_key=pa55-w0rd-XYZ",
        "https://collector.example/v1/traces#pa55-w0rd-XYZ",
    ],
)
def test_the_exporter_endpoint_is_shown_without_its_credentials(
    ip: InteractiveShell,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    endpoint: str,
) -> None:
    """An endpoint set as OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (a name that does not look
    like a credential's) may carry a password or a key in its URL: `%cortex trace` names
    the collector's host and path, never those."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", endpoint)
    processor = BatchSpanProcessor(OTLPSpanExporter())
    sdk_provider().add_span_processor(processor)
    try:
        ip.run_line_magic("cortex", "trace")
    finally:
        processor.shutdown()
    out = capsys.readouterr().out
    assert "OTLPSpanExporter at https://collector.example" in out
    assert "pa55-w0rd-XYZ" not in out


# ---- %cortex trace phoenix with a Phoenix (or something else) already on the port -----------


class Listener(ThreadingHTTPServer):
    """A local HTTP server: a Phoenix stand-in (it says its version and takes OTLP/HTTP
    spans) or, when not ``phoenix``, something else that answers 200 to every GET (as
    TensorBoard does on Phoenix's default port, 6006)."""

    def __init__(self, phoenix: bool, port: int = 0) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.phoenix = phoenix
        self.spans: list[str] = []
        self.authorizations: list[str | None] = []
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def stop(self) -> None:
        self.shutdown()
        self.server_close()


class _Handler(BaseHTTPRequestHandler):
    server: Listener

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _reply(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path == "/arize_phoenix_version" and not self.server.phoenix:
            self._reply(404, b"")
        else:
            self._reply(200, b"20.0.0" if self.server.phoenix else b"<html>TensorBoard</html>")

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if not self.server.phoenix or self.path != "/v1/traces":
            self._reply(404, b"")
            return
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        self.server.authorizations.append(self.headers.get("authorization"))
        self.server.spans.extend(
            span.name
            for resource in request.resource_spans
            for scope in resource.scope_spans
            for span in scope.spans
        )
        self._reply(200, ExportTraceServiceResponse().SerializeToString())


@pytest.fixture
def listen(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., Listener]]:
    """Start a listener (stopped after the test): on ``port``, or on a free port that
    `%cortex trace phoenix` then looks for Phoenix at."""
    started: list[Listener] = []

    def start(phoenix: bool, port: int | None = None) -> Listener:
        listener = Listener(phoenix, port or 0)
        started.append(listener)
        if port is None:
            monkeypatch.setattr(setup, "PHOENIX_PORT", listener.port)
        return listener

    yield start
    for listener in started:
        listener.stop()


@pytest.fixture
def phoenix_processors() -> Iterator[None]:
    """Processors a test's `%cortex trace phoenix` adds to the process's provider are shut
    down afterwards (the SDK cannot take one away; shut down, it sends nothing more)."""
    before = set(map(id, _processors()))
    yield
    for processor in _processors():
        if id(processor) not in before:
            processor.shutdown()


def _processors() -> tuple[Any, ...]:
    return tuple(sdk_provider()._active_span_processor._span_processors)


def traced_cell(ip: InteractiveShell) -> None:
    """A --script cell with an action, then every span sent on its way."""
    cell = '<action id="p">{"name": "no_such_tool"}</action>\n<response>ok</response>'
    ip.run_cell_magic("cortex", "--script", cell)
    sdk_provider().force_flush()


# (No warning filter: `phoenix.otel`, whose package imports the whole Phoenix server into
# the kernel, loads libraries that warn, and warnings fail a test.)
@pytest.mark.usefixtures("phoenix_processors")
def test_phoenix_running_gets_the_spans_even_with_a_provider_already_set_and_asked_twice(
    ip: InteractiveShell,
    capsys: pytest.CaptureFixture[str],
    listen: Callable[..., Listener],
) -> None:
    """A tracer provider is already set (another recipe, or a test's): OpenTelemetry
    will not replace it, so Phoenix is added to it. Asked twice, the spans still reach
    Phoenix once each."""
    phoenix = listen(True)
    ip.run_line_magic("cortex", "trace phoenix")
    ip.run_line_magic("cortex", "trace phoenix")
    traced_cell(ip)
    out = capsys.readouterr().out
    assert f"Phoenix already running at http://127.0.0.1:{phoenix.port}" in out
    assert "project 'default' (beside the tracer provider's other processors)" in out
    assert phoenix.spans.count("execute_tool no_such_tool") == 1, phoenix.spans
    assert any(name.startswith("invoke_agent") for name in phoenix.spans)


@pytest.mark.usefixtures("phoenix_processors")
def test_something_else_on_phoenix_port_is_not_taken_for_phoenix(
    ip: InteractiveShell,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    listen: Callable[..., Listener],
) -> None:
    """TensorBoard answers on 6006 too: `%cortex trace phoenix` starts Phoenix on another
    port (here a stand-in started where it is asked to serve) and sends the spans there."""
    other = listen(False)
    served: list[Listener] = []
    monkeypatch.setattr(setup, "_serve", lambda port: served.append(listen(True, port)))
    ip.run_line_magic("cortex", "trace phoenix")
    traced_cell(ip)
    (phoenix,) = served
    assert phoenix.port != other.port
    assert f"Phoenix started at http://127.0.0.1:{phoenix.port}" in capsys.readouterr().out
    assert "execute_tool no_such_tool" in phoenix.spans


class Closed(trace.TracerProvider):
    """A tracer provider of someone's own that takes no span processor."""

    def get_tracer(self, *args: Any, **kwargs: Any) -> trace.Tracer:
        return trace.NoOpTracer()


@pytest.mark.parametrize(
    "endpoint, shown",
    [
        ("https://team:pa55-w0rd-XYZ@collector.example:4317", "collector.example:4317"),
        ("collector.example:4317", "collector.example:4317"),
        ("http://[::1]:4317", "[::1]:4317"),
    ],
)
def test_a_grpc_exporter_endpoint_is_shown_as_host_and_port(
    ip: InteractiveShell,
    capsys: pytest.CaptureFixture[str],
    endpoint: str,
    shown: str,
) -> None:
    """The gRPC exporter keeps its endpoint without its scheme (``user:pw@host:port``):
    `%cortex trace` still shows the host and port, and never the password."""
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
        OTLPSpanExporter as GrpcExporter,
    )

    processor = BatchSpanProcessor(GrpcExporter(endpoint=endpoint))
    sdk_provider().add_span_processor(processor)
    try:
        ip.run_line_magic("cortex", "trace")
    finally:
        processor.shutdown()
    out = capsys.readouterr().out
    assert f"trace_exporter.OTLPSpanExporter at {shown}\n" in out
    assert "pa55-w0rd-XYZ" not in out


@pytest.mark.usefixtures("phoenix_processors")
def test_a_phoenix_with_authentication_gets_the_key_phoenix_reads(
    ip: InteractiveShell,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    listen: Callable[..., Listener],
) -> None:
    """PHOENIX_API_KEY set (a Phoenix with authentication on): the spans are sent with
    it, as Phoenix's own register() sends them; `%cortex trace` never shows it."""
    key = "phx-key-0123456789abcdef"
    monkeypatch.setenv("PHOENIX_API_KEY", key)
    phoenix = listen(True)
    ip.run_line_magic("cortex", "trace phoenix")
    traced_cell(ip)
    ip.run_line_magic("cortex", "trace")
    assert "execute_tool no_such_tool" in phoenix.spans
    assert set(phoenix.authorizations) == {f"Bearer {key}"}
    assert key not in capsys.readouterr().out


@pytest.mark.usefixtures("phoenix_processors")
def test_a_proxy_in_the_environment_does_not_hide_the_local_phoenix(
    ip: InteractiveShell,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    listen: Callable[..., Listener],
) -> None:
    """http_proxy set (a company network): Phoenix on 127.0.0.1 is asked directly, so the
    one running is found and not started again behind the proxy's back."""
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    phoenix = listen(True)
    monkeypatch.setattr(setup, "_serve", lambda port: pytest.fail(f"started another on {port}"))
    ip.run_line_magic("cortex", "trace phoenix")
    traced_cell(ip)
    assert f"Phoenix already running at http://127.0.0.1:{phoenix.port}" in capsys.readouterr().out
    assert "execute_tool no_such_tool" in phoenix.spans  # sent directly too


@dataclass(frozen=True)
class Setting:
    """What a case below arranges the kernel's surroundings with."""

    monkeypatch: pytest.MonkeyPatch
    tmp_path: Path
    listen: Callable[..., Listener]


Arrange = Callable[[Setting], tuple[str, ...]]


def _phoenix_not_installed(at: Setting) -> tuple[str, ...]:
    real = importlib.util.find_spec

    def find_spec(name: str, *args: Any) -> Any:
        return None if name == "phoenix" else real(name, *args)

    at.monkeypatch.setattr(setup.importlib.util, "find_spec", find_spec)
    return (
        "cortex: trace: Phoenix is not installed here; install it with: "
        "pip install arize-phoenix\n",
    )


def _a_provider_that_takes_no_processor(at: Setting) -> tuple[str, ...]:
    at.listen(True)
    at.monkeypatch.setattr(setup.trace, "get_tracer_provider", Closed)
    return (
        "cortex: trace: the tracer provider already set (tests.test_magic_trace.Closed) "
        "takes no span processor",
    )


def _a_phoenix_folder_that_cannot_be_made(at: Setting) -> tuple[str, ...]:
    """PHOENIX_WORKING_DIR names a file (a typo, a stale setting)."""
    blocker = at.tmp_path / "not-a-folder"
    blocker.write_text("x", encoding="utf-8")
    at.monkeypatch.setenv("PHOENIX_WORKING_DIR", str(blocker / "phoenix"))
    at.listen(False)  # a port that answers, but not as Phoenix
    return "cortex: trace: Phoenix could not start: ", str(blocker / "phoenix")


def _phoenix_without_the_otlp_exporter(at: Setting) -> tuple[str, ...]:
    """Phoenix's server installed but not the OTLP/HTTP exporter it sends spans with (an
    import that fails)."""
    at.listen(True)
    exporter = "opentelemetry.exporter.otlp.proto.http.trace_exporter"
    at.monkeypatch.setitem(sys.modules, exporter, None)
    return (
        "cortex: trace: sending spans to Phoenix needs the OpenTelemetry SDK and its OTLP/HTTP "
        "exporter; install them with: pip install arize-phoenix-otel\n",
    )


@pytest.mark.parametrize(
    "arrange",
    [
        _phoenix_not_installed,
        _a_provider_that_takes_no_processor,
        _a_phoenix_folder_that_cannot_be_made,
        _phoenix_without_the_otlp_exporter,
    ],
)
def test_phoenix_that_cannot_be_set_up_is_said_in_one_line(
    ip: InteractiveShell,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    listen: Callable[..., Listener],
    arrange: Arrange,
) -> None:
    """Each reason `%cortex trace phoenix` cannot go on is one `cortex:` line that says it
    (and what to install, or the folder and the error), and nothing is registered."""
    start, *within = arrange(Setting(monkeypatch, tmp_path, listen))
    err = refused(ip, capsys)
    assert err.startswith(start), err
    for part in within:
        assert part in err
