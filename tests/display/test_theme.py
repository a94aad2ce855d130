"""Numbers as the header shows them: short, and the same on either side of a unit."""

from __future__ import annotations

import pytest

from cortex_jupyter.display.theme import fmt_count, fmt_k


@pytest.mark.parametrize(
    ("value", "k", "count"),
    [
        (0, "0", "0"),
        (950, "950", "950"),
        (999.4, "999", "999"),
        (1000, "1.0k", "1.0k"),
        (2100, "2.1k", "2.1k"),
        (9_999, "10.0k", "10.0k"),
        (21_000, "21k", "21.0k"),
        (999_999, "1000k", "1000.0k"),
        (1_200_000, "1.2M", "1.2M"),
    ],
)
def test_token_counts_and_counts_are_short(value: float, k: str, count: str) -> None:
    assert (fmt_k(value), fmt_count(value)) == (k, count)
