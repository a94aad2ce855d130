"""A traced run sent to a Phoenix server, as the docs' recipe does it (run as a script).

    python tests/traces/phoenix_cell.py ENDPOINT PROJECT

``phoenix.otel.register(endpoint=..., project_name=...)`` is the recipe's one line; then
an agent runs a reply with a dependent pair of actions, a failed one and a nested agent.
Prints the run as JSON (its id, its actions' ids and statuses) for the caller to find
its spans by; the spans are flushed before it exits.
"""

from __future__ import annotations

import json
import sys
import time

from phoenix.otel import register

from cortex_jupyter.models import ScriptModel
from cortex_jupyter.runtime import Agent, Registry

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


def main(endpoint: str, project: str) -> None:
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
    print(json.dumps({"id": run.id, "status": run.status,
                      "actions": {k: n.status for k, n in run.actions.items()}}))  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
