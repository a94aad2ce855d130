"""An experiment against the live SmolLM2-135M (issue 34, "How it is checked"): a small
dataset run in two dialects, with and without the grammar, with repeats.

What is asserted is the machinery: every try ran to an end, was stored as a run of the
experiment and was judged. How well a 135M model does is recorded, never asserted (a live
model's quality is not a contract): the matrix is printed, and docs/live-model.md has the
figures of a run.
"""

from __future__ import annotations

import pytest

from cortex_jupyter import local, open_run
from cortex_jupyter.experiments import expect
from cortex_jupyter.experiments.cases import Case, Dataset
from cortex_jupyter.models import OpenAIModel
from cortex_jupyter.runtime import Agent, Registry

pytestmark = pytest.mark.live

#: Short replies, one turn: a try is one small request (the system prompt is the bulk of it,
#: and llama.cpp reuses it from its cache while one column's tries run in a row:
#: ``order="agent"``), so the experiment adds about a minute to the live unit.
LIMITS = {"max_tokens": 64, "max_turns": 1, "temperature": 0.0}


def tools() -> Registry:
    registry = Registry(builtins=False)

    @registry.tool
    def add(a: int, b: int) -> int:
        """Add two whole numbers."""
        return a + b

    return registry


CASES = Dataset(
    [
        Case("What is 2 + 3? Use the add tool.", name="add",
             expect=[expect.tools(["add"]), expect.answer(contains="5")]),
    ],
    name="live-smoke",
)  # fmt: skip


@pytest.mark.timeout(1800)
def test_an_experiment_in_two_dialects_with_and_without_the_grammar(
    live_server: local.Server,
) -> None:
    model = OpenAIModel(live_server.model, base_url=live_server.base_url, api_key="local")
    base = Agent(model=model, registry=tools(), **LIMITS)
    columns = {
        f"{dialect}{'+grammar' if constrain else ''}": base.with_options(
            dialect=dialect, constrain=constrain
        )
        for dialect in ("cortex", "sigil")
        for constrain in (False, True)
    }
    experiment = CASES.run(columns, repeat=2, time_limit=300, order="agent", progress=False)

    print(f"\n[live experiment]\n{experiment!r}", flush=True)
    frame = experiment.to_pandas()
    print(frame[["case", "agent", "repeat", "passed", "score", "status", "tokens", "seconds"]]
          .to_string(), flush=True)  # fmt: skip

    assert len(experiment.tries) == len(CASES) * len(columns) * 2
    assert experiment.status == "completed", experiment.note
    for tried in experiment.tries:
        assert tried.done, tried.key
        assert tried.run_id is not None, (tried.key, tried.error)
        stored = open_run(tried.run_id)
        assert stored.status != "running" and stored.options["experiment"] == experiment.id
        assert "protocol" in tried.verdicts, (tried.key, tried.verdicts)
