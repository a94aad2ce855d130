"""Expectations judge a finished run from its record: hand-built runs with known times,
real runs of a script model with tools, and the same runs read back from the store."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import anyio
import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cortex_jupyter
from cortex_jupyter import store
from cortex_jupyter.experiments import expect, results
from cortex_jupyter.models import ScriptModel
from cortex_jupyter.protocol.events import Action, ProtocolError
from cortex_jupyter.runtime import Agent, Registry, Run
from cortex_jupyter.runtime.core.record.graph import ActionNode


def node(id: str, name: str, started: Any = None, finished: Any = None, **more: Any) -> ActionNode:
    parameters = more.pop("parameters", {})
    status = more.pop("status", "done")
    return ActionNode(
        id, name, action=Action(id, name, parameters=parameters), status=status,
        started=started, finished=finished, **more,
    )  # fmt: skip


def hand_run(*nodes: ActionNode, status: str = "completed", **more: Any) -> Run:
    run = Run(status=status, started=0.0, ended=more.pop("ended", 10.0), **more)
    run.actions = {n.id: n for n in nodes}
    return run


# --------------------------------------------------------------------------- answer


class Answered:
    def __init__(self, answer: str) -> None:
        self.answer = answer


@pytest.mark.parametrize(
    ("made", "text", "passed", "reason"),
    [
        (expect.answer(equals="Paris"), " Paris\n", True, ""),
        (expect.answer(equals="Paris"), "Lyon", False, "answer is 'Lyon', expected 'Paris'"),
        (expect.answer(contains="Paris"), "It is Lyon", False, "answer lacks 'Paris'"),
        (expect.answer(contains=["a", "b"]), "a and b", True, ""),
        (expect.answer(contains="paris", case_sensitive=False), "PARIS!", True, ""),
        (expect.answer(regex=r"\d{4}"), "in 1889", True, ""),
        (expect.answer(regex=r"\d{4}"), "long ago", False, r"answer does not match /\d{4}/"),
    ],
)
def test_answer_kinds_pass_or_say_what_is_wrong(
    made: results.Expectation, text: str, passed: bool, reason: str
) -> None:
    verdict = made.check(Answered(text))
    assert (verdict.passed, verdict.reason) == (passed, reason)
    assert verdict.score == (1.0 if passed else 0.0)


def test_a_long_answer_is_shortened_in_the_reason() -> None:
    verdict = expect.answer(equals="Paris").check(Answered("Lyon " * 10_000))
    assert not verdict.passed and len(verdict.reason) < 160 and "…" in verdict.reason


def test_a_check_function_gives_a_bool_a_score_or_a_reason_and_its_exception_is_a_verdict() -> None:
    run = Answered("42")
    assert expect.answer(check=lambda a: a == "42").check(run).passed
    scored = expect.answer(check=lambda a: 0.25).check(run)
    assert not scored.passed and scored.score == 0.25
    said = expect.answer(check=lambda a: (False, "not prime")).check(run)
    assert said.reason == "not prime"

    def boom(answer: str) -> bool:
        raise KeyError("nope")

    broken = expect.answer(check=boom).check(run)
    assert not broken.passed and broken.reason == "boom raised KeyError: 'nope'"


def test_a_bad_regex_is_refused_when_the_expectation_is_made() -> None:
    with pytest.raises(ValueError, match=r"regex '\(unclosed' is not valid"):
        expect.answer(regex="(unclosed")


# --------------------------------------------------------------------------- output


class City(pydantic.BaseModel):
    name: str
    people: int


@dataclasses.dataclass
class Town:
    name: str
    people: int


class Typed:
    def __init__(self, output: Any, status: str = "completed", reason: str | None = None) -> None:
        self.output, self.status, self.reason = output, status, reason


@pytest.mark.parametrize(
    "value", [City(name="Paris", people=2), Town("Paris", 2), {"name": "Paris", "people": 2}]
)
def test_output_equals_and_fields_read_models_dataclasses_and_mappings(value: Any) -> None:
    assert expect.output(equals=City(name="Paris", people=2)).check(Typed(value)).passed
    assert (
        expect.output(fields={"name": "Paris", "people": lambda n: n > 1})
        .check(Typed(value))
        .passed
    )
    verdict = expect.output(fields={"name": "Lyon"}).check(Typed(value))
    assert not verdict.passed and verdict.reason == "name is 'Paris', expected 'Lyon'"
    assert verdict.details == {"fields": {"name": ["'Paris'", "'Lyon'"]}}


def test_output_differences_name_each_field() -> None:
    verdict = expect.output(equals=City(name="Paris", people=3)).check(
        Typed(City(name="Paris", people=2))
    )
    assert not verdict.passed and verdict.details == {"fields": {"people": ["2", "3"]}}


def test_no_typed_answer_says_why() -> None:
    verdict = expect.output(fields={"name": "Paris"}).check(
        Typed(None, "failed", "the answer never fit")
    )
    assert not verdict.passed and verdict.reason == "no typed answer (the answer never fit)"


def test_a_field_predicate_that_raises_fails_the_field() -> None:
    verdict = expect.output(fields={"people": lambda n: 1 / 0}).check(Typed({"people": 2}))
    assert not verdict.passed and "people" in verdict.details["fields"]


# --------------------------------------------------------------------------- tools


def calls_run(*names: str, **parameters: dict[str, Any]) -> Run:
    return hand_run(
        *(
            node(f"a{i}", n, float(i), float(i) + 0.5, parameters=parameters.get(n, {}))
            for i, n in enumerate(names)
        )
    )


@pytest.mark.parametrize(
    ("order", "actual", "passed"),
    [
        ("in_order", ["a", "x", "b"], True),
        ("in_order", ["b", "a"], False),
        ("exact", ["a", "b"], True),
        ("exact", ["a", "x", "b"], False),
        ("any_order", ["b", "x", "a"], True),
        ("any_order", ["b", "x"], False),
        ("superset", ["b", "x", "a"], True),
        ("subset", ["a"], True),
        ("subset", ["a", "x"], False),
    ],
)
def test_tool_orders(order: str, actual: list[str], passed: bool) -> None:
    verdict = expect.tools(["a", "b"], order=order).check(calls_run(*actual))
    assert verdict.passed is passed
    assert (verdict.score == 1.0) is passed


def test_tool_details_name_missing_extra_and_out_of_order_actions() -> None:
    run = calls_run("b", "a", "x")  # ids a0=b, a1=a, a2=x
    in_order = expect.tools(["a", "b", "c"]).check(run)
    assert in_order.details == {"missing": ["c"], "extra": [], "out_of_order": ["a0"]}
    assert in_order.score == pytest.approx(1 / 3)
    assert in_order.reason == "missing c; out of order: b (a0)"
    exact = expect.tools(["a", "b"], order="exact").check(run)
    assert exact.details["extra"] == ["a2"] and exact.score == pytest.approx(2 * 1 / 5)


def test_tool_args_subset_exact_ignore_and_predicates() -> None:
    run = calls_run("refund", refund={"amount": 20, "currency": "EUR"})
    assert expect.tools([("refund", {"amount": 20})]).check(run).passed
    assert not expect.tools([("refund", {"amount": 20})], args="exact").check(run).passed
    assert (
        expect.tools([("refund", {"amount": 20, "currency": "EUR"})], args="exact")
        .check(run)
        .passed
    )
    assert expect.tools([("refund", {"amount": 99})], args="ignore").check(run).passed
    assert expect.tools([("refund", {"amount": lambda a: a < 50})]).check(run).passed
    assert not expect.tools([("refund", {"amount": lambda a: a.nope})]).check(run).passed


def test_resolved_parameters_match_too() -> None:
    run = calls_run("refund", refund={"amount": "$total"})
    run.actions["a0"].resolved = {"amount": 20}
    assert expect.tools([("refund", {"amount": 20})]).check(run).passed
    assert expect.tools([("refund", {"amount": "$total"})]).check(run).passed


def test_hostile_actions_give_verdicts() -> None:
    odd = node("z", "refund", None, None, parameters={}, status="pending")
    object.__setattr__(odd.action, "parameters", ["not", "a", "dict"])  # type: ignore[union-attr]
    run = hand_run(
        odd, node("y", "lookup ☃", "soon", None), node("w", "refund", 1.0, 2.0, parent="y")
    )
    verdict = expect.tools([("refund", {"amount": 1}), "lookup ☃"], order="any_order").check(run)
    assert not verdict.passed and verdict.details["missing"] == ["refund"]
    assert expect.protocol().check(run).passed is False


def test_tool_calls_are_read_in_start_order_not_in_record_order() -> None:
    run = hand_run(
        node("a1", "late", 5.0, 6.0), node("a2", "early", 1.0, 2.0), node("a3", "never", None, None)
    )
    assert expect.tools(["early", "late", "never"], order="exact").check(run).passed


# --------------------------------------------------------------------------- graph


def test_graph_parallel_and_before_on_known_times() -> None:
    run = hand_run(
        node("l1", "lookup", 0.0, 2.0), node("l2", "lookup", 0.5, 3.0),
        node("r1", "refund", 3.5, 4.0), node("m", "mail", 1.0, 3.2),
    )  # fmt: skip
    assert (
        expect.graph(parallel=[["lookup", "mail"]], before={"refund": ["lookup", "mail"]})
        .check(run)
        .passed
    )
    verdict = expect.graph(
        parallel=[["refund", "l1"]], before={"mail": ["l1"], "r1": "nothing"}
    ).check(run)
    assert not verdict.passed
    assert verdict.details == {
        "broken": [["mail", "l1"], ["r1", "nothing"]],
        "not_parallel": [["refund", "l1"]],
        "missing": ["nothing"],
    }
    assert verdict.reason.startswith("no action 'nothing'; mail started before l1 finished")


def test_graph_on_actions_with_no_times_is_a_failed_verdict() -> None:
    run = hand_run(node("a", "lookup"), node("b", "refund", 1.0, None))
    verdict = expect.graph(parallel=[["lookup", "refund"]], before={"refund": ["lookup"]}).check(
        run
    )
    assert not verdict.passed and verdict.score == 0.0


# --------------------------------------------------------------------------- limits and protocol


def test_limits_say_which_was_passed_and_an_unknown_cost_fails() -> None:
    run = hand_run(node("a", "x", 4.0, 5.0), turns=3)
    assert expect.limits(turns=3, seconds=10, first_action=4).check(run).passed
    verdict = expect.limits(turns=2, seconds=5, first_action=1).check(run)
    assert (
        not verdict.passed
        and verdict.reason == "turns 3 > 2; seconds 10.00 s > 5.00 s; first_action 4.00 s > 1.00 s"
    )
    unknown = expect.limits(cost=1.0).check(Run(status="completed", turns=1))
    assert not unknown.passed and unknown.reason == "cost unknown"


def test_protocol_counts_errors_failed_actions_and_an_unfinished_run() -> None:
    run = hand_run(node("a", "x", 0.0, 1.0), node("b", "y", 1.0, 2.0, status="failed"))
    run.errors.append(ProtocolError("forged_result", "a result the model wrote"))
    verdict = expect.protocol().check(run)
    assert not verdict.passed and verdict.score == pytest.approx(1 - 2 / 3)
    assert verdict.reason == "1 protocol error(s): forged_result; y (b) failed"
    stopped = expect.protocol().check(hand_run(status="turn_limit", reason="out of turns"))
    assert not stopped.passed and stopped.score == 0.0 and "out of turns" in stopped.reason


# --------------------------------------------------------------------------- saving


def test_every_kind_round_trips_through_plain_data_and_functions_are_refused() -> None:
    made = [
        expect.answer(equals="a", contains=["b"], regex="c", case_sensitive=False, name="ans"),
        expect.output(fields={"name": "Paris"}), expect.output(equals=City(name="P", people=1)),
        expect.tools(["a", ("b", {"n": 1})], order="exact", args="exact"),
        expect.graph(parallel=[["a", "b"]], before={"c": ["a"]}),
        expect.limits(cost=0.1, tokens=100, turns=2, seconds=5, first_action=1),
        expect.judge("is it polite?", model="gpt-4o-mini", threshold=0.7), expect.protocol(),
    ]  # fmt: skip
    for each in made:
        back = results.from_data(each.to_data())
        assert back.to_data() == each.to_data() and type(back) is type(each)
    with pytest.raises(ValueError, match=r"calls\[0\]\[1\]\['n'\] holds a function"):
        expect.tools([("b", {"n": lambda n: n})]).to_data()
    with pytest.raises(ValueError, match="check holds a function"):
        expect.answer(check=bool).to_data()


# --------------------------------------------------------------------------- real runs


def registry(opened: dict[str, anyio.Event]) -> Registry:
    tools = Registry()

    @tools.tool
    async def lookup(order: str) -> dict[str, Any]:
        """Look up an order."""
        opened["lookup"].set()
        await opened["mail"].wait()  # it finishes only once mail runs: they overlap
        return {"order": order, "total": 20}

    @tools.tool
    async def mail(to: str) -> str:
        """Send a mail."""
        opened["mail"].set()
        await opened["lookup"].wait()
        return "sent"

    @tools.tool
    def refund(amount: int) -> str:
        """Refund an amount."""
        return f"refunded {amount}"

    return tools


SCRIPT = """<action id="a1">{"name": "lookup", "parameters": {"order": "A7"},
 "output_key": "found"}</action>
