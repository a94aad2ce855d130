"""Cases from stored runs: a run's prompt, its actions and its answer, as a case whose
expectations the same run passes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cortex_jupyter import store
from cortex_jupyter.experiments import expect
from cortex_jupyter.experiments.recorded import cases_from_runs
from cortex_jupyter.models import ScriptModel
from cortex_jupyter.runtime import Agent, Registry

SCRIPT = """<action id="a1">{"name": "lookup", "parameters": {"order": "A7"},
 "output_key": "found"}</action>
<action id="a2">{"name": "refund", "parameters": {"amount": "$found.total"}}</action>
--- next turn ---
<response final="true">Refunded 20 ☃.</response>"""


def tools() -> Registry:
    registry = Registry()

    @registry.tool
    def lookup(order: str) -> dict[str, Any]:
        """Look up an order."""
        return {"order": order, "total": 20}

    @registry.tool
    def refund(amount: int) -> str:
        """Refund."""
        return f"refunded {amount}"

    return registry


def stored(db: Path, prompt: str, script: str = SCRIPT) -> Any:
    agent = Agent(model=ScriptModel(script), registry=tools())
    run = agent.run_sync(prompt, store=store.open_store(db))
    store.open_store(db).flush()
    return run


def test_a_run_id_makes_a_case_its_own_run_passes(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    run = stored(db, "Refund order A7 for Ann please, she asked twice")
    (case,) = cases_from_runs(run.id[:6], store=db)
    assert case.prompt == "Refund order A7 for Ann please, she asked twice"
    assert case.name == "Refund order A7 for Ann please,"
    assert case.metadata == {"run": run.id}
    assert [e.to_data() for e in case.expect] == [
        {
            "kind": "tools",
            "calls": [["lookup", {"order": "A7"}], ["refund", {"amount": "$found.total"}]],
        },
        {"kind": "answer", "equals": "Refunded 20 ☃."},
    ]
    back = store.open_run(run.id, store=db)
    assert all(e.check(back).passed and e.check(run).passed for e in case.expect)
    assert not expect.tools([("refund", {"amount": 21})]).check(back).passed


def test_a_list_of_ids_and_a_query_give_unique_names(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    one = stored(db, "refund order A7")
    two = stored(db, "refund order A7")
    plain = stored(db, "say hi", '<response final="true">hi</response>')
    cases = cases_from_runs([one.id, two.id, plain.id], store=db)
    assert [c.name for c in cases] == ["refund order A7", "refund order A7 (2)", "say hi"]
    assert [e.kind for e in cases[2].expect] == ["answer"]
    found = cases_from_runs("refund A7", store=db)
    assert sorted(c.metadata["run"] for c in found) == sorted([one.id, two.id])


def test_an_unknown_id_in_a_list_is_named_and_bad_input_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    stored(db, "anything")
    with pytest.raises(store.UnknownRun, match="nope"):
        cases_from_runs(["nope"], store=db)
    with pytest.raises(TypeError):
        cases_from_runs([1, 2], store=db)  # type: ignore[list-item]
    assert cases_from_runs("words nobody wrote", store=db) == []
