"""How a try's actions are read and matched: the pure part of ``expect.tools`` and
``expect.graph`` (no I/O, no model), tested directly.

An action's calls are the run's top-level nodes (``parent`` None) in the order they
started (one that never started: by when it was submitted, then by its place in
``run.actions``). A call is matched against an expected one by name and, per the
``args`` rule, by its parameters as the model wrote them or as they were resolved
(``$name`` filled): either may match. A predicate in the expected parameters is called
with the actual value; one that raises does not match.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cortex_jupyter.runtime.core.record.order import parameters_of, top_level_in_start_order
from cortex_jupyter.runtime.core.values.variables import find_references, resolve

__all__ = ["Call", "Expected", "calls_of", "lcs", "matching", "plain", "same"]


@dataclass(frozen=True)
class Call:
    """One top-level action as the run recorded it."""

    id: str
    name: str
    parameters: Any  # as the model wrote them (not always a dict: hostile input)
    resolved: Any  # with ``$name`` resolved (None: not known, e.g. read from the store)


@dataclass(frozen=True)
class Expected:
    """One expected call: a name, and parameters to check (None: any)."""

    name: str
    args: Mapping[str, Any] | None = None


def calls_of(run: Any) -> list[Call]:
    """The run's top-level actions in start order (see the module docstring)."""
    calls = []
    for place, node in top_level_in_start_order(run):
        parameters = parameters_of(node)
        resolved = getattr(node, "resolved", None)
        if resolved is None:
            resolved = _resolved(parameters, getattr(run, "variables", None))
        call = Call(
            str(getattr(node, "id", place)), str(getattr(node, "name", "")), parameters, resolved
        )
        calls.append(call)
    return calls


def _resolved(parameters: Any, variables: Any) -> Any:
    """``parameters`` with ``$name`` resolved in the run's own variables (a run read back
    from the store keeps no resolved parameters), by the runtime's one rule; None when
    they hold no reference or one that does not resolve."""
    if not isinstance(variables, Mapping) or not find_references(parameters):
        return None
    try:
        return resolve(parameters, [variables])
    except Exception:  # an unknown name, a refused step: the written form still counts
        return None


def plain(value: Any) -> Any:
    """A typed value's plain-data form (a pydantic model's dump, a dataclass's fields),
    so a live run's object and a stored run's JSON compare equal."""
    dump = getattr(value, "model_dump", None)
    if callable(dump) and not isinstance(value, type):
        try:
            return dump(mode="json")
        except Exception:
            return value
    import dataclasses

    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        try:
            return dataclasses.asdict(value)
        except Exception:
            return value
    return value


def same(expected: Any, actual: Any) -> bool:
    """Whether ``actual`` holds: ``expected`` a predicate (called with ``actual``; one
    that raises or says no does not hold) or a value (equal as is or as plain data)."""
    if callable(expected) and not isinstance(expected, type):
        try:
            return bool(expected(actual))
        except Exception:
            return False
    try:
        if bool(expected == actual):
            return True
        return bool(plain(expected) == plain(actual))
    except Exception:  # an __eq__ that raises, or an ambiguous truth value (numpy)
        return False


def _args_hold(expected: Mapping[str, Any], given: Any, rule: str) -> bool:
    if not isinstance(given, Mapping):
        return False
    if rule == "exact" and set(given) != set(expected):
        return False
    return all(key in given and same(value, given[key]) for key, value in expected.items())


def matches(expected: Expected, call: Call, rule: str) -> bool:
    """Whether ``call`` is ``expected`` under the ``args`` rule (a bare name: any args)."""
    if expected.name != call.name:
        return False
    if rule == "ignore" or expected.args is None:
        return True
    return _args_hold(expected.args, call.parameters, rule) or _args_hold(
        expected.args, call.resolved, rule
    )


def lcs(expected: Sequence[Expected], calls: Sequence[Call], rule: str) -> list[tuple[int, int]]:
    """A longest common subsequence of the two sequences under ``matches``: the pairs
    (expected index, call index), in order."""
    n, m = len(expected), len(calls)
    ok = [[matches(e, c, rule) for c in calls] for e in expected]
    table = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(n - 1, -1, -1):
        row, below = table[i], table[i + 1]
        for j in range(m - 1, -1, -1):
            row[j] = below[j + 1] + 1 if ok[i][j] else max(below[j], row[j + 1])
    pairs, i, j = [], 0, 0
    while i < n and j < m:
        if ok[i][j] and table[i][j] == table[i + 1][j + 1] + 1:
            pairs.append((i, j))
            i, j = i + 1, j + 1
        elif table[i][j + 1] >= table[i + 1][j]:
            j += 1  # on a tie, keep the earlier expected calls aligned
        else:
            i += 1
    return pairs


def matching(
    expected: Sequence[Expected], calls: Sequence[Call], fits: Callable[[Expected, Call], bool]
) -> dict[int, int]:
    """A largest one-to-one matching of expected calls to actual ones, any order:
    expected index -> call index (augmenting paths; the sequences are short)."""
    edges = [[j for j, c in enumerate(calls) if fits(e, c)] for e in expected]
    owner: dict[int, int] = {}  # call index -> expected index

    def place(i: int, seen: set[int]) -> bool:
        for j in edges[i]:
            if j in seen:
                continue
            seen.add(j)
            if j not in owner or place(owner[j], seen):
                owner[j] = i
                return True
        return False

    for i in range(len(expected)):
        place(i, set())
    return {i: j for j, i in owner.items()}
