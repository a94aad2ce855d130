"""An experiment's tries laid out: the matrix's cells, a summary per agent, the paired
comparison of two agents, a comparison with a baseline, one row per try for pandas, and
the message ``assert_passes`` raises. Pure functions over ``list[Try]``; no I/O.

Counting rules (docs/experiments.md, "Reading the results", says them to users):
- a cell's ``passed``/``total`` count its *finished* tries; tries still pending or running
  are its ``pending`` and count nowhere else (except in ``failures_message``, where a try
  that has not finished is a failure);
- a try that errored (could not run) is finished and failed;
- costs are summed over the tries whose price is known; a cost is None only when no try's
  price is known (the matrix's ``note`` says when some were unknown);
- in the paired comparison a case passes for an agent when more than half of its finished
  repeats passed (a tie fails); McNemar's exact test compares those outcomes, unless some
  verdict gave a partial score (strictly between 0 and 1): then a paired bootstrap
  compares each case's mean score.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from cortex_jupyter.display.matrix_data import AgentSummary, Matrix, MatrixCell

from .results import Try
from .stats import Paired, bootstrap_paired, mcnemar, quantile, wilson

__all__ = [
    "FILTERS",
    "Comparison",
    "cells",
    "compare",
    "failures_message",
    "filtered",
    "matrix",
    "paired",
    "rows",
    "summaries",
]

#: The matrix's filters, in the order its buttons show them.
FILTERS = ("all", "failures", "flaky", "different")
#: How long one reason may be in a cell or a failure message.
REASON_CHARS = 120
#: How many distinct reasons one cell keeps.
CELL_REASONS = 5
#: How many failing cells ``failures_message`` lists before "and N more".
LISTED = 20

Key = tuple[str, str]


def shorten(text: str, limit: int = REASON_CHARS) -> str:
    """``text`` on one line, cut to ``limit`` characters with an ellipsis."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def why(attempt: Try) -> list[str]:
    """Why a finished try did not pass, in short lines (never empty)."""
    out = [shorten(attempt.error)] if attempt.error else []
    for label, verdict in attempt.verdicts.items():
        if not verdict.passed:
            out.append(
                shorten(
                    f"{label}: {verdict.reason}"
                    if verdict.reason.strip()
                    else f"{label} did not hold"
                )
            )
    if out:
        return out
    if not attempt.done:
        return [f"not finished ({attempt.status})"]
    if attempt.status != "completed":
        return [f"run {attempt.status}"]
    return ["no expectation judged it"]


def grouped(tries: Iterable[Try]) -> dict[Key, list[Try]]:
    """Tries by (case, agent), each list in repeat order."""
    out: dict[Key, list[Try]] = {}
    for attempt in tries:
        out.setdefault((attempt.case, attempt.agent), []).append(attempt)
    for group in out.values():
        group.sort(key=lambda t: t.repeat)
    return out


def cost_sum(tries: Iterable[Try]) -> float | None:
    """The summed cost of the tries whose price is known; None when none is."""
    known = [t.cost for t in tries if t.cost is not None]
    return sum(known) if known else None


def cell(case: str, agent: str, group: Sequence[Try]) -> MatrixCell:
    """One (case, agent)'s tries as a matrix cell."""
    finished = [t for t in group if t.done]
    passed = sum(1 for t in finished if t.passed)
    seconds = [t.seconds for t in finished if t.seconds is not None]
    reasons: list[str] = []
    for attempt in finished:
        if not attempt.passed:
            reasons += [r for r in why(attempt) if r not in reasons]
    return MatrixCell(
        case=case,
        agent=agent,
        passed=passed,
        total=len(finished),
        flaky=0 < passed < len(finished),
        cost=cost_sum(group),
        tokens=sum(t.tokens for t in group),
        seconds=statistics.median(seconds) if seconds else None,
        reasons=tuple(reasons[:CELL_REASONS]),
        change=None,
        tries=tuple((t.repeat, t.run_id) for t in group),
        pending=len(group) - len(finished),
    )


