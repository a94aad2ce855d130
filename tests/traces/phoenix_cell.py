"""A traced run sent to a Phoenix server, as the docs' recipe does it, and its spans read
back with Phoenix's client (run as a script).

    python tests/traces/phoenix_cell.py BASE_URL PROJECT AT_LEAST

``phoenix.otel.register(endpoint=..., project_name=...)`` is the recipe's one line; then
an agent runs a reply with a dependent pair of actions, a failed one and a nested agent;
its spans are flushed. Then, in the same process (Phoenix's import is paid once),
``phoenix_spans.spans`` waits for ``AT_LEAST`` of the project's spans. Prints one JSON
object: ``run`` (its id, status, its actions' statuses) and ``spans``.
"""

from __future__ import annotations

import json
import sys
import time

from phoenix.otel import register

from cortex_jupyter.models import ScriptModel
from cortex_jupyter.runtime import Agent, Registry
from tests.traces.phoenix_spans import spans

SCRIPT = """\
<thought>look it up, then check it</thought>
<action id="look">{"name": "lookup", "parameters": {"city": "Oslo"}, "output_key": "temp"}</action>
<action id="check">{"name": "convert", "parameters": {"celsius": "$temp"}}</action>
<action id="oops">{"name": "broken", "parameters": {}}</action>
<action type="agent" id="ask">{"name": "researcher", "parameters": {"task": "why?"}}</action>
--- next turn ---
<response final="true">Oslo is 4 °C (39.2 °F).</response>
--- reply to ask ---
<action id="r1">{"name": "lookup", "parameters": {"city": "Bergen"}}</action>
--- next turn ---
<response>Northern latitude.</response>
"""


def main(base_url: str, project: str, at_least: int) -> None:
    endpoint = f"{base_url}/v1/traces"
    provider = register(endpoint=endpoint, project_name=project, batch=True, verbose=False)
    registry = Registry(builtins=False)

    @registry.tool
    def lookup(city: str) -> float:
        """The temperature in a city."""
        time.sleep(0.05)
        return 4.0

    @registry.tool
    def convert(celsius: float) -> float:
        """Celsius to Fahrenheit."""
        return celsius * 9 / 5 + 32

    @registry.tool
    def broken() -> None:
        """Always fails."""
        raise RuntimeError("the sensor is offline")

    Agent("researcher", registry=registry, tools=["lookup"])
    agent = Agent(
        "weather", registry=registry, model=ScriptModel(SCRIPT, chunk_size=24, delay=0.005)
    )
    run = agent.run_sync("How cold is Oslo?")
    provider.force_flush()
    provider.shutdown()
    ran = {"id": run.id, "status": run.status,
           "actions": {k: n.status for k, n in run.actions.items()}}  # fmt: skip
    print(json.dumps({"run": ran, "spans": spans(base_url, project, at_least)}, default=str))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
