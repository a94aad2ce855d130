"""Where spans go, in words (``%cortex trace``), and a local Phoenix in one call
(``%cortex trace phoenix``).

Phoenix (``arize-phoenix``) is not a dependency: ``start_phoenix`` starts its server as a
process of its own on 127.0.0.1 and sends spans to it over OTLP/HTTP, as
``phoenix.otel.register()`` does, but with the OpenTelemetry SDK and exporter Phoenix
installs: importing ``phoenix.otel`` imports the whole ``phoenix`` package, the server
with it (thousands of modules, half a minute on a busy machine), into the kernel. When a
tracer provider is already set, OpenTelemetry will not replace it: Phoenix's processor
is added to it instead. Without Phoenix installed, ``PhoenixMissing`` says how to install
it in one line.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import os
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar
from urllib.parse import urlsplit

from opentelemetry import trace

from cortex_jupyter.runtime.core.errors import CortexError
from cortex_jupyter.runtime.core.trust.secrets import redact
from cortex_jupyter.runtime.integrations.tracing.remote import configured
from cortex_jupyter.runtime.integrations.tracing.spans import CAPTURE_CONTENT, capture_content

__all__ = [
    "PhoenixCannotJoin",
    "PhoenixCouldNotStart",
    "PhoenixDidNotStart",
    "PhoenixMissing",
    "PhoenixNeedsExporter",
    "PhoenixStarted",
    "describe",
    "start_phoenix",
]

#: Phoenix's own default port; another is taken when something else holds it.
PHOENIX_PORT = 6006
#: The project our spans go to in Phoenix.
PROJECT = "cortex"
#: The resource attribute Phoenix files spans under a project by (OpenInference's).
PROJECT_ATTRIBUTE = "openinference.project.name"
#: Phoenix's server, as ``python`` runs it (its arguments after the interpreter).
SERVER: tuple[str, ...] = ("-W", "ignore", "-m", "phoenix.server.main", "serve")
#: What runs the server for the kernel: it ends the server when the kernel ends, even
#: killed (its end of the pipe on the server's stdin closes, whatever the platform), and
#: ends itself when the server does (so a server that did not start is seen at once).
_WATCH = """\
import subprocess, sys, threading
server = subprocess.Popen(sys.argv[1:], stdin=subprocess.DEVNULL)
def kernel_gone():
    sys.stdin.buffer.read()
    server.terminate()
    try:
        server.wait(10)
    except subprocess.TimeoutExpired:
        server.kill()
threading.Thread(target=kernel_gone, daemon=True).start()
sys.exit(server.wait())
"""
#: How long a Phoenix server may take to start (it makes its database first).
PATIENCE = 120.0


@dataclass(eq=False, repr=False)
class PhoenixMissing(CortexError):
    """Raised when ``%cortex trace phoenix`` finds no Phoenix installed."""

    template: ClassVar[str] = (
        "Phoenix is not installed here; install it with: pip install arize-phoenix"
    )


@dataclass(eq=False, repr=False)
class PhoenixDidNotStart(CortexError):
    """Raised when a Phoenix server started for ``%cortex trace phoenix`` never answered."""

    log: str
    template: ClassVar[str] = (
        "Phoenix did not start (its log: {e.log}); "
        "try `python -m phoenix.server.main serve` in a terminal"
    )


@dataclass(eq=False, repr=False)
class PhoenixCouldNotStart(CortexError):
    """Raised when the Phoenix server's folder, log or process cannot be made."""

    why: str
    template: ClassVar[str] = "Phoenix could not start: {e.why}"


@dataclass(eq=False, repr=False)
class PhoenixNeedsExporter(CortexError):
    """Raised when the OpenTelemetry SDK or its OTLP/HTTP exporter cannot be imported."""

    template: ClassVar[str] = (
        "sending spans to Phoenix needs the OpenTelemetry SDK and its OTLP/HTTP exporter; "
        "install them with: pip install arize-phoenix-otel"
    )


@dataclass(eq=False, repr=False)
class PhoenixCannotJoin(CortexError):
    """Raised when the tracer provider already set takes no span processor."""

    provider: str
    template: ClassVar[str] = (
        "the tracer provider already set ({e.provider}) takes no span processor, and "
        "OpenTelemetry lets a process set its provider once: send its spans to Phoenix "
        "where it was configured"
    )


@dataclass(frozen=True)
class PhoenixStarted:
    """A Phoenix server this process started (or found) and sends spans to; ``joined``:
    its processor was added to a tracer provider already set."""

    url: str
    project: str
    started: bool
    joined: bool = False

    def __str__(self) -> str:
        how = "started" if self.started else "already running"
        also = " (beside the tracer provider's other processors)" if self.joined else ""
        return (
            f"Phoenix {how} at {self.url}; spans of every run go to its project "
            f"{self.project!r}{also} from the next cell on."
        )


def describe() -> str:
    """Whether spans go anywhere: the tracer provider, its span processors and their
    exporters (endpoints redacted), and whether content is recorded."""
    provider = trace.get_tracer_provider()
    if not configured(provider):
        return (
            "tracing: off (no OpenTelemetry tracer provider is configured, so runs make no "
            "spans).\nTo see traces: %cortex trace phoenix, logfire.configure(), or any "
            "OTLP exporter (docs: Traces)."
        )
    lines = [f"tracing: on; tracer provider {_kind(provider)}"]
    processors = _processors(provider)
    if processors is None:
        lines.append("  (its span processors are not visible from here)")
    elif not processors:
        lines.append("  no span processor: spans are made but go nowhere")
    for processor in processors or ():
        exporter = getattr(processor, "span_exporter", None)
        shown = f"  {_kind(processor)}"
        if exporter is not None:
            shown += f" -> {_kind(exporter)}"
            endpoint = getattr(exporter, "_endpoint", None)
            if isinstance(endpoint, str):
                shown += f" at {_where(endpoint)}"
        lines.append(shown)
    content = (
        "recorded" if capture_content() else f"not recorded ({CAPTURE_CONTENT}=true records it)"
    )
    lines.append(f"content (prompts, replies, arguments, results): {content}")
    return "\n".join(lines)


