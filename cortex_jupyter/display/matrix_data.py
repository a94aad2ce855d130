"""The experiment matrix's data: what ``experiments.report`` fills and the matrix views
(``display.matrix``: the static HTML copy, the terminal table, the live widget) render.

Plain frozen data, no widget code: a view reads these and nothing else of an experiment.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["AgentSummary", "Matrix", "MatrixCell"]


@dataclass(frozen=True)
class MatrixCell:
    """One (case, agent) over its repeats: ``passed`` of ``total`` finished tries passed;
    ``flaky`` when the repeats disagree; ``cost`` summed (None: no try's price known);
    ``tokens`` summed; ``seconds`` the median wall time; ``reasons`` why the failed tries
    failed (short, deduplicated); ``change`` ("regressed" | "improved" | None) in a
    baseline comparison; ``tries`` the ``(repeat, run_id)`` of each try, so a click can
    open one."""

    case: str
    agent: str
    passed: int
    total: int
    flaky: bool
    cost: float | None
    tokens: int
    seconds: float | None
    reasons: tuple[str, ...]
    change: str | None
    tries: tuple[tuple[int, str | None], ...]


@dataclass(frozen=True)
class AgentSummary:
    """One agent over every finished try: its pass rate with a 95% Wilson interval
    (``low``, ``high``), cost, median and p95 seconds, and how many tries have not
    finished."""

    agent: str
    passed: int
    total: int
    rate: float
    low: float
    high: float
    cost: float | None
    p50: float | None
    p95: float | None
    unfinished: int


@dataclass(frozen=True)
class Matrix:
    """Cases by agents: the cells, a summary per agent, the paired comparison of the
    first two agents in one line (None with fewer than two), and progress (``done`` of
    ``total`` tries)."""

    title: str
    cases: tuple[str, ...]
    agents: tuple[str, ...]
    cells: Mapping[tuple[str, str], MatrixCell]
    summaries: tuple[AgentSummary, ...]
    paired: str | None
    done: int
    total: int
    note: str = ""
