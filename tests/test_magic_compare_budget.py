"""``--compare-budget`` (issue 35, item 6): a budget for a ``--compare`` cell's runs all
together. It is split evenly into each run's budget (columns × repeats shares), and each
run's budget holds, so the cell's total never passes it. The fake servers report usage:
every reply spends all the reply cap it was sent with, and every reply asks for another
action, so only the budget ends the columns.
"""

from __future__ import annotations

from typing import Any

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from cortex_jupyter.session import CortexRunError
from tests.models.fake_openai_server import FakeOpenAIServer, Stream, finish, texts, usage
from tests.test_magic_compare import compare
from tests.test_magic_compare import servers as servers  # the fixture

ACT = '<action id="n{}" type="python">{{"code": "1 + 1"}}</action>'


def greedy(turn: int) -> Stream:
    """A reply that acts (so the run goes on) and spends its whole reply cap."""
    return Stream([*texts(ACT.format(turn), 9), finish(), usage(400, 10**6)], at_cap=True)


def spent(column: Any) -> int:
    return sum(run.usage.get("prompt_tokens", 0) + run.usage.get("completion_tokens", 0)
               for run in column.runs)  # fmt: skip


@pytest.mark.parametrize(("repeat", "whole"), [(1, 9000), (2, 12000)])
def test_the_cells_total_never_passes_its_compare_budget(
    ip: InteractiveShell, servers: list[FakeOpenAIServer], repeat: int, whole: int
) -> None:
    for server in servers:
        server.script(*[greedy(turn) for turn in range(40)])
    line = f"--compare ma,mb,mc --compare-budget {whole}tok --repeat {repeat} --max-turns 30"
    try:
        result = compare(ip, line)
    except CortexRunError:  # no column answered: each ran until its share was spent
        result = ip.user_ns["_compare"]
    runs = [run for column in result.values() for run in column.runs]
    assert len(runs) == 3 * repeat
    assert all(run.status == "budget" for run in runs)
    total = sum(spent(column) for column in result.values())
    assert 0 < total <= whole
    share = whole // (3 * repeat)
    for column in result.values():
        for run in column.runs:
            assert run.usage["prompt_tokens"] + run.usage["completion_tokens"] <= share
    # Each request's reply cap is what its run's share left it, never more.
    for server in servers:
        assert all(r.json["max_tokens"] <= share for r in server.requests)


def test_a_smaller_budget_of_a_run_holds_under_the_cells(
    ip: InteractiveShell, servers: list[FakeOpenAIServer]
) -> None:
    for server in servers[:2]:
        server.script(*[greedy(turn) for turn in range(40)])
    try:
        result = compare(ip, "--compare ma,mb --compare-budget 20000tok --budget 3000tok")
    except CortexRunError:
        result = ip.user_ns["_compare"]
    assert all(spent(column) <= 3000 for column in result.values())


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ("--script --compare-budget 0.1", "--compare-budget goes with --compare"),
        ("--script --compare x,y --compare-budget lots", "--compare-budget: a budget is"),
        ("--script --compare x,y --compare-budget 1tok", "under a token for each of its 2 runs"),
        ("--script --compare x,y --compare-budget 0.1 --budget 500tok", "different units"),
    ],
)
def test_a_compare_budget_that_cannot_hold_is_one_line(
    ip: InteractiveShell, line: str, says: str
) -> None:
    with pytest.raises((UsageError, CortexRunError)) as caught:
        ip.run_cell_magic("cortex", f"--text {line}", "<response>x</response>")
    assert says in str(caught.value) and "\n" not in str(caught.value)
