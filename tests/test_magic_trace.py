"""``%cortex trace``: whether runs' spans go anywhere, and ``%cortex trace phoenix``."""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from cortex_jupyter.runtime.integrations.tracing import setup
from tests.otel_spans import sdk_provider


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


def test_phoenix_missing_says_how_to_install_it_in_one_line(
    ip: InteractiveShell, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    real = importlib.util.find_spec

    def find_spec(name: str, *args: Any) -> Any:
        return None if name == "phoenix" else real(name, *args)

    monkeypatch.setattr(setup.importlib.util, "find_spec", find_spec)
    ip.run_line_magic("cortex", "trace phoenix")
    captured = capsys.readouterr()
    assert captured.err == (
        "cortex: trace: Phoenix is not installed here; install it with: pip install arize-phoenix\n"
    )
    assert captured.out == ""


@pytest.mark.parametrize("line", ["trace phonix", "trace phoenix now", "trace --on"])
def test_anything_else_is_a_usage_error(ip: InteractiveShell, line: str) -> None:
    with pytest.raises(UsageError, match=r"^%cortex trace: .* is not a command here; use "):
        ip.run_line_magic("cortex", line)


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
