"""The few statistics an experiment's report needs, on plain numbers (stdlib only).

``wilson`` is the 95% interval of a pass rate (it behaves at 0/n and n/n, where the
normal approximation says nonsense); ``mcnemar`` compares two agents' pass/fail outcomes
on the same cases (an exact binomial test over the cases where they differ);
``bootstrap_diff`` is a paired bootstrap interval of the mean score difference, for
partial scores; ``quantile`` is the linear-interpolation quantile (p50, p95 of times).
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

__all__ = [
    "Diff",
    "Paired",
    "bootstrap_diff",
    "bootstrap_paired",
    "mcnemar",
    "quantile",
    "wilson",
]

#: The significance level the one-line verdicts use.
ALPHA = 0.05


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of ``k`` successes in ``n`` trials (95% with the default
    ``z``); ``(0.0, 1.0)`` when ``n`` is 0. Always within [0, 1] and containing ``k / n``."""
    if n <= 0:
        return (0.0, 1.0)
    if not 0 <= k <= n:
        raise ValueError(f"wilson needs 0 <= k <= n; got k={k}, n={n}")
    p = k / n
    z2 = z * z
    denominator = 1.0 + z2 / n
    centre = (p + z2 / (2 * n)) / denominator
    half = z / denominator * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    low = 0.0 if k == 0 else max(0.0, min(p, centre - half))
    high = 1.0 if k == n else min(1.0, max(p, centre + half))
    return (low, high)


def quantile(values: Iterable[float], q: float) -> float | None:
    """The ``q`` quantile (0 <= q <= 1) of ``values`` by linear interpolation between the
    closest ranks (numpy's default); None when there are no values."""
    ordered = sorted(values)
    if not ordered:
        return None
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"a quantile is in [0, 1]; got {q!r}")
    position = q * (len(ordered) - 1)
    below = math.floor(position)
    above = min(below + 1, len(ordered) - 1)
    fraction = position - below
    return ordered[below] + (ordered[above] - ordered[below]) * fraction


def binomial_two_sided(b: int, c: int) -> float:
    """The exact two-sided p of ``b`` against ``c`` discordant pairs under p = 1/2 (1.0
    when there are none)."""
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(b, c) + 1)) / (1 << n)
    return min(1.0, 2.0 * tail)


def p_text(p: float) -> str:
    """A p-value the way the one-line verdicts print it (two significant digits)."""
    if p < 0.001:
        return "p < 0.001"
    return f"p = {p:.2g}"


@dataclass(frozen=True)
class Paired:
    """Two agents on the same cases, and which (if either) did better.

    ``method`` is ``"mcnemar"`` (pass/fail outcomes: ``only_a``/``only_b`` count the
    cases only one of them passed, ``p`` the exact test's p-value) or ``"bootstrap"``
    (partial scores: ``diff`` the mean of a's score minus b's, ``low``/``high`` its 95%
    paired bootstrap interval, ``p`` None). ``better`` names the agent that did better
    at the 5% level, or is None; ``line`` says it all in one sentence.
    """

    a: str
    b: str
    cases: int
    method: str
    a_passed: int
    b_passed: int
    only_a: int
    only_b: int
    p: float | None
    diff: float
    low: float | None
    high: float | None
    better: str | None
    line: str


def mcnemar(pairs: Iterable[tuple[bool, bool]], a: str = "A", b: str = "B") -> Paired:
    """McNemar's exact test on ``(a passed, b passed)`` per case: a two-sided binomial
    test over the cases where exactly one of them passed (p = 1 when none differ)."""
    outcomes = [(bool(x), bool(y)) for x, y in pairs]
    only_a = sum(1 for x, y in outcomes if x and not y)
    only_b = sum(1 for x, y in outcomes if y and not x)
    a_passed = sum(1 for x, _ in outcomes if x)
    b_passed = sum(1 for _, y in outcomes if y)
    p = binomial_two_sided(only_a, only_b)
    better = None if p >= ALPHA or only_a == only_b else (a if only_a > only_b else b)
    verdict = "no clear difference" if better is None else f"{better} is better (p < 0.05)"
    line = (
        f"{a} vs {b} on {len(outcomes)} cases: {a} passed {a_passed}, {b} {b_passed}; "
        f"{only_a + only_b} cases differ ({a} only {only_a}, {b} only {only_b}); "
        f"McNemar exact {p_text(p)} — {verdict}"
    )
    n = len(outcomes)
    diff = (a_passed - b_passed) / n if n else 0.0
    return Paired(
        a, b, n, "mcnemar", a_passed, b_passed, only_a, only_b, p, diff, None, None, better, line
    )


class Diff(NamedTuple):
    """A mean difference and its interval."""

    mean: float
    low: float
    high: float


def bootstrap_diff(
    a_scores: Sequence[float], b_scores: Sequence[float], n: int = 2000, seed: int = 0
) -> Diff:
    """The mean of ``a - b`` over paired scores and its 95% percentile interval from ``n``
    paired bootstrap resamples (seeded: the same inputs give the same interval)."""
    if len(a_scores) != len(b_scores):
        raise ValueError(f"paired scores: {len(a_scores)} against {len(b_scores)}")
    diffs = [float(x) - float(y) for x, y in zip(a_scores, b_scores, strict=True)]
    if not diffs:
        return Diff(0.0, 0.0, 0.0)
    mean = sum(diffs) / len(diffs)
    rng = random.Random(seed)
    size = len(diffs)
    means = [sum(rng.choices(diffs, k=size)) / size for _ in range(max(1, n))]
    low = quantile(means, 0.025)
    high = quantile(means, 0.975)
    assert low is not None and high is not None
    return Diff(mean, min(low, mean), max(high, mean))


def bootstrap_paired(
    a_scores: Sequence[float], b_scores: Sequence[float], a: str = "A", b: str = "B"
) -> Paired:
    """Two agents' mean scores per case compared by a paired bootstrap: one of them is
    better when the 95% interval of the difference leaves out 0."""
    diff = bootstrap_diff(a_scores, b_scores)
    n = len(a_scores)
    a_mean = sum(a_scores) / n if n else 0.0
    b_mean = sum(b_scores) / n if n else 0.0
    better = a if diff.low > 0 else b if diff.high < 0 else None
    verdict = "no clear difference" if better is None else f"{better} is better"
    line = (
        f"{a} vs {b} on {n} cases: mean score {a} {a_mean:.2f}, {b} {b_mean:.2f}; "
        f"difference {diff.mean:+.2f} (95% paired bootstrap interval {diff.low:+.2f} to "
        f"{diff.high:+.2f}) — {verdict}"
    )
    only_a = sum(1 for x, y in zip(a_scores, b_scores, strict=True) if x > y)
    only_b = sum(1 for x, y in zip(a_scores, b_scores, strict=True) if y > x)
    a_full = sum(1 for x in a_scores if x >= 1.0)
    b_full = sum(1 for y in b_scores if y >= 1.0)
    return Paired(
        a,
        b,
        n,
        "bootstrap",
        a_full,
        b_full,
        only_a,
        only_b,
        None,
        diff.mean,
        diff.low,
        diff.high,
        better,
        line,
    )