def cells(
    tries: Iterable[Try], cases: Sequence[str], agents: Sequence[str]
) -> dict[Key, MatrixCell]:
    """A cell for every (case, agent) of ``cases`` × ``agents`` (an empty one where no try
    is); tries of other cases or agents are left out."""
    groups = grouped(tries)
    return {(c, a): cell(c, a, groups.get((c, a), [])) for c in cases for a in agents}


def summaries(tries: Iterable[Try], agents: Sequence[str]) -> tuple[AgentSummary, ...]:
    """Each agent over all its finished tries: pass rate with a 95% Wilson interval, cost,
    median and p95 seconds, and how many tries have not finished."""
    by_agent: dict[str, list[Try]] = {agent: [] for agent in agents}
    for attempt in tries:
        if attempt.agent in by_agent:
            by_agent[attempt.agent].append(attempt)
    out = []
    for agent, group in by_agent.items():
        finished = [t for t in group if t.done]
        passed = sum(1 for t in finished if t.passed)
        low, high = wilson(passed, len(finished))
        seconds = [t.seconds for t in finished if t.seconds is not None]
        out.append(
            AgentSummary(
                agent=agent,
                passed=passed,
                total=len(finished),
                rate=passed / len(finished) if finished else 0.0,
                low=low,
                high=high,
                cost=cost_sum(group),
                p50=quantile(seconds, 0.5),
                p95=quantile(seconds, 0.95),
                unfinished=len(group) - len(finished),
            )
        )
    return tuple(out)


def partial(attempt: Try) -> bool:
    """Whether some verdict of the try gave partial credit (a score strictly in (0, 1))."""
    return any(0.0 < v.score < 1.0 for v in attempt.verdicts.values())


def paired(tries: Iterable[Try], a: str, b: str) -> Paired | None:
    """Agents ``a`` and ``b`` on the cases both have finished tries of (None: no such
    case). A case passes for an agent when more than half of its finished repeats passed;
    McNemar's exact test compares those outcomes, or, when any verdict gave a partial
    score, a paired bootstrap compares each case's mean score."""
    groups = grouped(t for t in tries if t.done and t.agent in (a, b))
    shared = [case for (case, agent) in groups if agent == a and (case, b) in groups]
    if not shared:
        return None
    sides = [(groups[(case, a)], groups[(case, b)]) for case in shared]
    if any(partial(t) for x, y in sides for t in (*x, *y)):
        return bootstrap_paired(
            [statistics.fmean(t.score for t in x) for x, _ in sides],
            [statistics.fmean(t.score for t in y) for _, y in sides],
            a,
            b,
        )
    return mcnemar([(majority(x), majority(y)) for x, y in sides], a, b)


def majority(group: Sequence[Try]) -> bool:
    """More than half of the tries passed."""
    return 2 * sum(1 for t in group if t.passed) > len(group)


def fraction(c: MatrixCell) -> float | None:
    """A cell's pass fraction over its finished tries (None: none finished)."""
    return c.passed / c.total if c.total else None


def change(now: MatrixCell, before: MatrixCell | None) -> str | None:
    """ "regressed" when the pass fraction dropped from ``before`` to ``now``, "improved"
    when it rose, None when it held or either side has no finished try."""
    if before is None:
        return None
    new, old = fraction(now), fraction(before)
    if new is None or old is None or new == old:
        return None
    return "regressed" if new < old else "improved"


def matrix(
    title: str,
    tries: Sequence[Try],
    cases: Sequence[str],
    agents: Sequence[str],
    baseline: Sequence[Try] | None = None,
) -> Matrix:
    """The whole matrix: cells (with ``change`` against ``baseline``'s tries when given),
    agent summaries, the paired line for the first two agents, and progress."""
    table = cells(tries, cases, agents)
    if baseline is not None:
        before = cells(baseline, cases, agents)
        table = {key: replace(c, change=change(c, before.get(key))) for key, c in table.items()}
    shown = [t for t in tries if (t.case, t.agent) in table]
    pair = paired(shown, agents[0], agents[1]) if len(agents) >= 2 else None
    unpriced = sum(1 for t in shown if t.done and t.cost is None)
    priced = sum(1 for t in shown if t.cost is not None)
    note = f"cost leaves out {unpriced} tries whose price is unknown" if unpriced and priced else ""
    return Matrix(
        title=title,
        cases=tuple(cases),
        agents=tuple(agents),
        cells=table,
        summaries=summaries(shown, agents),
        paired=pair.line if pair else None,
        done=sum(1 for t in shown if t.done),
        total=len(shown),
        note=note,
    )


