"""The statistics behind the matrix's summary row and paired line, against known values."""

from __future__ import annotations

import numpy
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cortex_jupyter.experiments.stats import (
    bootstrap_diff,
    bootstrap_paired,
    mcnemar,
    quantile,
    wilson,
)


def test_wilson_interval_of_8_in_10_is_the_textbook_one() -> None:
    low, high = wilson(8, 10)
    assert (round(low, 3), round(high, 3)) == (0.490, 0.943)


def test_wilson_at_the_edges() -> None:
    assert wilson(0, 0) == (0.0, 1.0)
    low, high = wilson(0, 10)
    assert low == 0.0 and round(high, 3) == 0.278
    low, high = wilson(10, 10)
    assert round(low, 3) == 0.722 and high == 1.0
    with pytest.raises(ValueError, match="0 <= k <= n"):
        wilson(11, 10)


@settings(max_examples=200)
@given(st.integers(1, 5000).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n))))
def test_wilson_bounds_lie_in_0_1_and_contain_the_rate(kn: tuple[int, int]) -> None:
    k, n = kn
    low, high = wilson(k, n)
    assert 0.0 <= low <= k / n <= high <= 1.0


def test_mcnemar_exact_p_for_1_against_9_discordant_cases() -> None:
    result = mcnemar([(True, False)] + [(False, True)] * 9, "a", "b")
    assert round(result.p, 4) == 0.0215
    assert (result.only_a, result.only_b) == (1, 9)
    assert result.better == "b"
    assert result.line.endswith("— b is better (p < 0.05)")


def test_mcnemar_line_says_no_clear_difference() -> None:
    pairs = [(True, True)] * 6 + [(True, False)] * 3 + [(False, True)] + [(False, False)] * 2
    result = mcnemar(pairs, "gpt", "local")
    assert result.line == (
        "gpt vs local on 12 cases: gpt passed 9, local 7; "
        "4 cases differ (gpt only 3, local only 1); "
        "McNemar exact p = 0.62 — no clear difference"
    )
    assert result.better is None


def test_mcnemar_with_no_differing_case_has_p_1() -> None:
    result = mcnemar([(True, True), (False, False)], "x", "y")
    assert result.p == 1.0
    assert "0 cases differ" in result.line and "no clear difference" in result.line


def test_mcnemar_on_unicode_names_and_a_tiny_p() -> None:
    result = mcnemar([(True, False)] * 12, "模型", "café")
    assert result.better == "模型"
    assert "p < 0.001" in result.line


def test_bootstrap_is_seeded_and_contains_the_mean() -> None:
    a = [1.0, 0.5, 0.7, 1.0, 0.2, 0.9]
    b = [0.2, 0.5, 0.3, 0.1, 0.4, 0.9]
    first = bootstrap_diff(a, b)
    assert first == bootstrap_diff(a, b)
    assert first != bootstrap_diff(a, b, seed=1)
    assert first.low <= first.mean <= first.high
    assert first.mean == pytest.approx(sum(a) / 6 - sum(b) / 6)


def test_bootstrap_of_a_constant_difference_is_that_difference() -> None:
    assert bootstrap_diff([1, 1, 1], [0.5, 0.5, 0.5]) == (0.5, 0.5, 0.5)
    with pytest.raises(ValueError, match="paired"):
        bootstrap_diff([1.0], [1.0, 0.0])


def test_bootstrap_line_names_the_better_agent_only_when_the_interval_leaves_out_0() -> None:
    clear = bootstrap_paired([1, 0.9, 0.8, 1], [0.1, 0.2, 0.1, 0.3], "gpt", "local")
    assert clear.better == "gpt" and clear.line.endswith("— gpt is better")
    assert "95% paired bootstrap interval" in clear.line
    mixed = bootstrap_paired([1, 0, 1, 0], [0, 1, 0, 1], "gpt", "local")
    assert mixed.better is None and mixed.line.endswith("no clear difference")


def test_quantile_interpolates_linearly() -> None:
    assert quantile([4, 1, 3, 2], 0.5) == 2.5
    assert quantile([1, 2, 3, 4], 0.95) == pytest.approx(3.85)
    assert quantile([7.0], 0.95) == 7.0
    assert quantile([], 0.5) is None


@settings(max_examples=100)
@given(
    st.lists(st.floats(0, 1e6, allow_nan=False), min_size=1, max_size=50),
    st.floats(0, 1),
)
def test_quantile_agrees_with_numpy(values: list[float], q: float) -> None:
    assert quantile(values, q) == pytest.approx(
        float(numpy.quantile(values, q)), rel=1e-9, abs=1e-9
    )
