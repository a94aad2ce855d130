"""Action ids across the turns of one run, as one reply's parser hands them out.

Real models reuse ids: they call their first action ``r1`` in every turn. An id an
earlier turn used therefore starts a new action under a new name (``r1`` runs as
``r1~2``, then ``r1~3``, skipping any name already taken) and keeps the model's id
as ``Action.original_id`` so the runtime can say what happened. Within one reply a
repeated id is still a mistake (``duplicate_id``): the model cannot mean two actions
by one name while it is writing both.

``depends_on`` follows the model's meaning: after the renamed action, ``"r1"`` means
the new one (the id is rewritten); before it, the earlier turn's. Generated ids
(``auto-N``) never collide with anything taken.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import replace

from .events import Action

_SUFFIX = re.compile(r"(.*)~(\d+)\Z", re.DOTALL)


class Ids:
    """The ids of a run: those earlier turns used and those this reply claims."""

    __slots__ = ("_auto_n", "_earlier", "_renamed", "_taken")

    def __init__(self, earlier: Iterable[str] = ()) -> None:
        self._earlier = frozenset(earlier)
        self._taken = set(self._earlier)
        self._renamed: dict[str, str] = {}  # model's id -> the id it runs under
        self._auto_n = 0

    def generate(self) -> str:
        """A new ``auto-N`` id no one has used."""
        while True:
            self._auto_n += 1
            candidate = f"auto-{self._auto_n}"
            if candidate not in self._taken:
                self._taken.add(candidate)
                return candidate

    def claim(self, given: str) -> str | None:
        """The id an action the model called ``given`` runs under; None if this
        reply already used ``given`` (a duplicate)."""
        if given in self._renamed or (given in self._taken and given not in self._earlier):
            return None
        if given not in self._earlier:
            self._taken.add(given)
            return given
        m = _SUFFIX.match(given)
        base, n = (m.group(1), int(m.group(2))) if m else (given, 1)
        while True:
            n += 1
            candidate = f"{base}~{n}"
            if candidate not in self._taken:
                self._taken.add(candidate)
                self._renamed[given] = candidate
                return candidate

    def follow_renames(self, action: Action) -> Action:
        """``action`` with its ``depends_on`` pointing at renamed actions' new ids."""
        if not self._renamed or not action.depends_on:
            return action
        deps = tuple(self._renamed.get(d, d) for d in action.depends_on)
        # An action's own old id still means the earlier turn's action.
        deps = tuple(
            old if new == action.id else new
            for old, new in zip(action.depends_on, deps, strict=True)
        )
        return action if deps == action.depends_on else replace(action, depends_on=deps)