def names(tries: Iterable[Try]) -> tuple[list[str], list[str]]:
    """The cases and agents of ``tries``, in order of first appearance."""
    cases: dict[str, None] = {}
    agents: dict[str, None] = {}
    for attempt in tries:
        cases.setdefault(attempt.case)
        agents.setdefault(attempt.agent)
    return list(cases), list(agents)


@dataclass(frozen=True)
class Comparison:
    """An experiment against a baseline: ``matrix`` is the experiment's, each cell's
    ``change`` set; ``regressed``/``improved`` list the (case, agent) cells whose pass
    fraction dropped/rose; ``added``/``removed`` the cells only this experiment/only the
    baseline has tries of."""

    matrix: Matrix
    regressed: list[Key] = field(default_factory=list)
    improved: list[Key] = field(default_factory=list)
    added: list[Key] = field(default_factory=list)
    removed: list[Key] = field(default_factory=list)

    def __str__(self) -> str:
        lines = [
            f"{self.matrix.title}: {len(self.regressed)} regressed, {len(self.improved)} improved"
        ]
        for label, keys in (("regressed", self.regressed), ("improved", self.improved)):
            for case, agent in keys:
                c = self.matrix.cells[(case, agent)]
                lines.append(f"  {label}: {case} / {agent} now {c.passed}/{c.total}")
        if self.added:
            lines.append(f"  only here: {', '.join(f'{c} / {a}' for c, a in self.added)}")
        if self.removed:
            lines.append(
                f"  only in the baseline: {', '.join(f'{c} / {a}' for c, a in self.removed)}"
            )
        return "\n".join(lines)

    def __repr__(self) -> str:
        from cortex_jupyter.display.matrix import matrix_text

        return f"{matrix_text(self.matrix)}\n{self}"

    def _repr_html_(self) -> str:
        """The matrix with the changed cells marked, under what changed in words (a
        notebook shows this; the text is escaped as every matrix text is)."""
        from cortex_jupyter.display.matrix import matrix_html
        from cortex_jupyter.display.theme import esc

        said = esc(str(self)).replace("\n", "<br>")
        return f'<p style="font-family:monospace;font-size:12px">{said}</p>' + str(
            matrix_html(self.matrix)
        )


def compare(
    tries: Sequence[Try],
    baseline_tries: Sequence[Try],
    title: str = "compared with the baseline",
    cases: Sequence[str] | None = None,
    agents: Sequence[str] | None = None,
) -> Comparison:
    """``tries`` against ``baseline_tries`` cell by cell (the matrix shows ``cases`` ×
    ``agents``, by default those of ``tries``)."""
    own_cases, own_agents = names(tries)
    m = matrix(title, tries, cases or own_cases, agents or own_agents, baseline=baseline_tries)
    now, before = grouped(tries), grouped(baseline_tries)
    order = list(m.cells)
    return Comparison(
        matrix=m,
        regressed=[k for k in order if m.cells[k].change == "regressed"],
        improved=[k for k in order if m.cells[k].change == "improved"],
        added=[k for k in order if k in now and k not in before],
        removed=[k for k in before if k not in now],
    )


#: The columns every row has (an expectation whose label is one of these is ``expect.<label>``).
COLUMNS = (
    "case",
    "agent",
    "repeat",
    "passed",
    "score",
    "cost",
    "tokens",
    "seconds",
    "run_id",
    "status",
    "error",
)


def rows(tries: Iterable[Try], expectation_labels: Sequence[str]) -> list[dict[str, Any]]:
    """One dict per try for ``pandas.DataFrame``: its case, agent, repeat, ``passed``
    (every expectation held), ``score`` (the mean of its verdicts' scores), one column per
    expectation label holding that verdict's score (None: the try has no such verdict),
    then cost, tokens, seconds, run_id, status and error."""
    columns = {
        label: f"expect.{label}" if label in COLUMNS else label for label in expectation_labels
    }
    out = []
    for t in tries:
        row: dict[str, Any] = {
            "case": t.case,
            "agent": t.agent,
            "repeat": t.repeat,
            "passed": t.passed,
            "score": t.score,
        }
        for label, column in columns.items():
            verdict = t.verdicts.get(label)
            row[column] = verdict.score if verdict is not None else None
        row.update(
            cost=t.cost,
            tokens=t.tokens,
            seconds=t.seconds,
            run_id=t.run_id,
            status=t.status,
            error=t.error,
        )
        out.append(row)
    return out


