"""Cases from a pandas DataFrame, one per row (``Dataset.from_pandas``).

pandas is the user's: this module never imports it, it reads the frame it is given.
Cells become plain Python values (numpy scalars by ``.item()``, a missing value as
None), so a dataset made from a frame can be saved.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from .results import Expectation

__all__ = ["cases_from_frame"]


def _missing(value: Any) -> bool:
    """Whether a cell holds no value (None, NaN, pandas' NA or NaT)."""
    if value is None:
        return True
    try:
        return bool(value != value)  # NaN, NaT and pd.NA are not equal to themselves
    except TypeError:  # pd.NA's comparison has no truth value
        return True
    except ValueError:  # an array's comparison is many values: it is a value
        return False


def plain(value: Any) -> Any:
    """A cell as a plain Python value (a missing one as None)."""
    if isinstance(value, list | tuple | dict):
        return value
    if _missing(value):
        return None
    item = getattr(value, "item", None)
    if callable(item) and type(value).__module__ == "numpy":
        value = item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _columns(df: Any, given: Sequence[str] | str | None, what: str) -> list[str]:
    if given is None:
        return []
    names = [given] if isinstance(given, str) else list(given)
    have = [str(c) for c in df.columns]
    for name in names:
        if name not in df.columns:
            raise ValueError(
                f"{what}: the DataFrame has no column {name!r}; its columns are {', '.join(have)}"
            )
    return names


def _answer_column(column: str) -> Callable[[Any], Any]:
    try:
        expect = importlib.import_module("cortex_jupyter.experiments.expect")
    except ModuleNotFoundError:
        raise TypeError(
            "expect= as a column of expected answers needs cortex_jupyter.experiments.expect; "
            "give a function of the row returning its expectations"
        ) from None

    def expected(row: Any) -> Any:
        value = plain(row[column])
        return [] if value is None else [expect.answer(equals=str(value))]

    return expected


def _expectations(made: Any, row: str) -> list[Expectation]:
    if made is None:
        return []
    if isinstance(made, Expectation):
        return [made]
    try:
        return list(made)
    except TypeError:
        raise TypeError(
            f"{row}: the expect function returned {type(made).__name__}, not a list of expectations"
        ) from None


def _rows(df: Any) -> Iterator[tuple[int, str, Any]]:
    for position, (index, row) in enumerate(df.iterrows(), 1):
        yield position, f"row {position} (index {index!r:.40})", row


def cases_from_frame(
    df: Any,
    prompt: str,
    expect: Callable[[Any], Any] | str | None,
    case_name: str | None,
    metadata: Sequence[str] | str | None,
    vars: Sequence[str] | str | None,
    make_case: Callable[..., Any],
) -> list[Any]:
    """One case per row of ``df``, made with ``make_case`` (``Case``; see
    ``Dataset.from_pandas``)."""

    if not hasattr(df, "iterrows") or not hasattr(df, "columns"):
        raise TypeError(f"from_pandas reads a pandas DataFrame; got {type(df).__name__}")
    _columns(df, prompt, "prompt")
    names = _columns(df, case_name, "case_name")
    meta = _columns(df, metadata, "metadata")
    var_columns = _columns(df, vars, "vars")
    if isinstance(expect, str):
        _columns(df, expect, "expect")
        expect = _answer_column(expect)
    elif expect is not None and not callable(expect):
        raise TypeError(
            "expect is a function of the row returning its expectations, or a column name; "
            f"got {type(expect).__name__}"
        )
    cases = []
    for _, row_label, row in _rows(df):
        text = plain(row[prompt])
        if text is None:
            raise ValueError(f"{row_label}: the prompt column {prompt!r} is empty")
        if not isinstance(text, str):
            raise ValueError(
                f"{row_label}: the prompt column {prompt!r} holds {type(text).__name__} "
                f"{text!r:.40}, not text"
            )
        name = plain(row[names[0]]) if names else None
        made = expect(row) if expect is not None else None
        try:
            cases.append(
                make_case(
                    text,
                    name=None if name is None else str(name),
                    expect=_expectations(made, row_label),
                    metadata={column: plain(row[column]) for column in meta},
                    vars={column: plain(row[column]) for column in var_columns},
                )
            )
        except (ValueError, TypeError) as error:
            raise type(error)(f"{row_label}: {error}") from None
    return cases
