"""Traces at their edges: what a hostile model, a broken exception, a user's own span
processor or a stopped run does to the spans (``runtime/integrations/tracing``).

Runs go through the real parser, scheduler and loop with script models; the spans are
read from the OpenTelemetry SDK's in-memory exporter (``tests/otel_spans``).
"""

from __future__ import annotations

import json

import pytest
from opentelemetry.sdk.trace import ReadableSpan

from cortex_jupyter.models import ScriptModel
from cortex_jupyter.runtime import Agent, Registry
from cortex_jupyter.runtime.integrations.tracing.spans import CAPTURE_CONTENT
from tests.otel_spans import recorded, strings

#: A key the environment holds under a credential's name (so a secret to cortex).
KEY = "sk-edge-0123456789abcdefXYZ"


@pytest.fixture
def secret_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CORTEX_EDGE_API_KEY", KEY)
    monkeypatch.setenv(CAPTURE_CONTENT, "true")


def every_text(spans: list[ReadableSpan]) -> str:
    return "\n".join(t for s in spans for t in strings(s))


@pytest.mark.usefixtures("secret_env")
def test_a_tool_or_agent_the_model_names_with_a_secret_shows_no_secret_in_a_span_name() -> None:
    """The model writes a key as a tool's or an agent's name (untrusted text): the actions
    fail as unknown, and the key is in no span, its name included (a span's name is the
    first thing a trace viewer shows)."""
    tool = json.dumps({"name": KEY})
    agent = json.dumps({"name": KEY, "parameters": {"task": "x"}})
    script = (
        f'<action id="t">{tool}</action><action type="agent" id="g">{agent}</action>'
        "<response>ok</response>"
    )
    with recorded() as spans:
        run = Agent(registry=Registry(builtins=False), model=ScriptModel(script)).run_sync("go")
    assert {n.id: n.status for n in run.actions.values()} == {"t": "failed", "g": "failed"}
    names = sorted(s.name for s in spans if s.name.startswith("execute_tool"))
    assert names == ["execute_tool [redacted]", "execute_tool [redacted]"]
    assert KEY not in every_text(spans)


# ---- tracing never breaks the run it watches -----------------------------------------------


class Unprintable(Exception):
    """An exception whose message cannot be read (its ``__str__`` raises)."""

    def __str__(self) -> str:
        raise RuntimeError("no message for you")


def test_a_tool_failing_with_an_unprintable_exception_fails_as_that_exception() -> None:
    """The action fails (the run goes on to its answer), its error and its span's
    exception name the exception the tool raised, not the one its ``__str__`` raised."""
    registry = Registry(builtins=False)

    @registry.tool
    def odd() -> None:
        """Fails oddly."""
        raise Unprintable()

    script = '<action id="o">{"name": "odd"}</action><response>went on</response>'
    with recorded() as spans:
        run = Agent(registry=registry, model=ScriptModel(script)).run_sync("go")
    assert run.status == "completed"
    assert run.answer == "went on"
    node = run.actions["o"]
    assert node.status == "failed"
    assert node.error is not None and node.error.startswith("Unprintable")
    (span,) = [s for s in spans if s.name == "execute_tool odd"]
    (exception,) = [e for e in span.events if e.name == "exception"]
    assert (exception.attributes or {})["exception.type"].endswith("Unprintable")