def percent(value: float) -> str:
    return f"{value * 100:.3g}%"


def short_cell(key: Key, group: Sequence[Try]) -> str:
    """One failing cell for a failure message: its pass fraction and why."""
    passed = sum(1 for t in group if t.passed)
    waiting = sum(1 for t in group if not t.done)
    pending = f" ({waiting} not finished)" if waiting else ""
    reasons: list[str] = []
    for attempt in group:
        if not attempt.passed:
            reasons += [r for r in why(attempt) if r not in reasons]
    shown = "; ".join(reasons[:3]) + (f"; and {len(reasons) - 3} more" if len(reasons) > 3 else "")
    return f"  {key[0]} / {key[1]}: {passed}/{len(group)} passed{pending} — {shown}"


def failures_message(
    tries: Iterable[Try],
    min_rate: float = 1.0,
    per_case: float | None = None,
    agents: Sequence[str] | None = None,
) -> str | None:
    """None when the rule holds, else the text of the ``AssertionError`` that
    ``assert_passes`` raises: what fell short, then each failing (case, agent) with its
    pass fraction and reasons (at most ``LISTED``, then "and N more").

    ``min_rate`` applies to each checked agent's pass rate over all its tries,
    ``per_case`` (when given) to each (case, agent) cell's; ``agents`` restricts the
    agents checked (all by default). A try that has not finished counts as a failure
    here, and an agent with no tries at all fails."""
    tries = list(tries)
    checked = list(agents) if agents is not None else names(tries)[1]
    groups = grouped(t for t in tries if t.agent in checked)
    problems: list[str] = []
    failing: dict[Key, None] = {}
    if not checked:
        problems.append("there are no tries to check")
    for agent in checked:
        mine = [t for t in tries if t.agent == agent]
        passed = sum(1 for t in mine if t.passed)
        if not mine:
            problems.append(f"{agent} has no tries")
        elif passed / len(mine) < min_rate:
            problems.append(
                f"{agent} passed {passed}/{len(mine)} ({percent(passed / len(mine))}), "
                f"below min_rate {percent(min_rate)}"
            )
            failing.update(
                (k, None)
                for k, g in groups.items()
                if k[1] == agent and not all(t.passed for t in g)
            )
    if per_case is not None:
        below = [k for k, g in groups.items() if sum(1 for t in g if t.passed) / len(g) < per_case]
        if below:
            problems.append(f"{len(below)} cells passed below per_case {percent(per_case)}")
            failing.update((k, None) for k in below)
    if not problems:
        return None
    order = [k for k in groups if k in failing]
    lines = ["the experiment did not pass: " + "; ".join(problems)]
    lines += [short_cell(k, groups[k]) for k in order[:LISTED]]
    if len(order) > LISTED:
        lines.append(f"  and {len(order) - LISTED} more")
    return "\n".join(lines)


def filtered(m: Matrix, filter: str = "all") -> list[str]:
    """The cases the matrix shows under ``filter``: "all"; "failures" (a cell with a
    failed try); "flaky" (a cell whose repeats disagree); "different" (cells whose pass
    fractions differ between agents)."""
    if filter not in FILTERS:
        raise ValueError(f"no matrix filter {filter!r:.40}; the filters are {', '.join(FILTERS)}")
    out = []
    for case in m.cases:
        row = [m.cells[(case, agent)] for agent in m.agents if (case, agent) in m.cells]
        keep = {
            "all": True,
            "failures": any(c.passed < c.total for c in row),
            "flaky": any(c.flaky for c in row),
            "different": len({fraction(c) for c in row if c.total}) > 1,
        }[filter]
        if keep:
            out.append(case)
    return out
