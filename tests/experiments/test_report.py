"""The report over hand-built tries: what the matrix, the summary row, the paired line,
a baseline comparison, the DataFrame rows and the ``assert_passes`` message say."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cortex_jupyter.display.matrix_data import Matrix, MatrixCell
from cortex_jupyter.experiments.report import (
    Comparison,
    cells,
    compare,
    failures_message,
    filtered,
    matrix,
    paired,
    rows,
    summaries,
)
from cortex_jupyter.experiments.results import Try, Verdict

CAFE = "café ☕"
MODEL = "模型"


def attempt(
    case: str,
    agent: str,
    repeat: int = 0,
    passed: bool | None = True,
    *,
    score: float | None = None,
    reason: str = "",
    cost: float | None = 0.01,
    tokens: int = 100,
    seconds: float | None = 1.0,
    error: str | None = None,
) -> Try:
    """A try: finished and judged by one ``answer`` expectation (``passed=None``: still pending)."""
    if passed is None:
        return Try(case, agent, repeat, status="pending", cost=None, tokens=0, seconds=None)
    if error is not None:
        return Try(
            case, agent, repeat, status="error", error=error, cost=cost, tokens=0, seconds=seconds
        )
    verdict = Verdict(passed, (1.0 if passed else 0.0) if score is None else score, reason)
    return Try(
        case,
        agent,
        repeat,
        run_id=f"run-{case}-{agent}-{repeat}",
        status="completed",
        verdicts={"answer": verdict},
        cost=cost,
        tokens=tokens,
        seconds=seconds,
    )


def test_a_cell_counts_finished_repeats_and_marks_disagreement() -> None:
    tries = [
        attempt(CAFE, MODEL, 0, True, seconds=1.0),
        attempt(CAFE, MODEL, 1, False, reason="answer lacks 'Paris'", seconds=3.0),
        attempt(CAFE, MODEL, 2, False, reason="answer lacks 'Paris'", seconds=2.0),
        attempt(CAFE, MODEL, 3, None),
    ]
    cell = cells(tries, [CAFE], [MODEL])[(CAFE, MODEL)]
    assert (cell.passed, cell.total, cell.pending, cell.flaky) == (1, 3, 1, True)
    assert cell.reasons == ("answer: answer lacks 'Paris'",)
    assert cell.seconds == 2.0
    assert cell.tokens == 300
    assert cell.cost == pytest.approx(0.03)
    assert cell.tries == (
        (0, f"run-{CAFE}-{MODEL}-0"),
        (1, f"run-{CAFE}-{MODEL}-1"),
        (2, f"run-{CAFE}-{MODEL}-2"),
        (3, None),
    )
    assert cell.change is None


def test_repeats_that_agree_are_not_flaky_and_an_empty_cell_is_there() -> None:
    tries = [attempt("a", "gpt", r, False, reason="no") for r in range(3)]
    table = cells([*tries, attempt("other", "gpt")], ["a", "b"], ["gpt"])
    assert set(table) == {("a", "gpt"), ("b", "gpt")}
    assert table[("a", "gpt")].flaky is False
    assert table[("b", "gpt")] == MatrixCell("b", "gpt", 0, 0, False, None, 0, None, (), None, ())


def test_cost_is_summed_over_known_prices_and_none_only_when_none_is_known() -> None:
    partly = [attempt("a", "gpt", 0, cost=0.5), attempt("a", "gpt", 1, cost=None)]
    unknown = [attempt("b", "gpt", 0, cost=None), attempt("b", "gpt", 1, cost=None)]
    table = cells(partly + unknown, ["a", "b"], ["gpt"])
    assert table[("a", "gpt")].cost == 0.5
    assert table[("b", "gpt")].cost is None
    m = matrix("t", partly + unknown, ["a", "b"], ["gpt"])
    assert m.note == "cost leaves out 3 tries whose price is unknown"
    assert m.summaries[0].cost == 0.5


def test_an_errored_try_is_a_finished_failure_with_its_error_as_reason() -> None:
    tries = [attempt("a", "gpt", 0, error="ConnectionError: server at http://x refused\n  twice")]
    cell = cells(tries, ["a"], ["gpt"])[("a", "gpt")]
    assert (cell.passed, cell.total, cell.pending) == (0, 1, 0)
    assert cell.reasons == ("ConnectionError: server at http://x refused twice",)


def test_long_reasons_are_cut_and_kept_distinct() -> None:
    long = "x" * 500
    tries = [attempt("a", "gpt", r, False, reason=f"{r} {long}") for r in range(8)]
    cell = cells(tries, ["a"], ["gpt"])[("a", "gpt")]
    assert len(cell.reasons) == 5
    assert all(len(r) <= 120 and r.endswith("…") for r in cell.reasons)


def test_summary_has_rate_wilson_interval_times_and_unfinished() -> None:
    tries = [attempt(f"c{i}", "gpt", 0, i < 8, seconds=float(i + 1)) for i in range(10)]
    tries.append(attempt("c10", "gpt", 0, None))
    (summary,) = summaries(tries, ["gpt"])
    assert (summary.passed, summary.total, summary.unfinished) == (8, 10, 1)
    assert summary.rate == 0.8
    assert (round(summary.low, 3), round(summary.high, 3)) == (0.490, 0.943)
    assert summary.p50 == 5.5
    assert summary.p95 == pytest.approx(9.55)
    assert summary.cost == pytest.approx(0.1)


def test_an_agent_with_no_finished_try_has_an_empty_summary() -> None:
    (summary,) = summaries([attempt("a", MODEL, 0, None)], [MODEL])
    assert (summary.total, summary.rate, summary.low, summary.high) == (0, 0.0, 0.0, 1.0)
    assert (summary.p50, summary.p95, summary.cost, summary.unfinished) == (None, None, None, 1)


def two_agents(gpt: list[bool], local: list[bool]) -> list[Try]:
    return [attempt(f"case {i}", "gpt", 0, ok) for i, ok in enumerate(gpt)] + [
        attempt(f"case {i}", "local", 0, ok) for i, ok in enumerate(local)
    ]


def test_paired_uses_mcnemar_on_pass_fail_outcomes() -> None:
    gpt = [True] * 9 + [False] * 3
    local = [True] * 6 + [False] * 3 + [True] + [False] * 2
    result = paired(two_agents(gpt, local), "gpt", "local")
    assert result is not None and result.method == "mcnemar"
    assert result.line.startswith("gpt vs local on 12 cases: gpt passed 9, local 7; 4 cases differ")


def test_paired_takes_the_majority_of_repeats_and_a_tie_fails() -> None:
    tries = [
        # case 1: gpt 2/3 passes, local 1/3 fails
        *[attempt("1", "gpt", r, ok) for r, ok in enumerate([True, True, False])],
        *[attempt("1", "local", r, ok) for r, ok in enumerate([True, False, False])],
        # case 2: gpt 1/2 is a tie: fails; local 2/2 passes
        *[attempt("2", "gpt", r, ok) for r, ok in enumerate([True, False])],
        *[attempt("2", "local", r, ok) for r, ok in enumerate([True, True])],
        # case 3: local only: not shared, left out
        attempt("3", "local"),
    ]
    result = paired(tries, "gpt", "local")
    assert result is not None
    assert (result.cases, result.a_passed, result.b_passed, result.only_a, result.only_b) == (
        2,
        1,
        1,
        1,
        1,
    )


def test_paired_uses_a_bootstrap_when_a_score_is_partial() -> None:
    tries = [attempt(f"{i}", "gpt", 0, False, score=0.9) for i in range(5)]
    tries += [attempt(f"{i}", "local", 0, False, score=0.2) for i in range(5)]
    result = paired(tries, "gpt", "local")
    assert result is not None and result.method == "bootstrap"
    assert result.diff == pytest.approx(0.7)
    assert result.better == "gpt"


def test_paired_needs_a_shared_finished_case() -> None:
    tries = [attempt("a", "gpt"), attempt("a", "local", 0, None), attempt("b", "local")]
    assert paired(tries, "gpt", "local") is None


def test_matrix_fills_everything() -> None:
    tries = [*two_agents([True, False], [True, True]), attempt("case 0", "gpt", 1, None)]
    m = matrix("my run", tries, ["case 0", "case 1"], ["gpt", "local"])
    assert isinstance(m, Matrix)
    assert (m.title, m.cases, m.agents, m.done, m.total) == (
        "my run",
        ("case 0", "case 1"),
        ("gpt", "local"),
        4,
        5,
    )
    assert len(m.cells) == 4 and [s.agent for s in m.summaries] == ["gpt", "local"]
    assert m.paired is not None and m.paired.startswith("gpt vs local on 2 cases")
    assert m.note == ""
    one = matrix("one", tries, ["case 0"], ["gpt"])
    assert one.paired is None and one.total == 2


def test_filters_choose_the_cases_to_show() -> None:
    tries = [
        attempt("same", "gpt"),
        attempt("same", "local"),
        attempt("both fail", "gpt", 0, False),
        attempt("both fail", "local", 0, False),
        attempt("differs", "gpt"),
        attempt("differs", "local", 0, False),
        attempt("flaky", "gpt", 0, True),
        attempt("flaky", "gpt", 1, False),
        attempt("flaky", "local", 0, True),
        attempt("flaky", "local", 1, False),
    ]
    cases = ["same", "both fail", "differs", "flaky"]
    m = matrix("t", tries, cases, ["gpt", "local"])
    assert filtered(m) == cases
    assert filtered(m, "failures") == ["both fail", "differs", "flaky"]
    assert filtered(m, "flaky") == ["flaky"]
    assert filtered(m, "different") == ["differs"]
    with pytest.raises(ValueError, match="failures"):
        filtered(m, "broken")


def test_compare_names_regressions_improvements_and_cells_on_one_side() -> None:
    baseline = [
        *[attempt(CAFE, "gpt", r) for r in range(3)],
        *[attempt("steady", "gpt", r) for r in range(3)],
        *[attempt("fixed", "gpt", r, False) for r in range(3)],
        attempt("dropped", "gpt"),
    ]
    now = [
        attempt(CAFE, "gpt", 0),
        *[attempt(CAFE, "gpt", r, False, reason="wrong") for r in (1, 2)],
        *[attempt("steady", "gpt", r) for r in range(3)],
        *[attempt("fixed", "gpt", r, r == 0) for r in range(3)],
        attempt("new", "gpt"),
        attempt(CAFE, MODEL),
    ]
    result = compare(now, baseline)
    assert isinstance(result, Comparison)
    assert result.regressed == [(CAFE, "gpt")]
    assert result.improved == [("fixed", "gpt")]
    assert result.added == [(CAFE, MODEL), ("new", "gpt")]
    assert result.removed == [("dropped", "gpt")]
    assert result.matrix.cells[(CAFE, "gpt")].change == "regressed"
    assert result.matrix.cells[("steady", "gpt")].change is None
    assert result.matrix.cells[("new", "gpt")].change is None
    text = str(result)
    assert "1 regressed, 1 improved" in text
    assert f"regressed: {CAFE} / gpt now 1/3" in text
    assert "only in the baseline: dropped / gpt" in text


def test_a_comparison_shows_in_a_notebook_as_the_matrix_with_its_changes() -> None:
    baseline = [attempt("<b>steady</b>", "gpt"), attempt("fixed", "gpt", 0, False)]
    now = [attempt("<b>steady</b>", "gpt", 0, False, reason="<i>wrong</i>"),
           attempt("fixed", "gpt")]  # fmt: skip
    result = compare(now, baseline)
    html = result._repr_html_()
    assert "<table" in html and "▼ regressed" in html and "▲ improved" in html
    assert "1 regressed, 1 improved" in html and "<b>steady" not in html and "<i>" not in html
    text = repr(result)
    assert "▼" in text and "▲" in text and "regressed: <b>steady</b> / gpt now 0/1" in text


def test_rows_have_one_column_per_expectation_score() -> None:
    both = Try(
        "a",
        MODEL,
        1,
        run_id="r1",
        status="completed",
        verdicts={"tools": Verdict(False, 0.5, "missing lookup"), "cost": Verdict.of(True)},
        cost=None,
        tokens=40,
        seconds=2.5,
    )
    errored = attempt("b", MODEL, 0, error="boom")
    table = rows([both, errored], ["tools", "cost"])
    assert table[0] == {
        "case": "a",
        "agent": MODEL,
        "repeat": 1,
        "passed": False,
        "score": 0.75,
        "tools": 0.5,
        "expect.cost": 1.0,
        "cost": None,
        "tokens": 40,
        "seconds": 2.5,
        "run_id": "r1",
        "status": "completed",
        "error": None,
    }
    assert table[1]["tools"] is None and table[1]["passed"] is False
    assert table[1]["status"] == "error" and table[1]["error"] == "boom"
    assert list(table[1]) == list(table[0])


def test_rows_make_a_dataframe() -> None:
    pandas = pytest.importorskip("pandas")
    frame = pandas.DataFrame(
        rows([attempt(CAFE, MODEL), attempt(CAFE, MODEL, 1, False)], ["answer"])
    )
    assert list(frame["passed"]) == [True, False]
    assert list(frame["answer"]) == [1.0, 0.0]


def test_failures_message_is_none_when_the_rule_holds() -> None:
    tries = two_agents([True, True], [True, False])
    assert failures_message(tries, agents=["gpt"]) is None
    assert failures_message(tries, min_rate=0.5) is None
    assert failures_message(two_agents([True, True], [True, True]), per_case=1.0) is None


def test_a_verdict_without_a_reason_still_says_which_failed() -> None:
    message = failures_message([attempt("a", "gpt", 0, False)])
    assert message is not None and message.endswith("a / gpt: 0/1 passed — answer did not hold")


def test_failures_message_lists_failing_cells_with_fractions_and_reasons() -> None:
    tries = [
        attempt(CAFE, MODEL, 0, True),
        attempt(CAFE, MODEL, 1, False, reason="answer lacks 'Paris'"),
        attempt(CAFE, MODEL, 2, None),
        attempt("ok", MODEL),
        attempt("down", MODEL, 0, error="ConnectionError: refused"),
    ]
    message = failures_message(tries)
    assert message is not None
    lines = message.splitlines()
    assert lines[0] == f"the experiment did not pass: {MODEL} passed 2/5 (40%), below min_rate 100%"
    assert (
        lines[1] == f"  {CAFE} / {MODEL}: 1/3 passed (1 not finished) — "
        "answer: answer lacks 'Paris'; not finished (pending)"
    )
    assert lines[2] == f"  down / {MODEL}: 0/1 passed — ConnectionError: refused"
    assert len(lines) == 3


def test_failures_message_per_case_checks_each_cell() -> None:
    tries = [attempt(f"c{i}", "gpt") for i in range(9)] + [
        attempt("c9", "gpt", 0, False, reason="no"),
        attempt("c9", "gpt", 1, True),
    ]
    assert failures_message(tries, min_rate=0.9) is None
    message = failures_message(tries, min_rate=0.9, per_case=1.0)
    assert message is not None
    assert message.splitlines() == [
        "the experiment did not pass: 1 cells passed below per_case 100%",
        "  c9 / gpt: 1/2 passed — answer: no",
    ]


def test_failures_message_lists_twenty_then_says_how_many_more() -> None:
    tries = [attempt(f"c{i}", "gpt", 0, False, reason="no") for i in range(25)]
    message = failures_message(tries)
    assert message is not None
    lines = message.splitlines()
    assert len(lines) == 22 and lines[-1] == "  and 5 more"


def test_failures_message_fails_an_agent_with_no_tries_and_an_empty_experiment() -> None:
    assert failures_message([attempt("a", "gpt")], agents=["local"]) == (
        "the experiment did not pass: local has no tries"
    )
    assert failures_message([]) == "the experiment did not pass: there are no tries to check"


outcomes = st.lists(
    st.tuples(
        st.sampled_from(["a", "b", CAFE]),
        st.sampled_from(["gpt", MODEL]),
        st.sampled_from([True, False, None, "error"]),
        st.one_of(st.none(), st.floats(0, 1)),
    ),
    max_size=30,
)


@settings(max_examples=60)
@given(outcomes)
def test_cells_summaries_and_rows_count_the_same_tries(drawn: list[tuple]) -> None:
    tries = [
        attempt(
            case,
            agent,
            i,
            False if ok == "error" else ok,
            cost=cost,
            error="boom" if ok == "error" else None,
        )
        for i, (case, agent, ok, cost) in enumerate(drawn)
    ]
    cases, agents = ["a", "b", CAFE], ["gpt", MODEL]
    m = matrix("t", tries, cases, agents)
    for s in m.summaries:
        mine = [c for c in m.cells.values() if c.agent == s.agent]
        assert s.passed == sum(c.passed for c in mine)
        assert s.total == sum(c.total for c in mine)
        assert s.unfinished == sum(c.pending for c in mine)
        assert 0.0 <= s.low <= s.rate <= s.high <= 1.0 or s.total == 0
    assert m.done + sum(s.unfinished for s in m.summaries) == m.total == len(tries)
    assert sum(row["passed"] for row in rows(tries, ["answer"])) == sum(
        s.passed for s in m.summaries
    )
    assert set(filtered(m, "flaky")) <= set(filtered(m, "failures")) <= set(cases)
    message = failures_message(tries)
    assert (message is None) == (bool(tries) and all(t.passed for t in tries))