def start_phoenix(port: int | None = None) -> PhoenixStarted:
    """Start a local Phoenix (unless one answers at ``port`` already) and register it as
    the tracer provider. Raises ``PhoenixMissing`` when Phoenix is not installed."""
    if importlib.util.find_spec("phoenix") is None:
        raise PhoenixMissing()
    port = port or PHOENIX_PORT
    url = f"http://127.0.0.1:{port}"
    started = False
    if not _is_phoenix(url):  # (TensorBoard answers on 6006 too)
        if not _free(port):
            port = _free_port()
            url = f"http://127.0.0.1:{port}"
        _serve(port)
        started = True
    project, joined = _send_to(f"{url}/v1/traces")
    return PhoenixStarted(url, project, started, joined)


#: The endpoints this process sends spans to (``_send_to``), and their project.
_sending: dict[str, tuple[str, bool]] = {}


def _send_to(endpoint: str) -> tuple[str, bool]:
    """Send every span to ``endpoint`` (once however often asked): through a new tracer
    provider of project ``PROJECT`` when none is set, else through the one set (whose
    resource names the project). Returns the project and whether it joined one."""
    if endpoint in _sending:
        return _sending[endpoint]
    try:
        import requests
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as exc:
        raise PhoenixNeedsExporter() from exc

    joined = configured(trace.get_tracer_provider())
    if not joined:
        trace.set_tracer_provider(
            TracerProvider(resource=Resource.create({PROJECT_ATTRIBUTE: PROJECT}))
        )
    provider = trace.get_tracer_provider()  # (another thread may have set one first)
    add = getattr(provider, "add_span_processor", None)
    if add is None:
        raise PhoenixCannotJoin(_kind(provider))
    key = os.environ.get("PHOENIX_API_KEY")  # a Phoenix with authentication on
    headers = {"authorization": f"Bearer {key}"} if key else None
    direct = requests.Session()
    direct.trust_env = False  # Phoenix is on 127.0.0.1: never through an http_proxy
    exporter = OTLPSpanExporter(endpoint=endpoint, headers=headers, session=direct)
    add(BatchSpanProcessor(exporter))
    resource = getattr(provider, "resource", None)
    project = getattr(resource, "attributes", {}).get(PROJECT_ATTRIBUTE) or "default"
    _sending[endpoint] = (str(project), joined)
    return _sending[endpoint]


# ---- helpers -------------------------------------------------------------------------------


def _kind(obj: object) -> str:
    kind = type(obj)
    return f"{kind.__module__}.{kind.__qualname__}"


def _where(endpoint: str) -> str:
    """An exporter's endpoint as ``%cortex trace`` shows it: its scheme, host, port and
    path, redacted; never its user and password, query or fragment (a collector's key
    often travels there, under a variable whose name does not look like a credential)."""
    schemeless = "://" not in endpoint  # the gRPC exporter keeps ``[user@]host:port``
    try:
        parts = urlsplit(f"//{endpoint}" if schemeless else endpoint)
        host = parts.hostname or ""
        host = f"[{host}]" if ":" in host else host  # an IPv6 address
        port = f":{parts.port}" if parts.port is not None else ""
    except ValueError:  # not a URL
        return "(an endpoint that is not a URL)"
    hidden = "?…" if parts.query or parts.fragment else ""
    scheme = "" if schemeless else f"{parts.scheme}://"
    return redact(f"{scheme}{host}{port}{parts.path}") + hidden


def _processors(provider: object) -> tuple[object, ...] | None:
    """The SDK provider's span processors (None: a provider that does not show them)."""
    active = getattr(provider, "_active_span_processor", None)
    found = getattr(active, "_span_processors", None)
    return tuple(found) if isinstance(found, tuple | list) else None


def _is_phoenix(url: str) -> bool:
    """Whether a Phoenix server answers at ``url`` (it says its version there)."""
    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # 127.0.0.1
    with (
        contextlib.suppress(OSError, ValueError),
        direct.open(f"{url}/arize_phoenix_version", timeout=1) as reply,
    ):
        return bool(reply.status == 200)
    return False


def _free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _serve(port: int) -> None:
    """Phoenix's server as a child process (it ends when this process does), waited for."""
    folder = Path(os.environ.get("PHOENIX_WORKING_DIR") or Path.home() / ".phoenix")
    env = dict(os.environ, PHOENIX_PORT=str(port), PHOENIX_HOST="127.0.0.1")
    env.setdefault("PHOENIX_GRPC_PORT", str(_free_port()))
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with (folder / "cortex-phoenix.log").open("ab") as log:  # the child has its own copy
            process = subprocess.Popen(
                [sys.executable, "-c", _WATCH, sys.executable, *SERVER],
                env=env, stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
    except OSError as exc:
        raise PhoenixCouldNotStart(f"{type(exc).__name__}: {exc}") from exc
    atexit.register(_stop, process)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + PATIENCE
    while not _is_phoenix(url):
        if process.poll() is not None or time.monotonic() > deadline:
            _stop(process)
            raise PhoenixDidNotStart(str(folder / "cortex-phoenix.log"))
        time.sleep(0.5)


def _stop(process: subprocess.Popen[bytes]) -> None:
    """End the server: its watcher ends it when its stdin closes."""
    if process.stdin is not None:
        with contextlib.suppress(OSError):
            process.stdin.close()
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
