"""The order a run's actions are read in by what compares runs (``%%cortex --compare``'s
diff, an experiment's ``expect.tools``): one rule, so the two never disagree.

A run's calls are its top-level nodes (``parent`` None) in the order they started; one
that never started goes by when it was submitted, then by its place in ``run.actions``.
The run is read by attribute and may be anything (a live run, one read back from the
store, hostile input): nothing here raises on a missing or odd field.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

__all__ = ["parameters_of", "top_level_in_start_order"]


def _time(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return math.inf
    return float(value)


def top_level_in_start_order(run: Any) -> list[tuple[int, Any]]:
    """``run``'s top-level nodes in start order (see the module docstring), each with its
    place in ``run.actions``."""
    actions = getattr(run, "actions", None)
    nodes = list(actions.values()) if isinstance(actions, Mapping) else []
    keyed = []
    for place, node in enumerate(nodes):
        if getattr(node, "parent", None) is not None:
            continue
        started = _time(getattr(node, "started", None))
        at = started if started != math.inf else _time(getattr(node, "submitted", None))
        keyed.append(((at, place), (place, node)))
    keyed.sort(key=lambda item: item[0])
    return [placed for _, placed in keyed]


def parameters_of(node: Any) -> Any:
    """The parameters a node's action was written with (None: it has no action)."""
    action = getattr(node, "action", None)
    return getattr(action, "parameters", None) if action is not None else None