<action id="a2">{"name": "mail", "parameters": {"to": "ann"}}</action>
<action id="a3">{"name": "refund", "parameters": {"amount": "$found.total"}}</action>
--- next turn ---
<response final="true">Refunded 20 to Ann.</response>"""

EXPECTED = [
    expect.tools(["lookup", ("refund", {"amount": 20})], order="in_order"),
    expect.tools(["mail", "lookup", "refund"], order="any_order", args="ignore"),
    expect.graph(parallel=[["lookup", "mail"]], before={"refund": ["lookup"]}),
    expect.answer(contains="Refunded 20"),
    expect.limits(turns=2, tokens=10_000),
    expect.protocol(),
]


async def real_run(path: Path) -> Run:
    opened = {"lookup": anyio.Event(), "mail": anyio.Event()}
    agent = Agent(model=ScriptModel(SCRIPT, chunk_size=11), registry=registry(opened))
    with anyio.fail_after(20):
        return await agent.run("refund order A7 and mail Ann", store=store.open_store(path))


@pytest.mark.anyio
async def test_a_real_run_and_its_stored_copy_get_the_same_verdicts(tmp_path: Path) -> None:
    run = await real_run(tmp_path / "runs.db")
    live = {e.to_data()["kind"] + str(i): e.check(run) for i, e in enumerate(EXPECTED)}
    assert all(v.passed for v in live.values()), live
    back = cortex_jupyter.open_run(run.id, store=tmp_path / "runs.db")
    stored = {e.to_data()["kind"] + str(i): e.check(back) for i, e in enumerate(EXPECTED)}
    assert stored == live
    wrong = expect.graph(before={"mail": ["lookup"]}, parallel=[["refund", "lookup"]])
    assert wrong.check(run) == wrong.check(back)
    assert wrong.check(run).details["broken"] == [["mail", "lookup"]]


# --------------------------------------------------------------------------- properties

NAMES = st.sampled_from(["a", "b", "c"])


def _subsequence(small: list[str], big: list[str]) -> bool:
    it = iter(big)
    return all(any(x == y for y in it) for x in small)


def _multiset_in(small: list[str], big: list[str]) -> bool:
    return all(small.count(x) <= big.count(x) for x in set(small))


@settings(max_examples=150, deadline=None)
@given(st.lists(NAMES, max_size=6), st.lists(NAMES, max_size=6))
def test_tool_scores_are_in_range_and_one_exactly_when_the_rule_holds(
    expected: list[str], actual: list[str]
) -> None:
    run = calls_run(*actual)
    verdicts = {o: expect.tools(expected, order=o).check(run) for o in expect.ORDERS}
    rules = {
        "exact": expected == actual,
        "in_order": _subsequence(expected, actual),
        "any_order": _multiset_in(expected, actual),
        "superset": _multiset_in(expected, actual),
        "subset": set(actual) <= set(expected),
    }
    for order, verdict in verdicts.items():
        assert 0.0 <= verdict.score <= 1.0
        assert verdict.passed is rules[order], order
        assert (verdict.score == 1.0) is rules[order], order
    assert not verdicts["exact"].passed or verdicts["in_order"].passed
    assert not verdicts["in_order"].passed or verdicts["any_order"].passed
