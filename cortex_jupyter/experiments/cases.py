"""What an experiment asks: cases (a prompt, a name, what the answer must show) and the
datasets that hold them.

A ``Case`` is data: its ``prompt``, a ``name`` unique in its dataset, its expectations
(``results.Expectation``), free ``metadata`` for the user's own columns, and ``vars``,
the values its run may read as ``$name``. A ``Dataset`` is an ordered tuple of cases,
read from and written to YAML or JSONL (``datafiles``), built from a pandas DataFrame or
from stored runs. Nothing here runs anything: the experiment does.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from . import datafiles
from .frames import cases_from_frame
from .results import Expectation

__all__ = ["Case", "Dataset"]

#: What ``$name`` can name (the runtime's ``REFERENCE``): so a case's vars are readable.
_VAR_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _expectations(expect: Any) -> tuple[Expectation, ...]:
    if isinstance(expect, Expectation):
        return (expect,)
    if expect is None:
        return ()
    if isinstance(expect, str | bytes | Mapping) or not isinstance(expect, Iterable):
        raise TypeError(
            f"a case's expect is a list of expectations; got {type(expect).__name__} {expect!r:.60}"
        )
    items = tuple(expect)
    for position, item in enumerate(items):
        if not isinstance(item, Expectation):
            raise TypeError(
                f"expect[{position}] is a {type(item).__name__} ({item!r:.60}), not an "
                "expectation (cortex_jupyter.experiments.expect makes them)"
            )
    return items


def _mapping(value: Any, what: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise TypeError(f"a case's {what} is a mapping; got {type(value).__name__}")
    for key in value:
        if not isinstance(key, str):
            raise TypeError(f"a case's {what} are keyed by text; got the key {key!r:.60}")
        if what == "vars" and not _VAR_NAME.fullmatch(key):
            raise ValueError(
                f"a case's vars are read as $name, so each key is a name of letters, digits "
                f"and _ (not starting with a digit); got {key!r:.60}"
            )
    return dict(value)


@dataclass(frozen=True, init=False)
class Case:
    """One thing to ask an agent, and what its run must show.

    ``prompt`` is the text sent; ``name`` identifies the case in its dataset (the
    dataset names an unnamed case ``case-N`` by its position); ``expect`` is a list of
    expectations (a single one is taken as a list of one), kept as a tuple;
    ``metadata`` is free plain data carried along (a difficulty, a source); ``vars`` are
    the values the run may read as ``$name``. ``metadata`` and ``vars`` are dicts (copies
    of those given), empty when not given.
    """

    prompt: str
    name: str | None
    expect: tuple[Expectation, ...]
    metadata: dict[str, Any]
    vars: dict[str, Any]

    def __init__(
        self,
        prompt: str,
        name: str | None = None,
        expect: Iterable[Expectation] | Expectation = (),
        metadata: Mapping[str, Any] | None = None,
        vars: Mapping[str, Any] | None = None,
    ) -> None:
        if not isinstance(prompt, str):
            raise TypeError(f"a case's prompt is text; got {type(prompt).__name__}")
        if not prompt.strip():
            raise ValueError("a case's prompt is empty")
        if name is not None and (not isinstance(name, str) or not name.strip()):
            raise ValueError(f"a case's name is non-empty text (or None); got {name!r:.60}")
        object.__setattr__(self, "prompt", prompt)
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "expect", _expectations(expect))
        object.__setattr__(self, "metadata", _mapping(metadata, "metadata"))
        object.__setattr__(self, "vars", _mapping(vars, "vars"))

    __hash__ = None  # type: ignore[assignment]  # (its metadata and vars are dicts)

    def replace(self, **changes: Any) -> Case:
        """A copy with ``changes`` (``prompt=``, ``expect=``...), checked like a new case."""
        return dataclasses.replace(self, **changes)

    def to_data(self) -> dict[str, Any]:
        """Its plain-data form, as a saved dataset holds it. ``ValueError`` names an
        expectation that cannot be saved (it holds a function) or a value of ``vars`` or
        ``metadata`` that is not plain data."""
        return datafiles.case_data(self)


class Dataset:
    """An ordered collection of cases with unique names.

    ``Dataset(cases, name=None)``: a case without a name is named ``case-N`` by its
    position (from 1); two cases with one name are a ``ValueError`` naming it.
    ``len(dataset)``, ``for case in dataset``, ``dataset["name"]`` (or a position),
    ``"name" in dataset``. ``Dataset.load(path)`` and ``dataset.save(path)`` read and
    write ``.yaml``/``.yml`` and ``.jsonl`` files.
    """

    def __init__(self, cases: Iterable[Case], name: str | None = None) -> None:
        if isinstance(cases, Case):
            cases = [cases]
        if isinstance(cases, str | bytes | Mapping) or not isinstance(cases, Iterable):
            raise TypeError(f"a dataset's cases are a list of Case; got {type(cases).__name__}")
        if name is not None and not isinstance(name, str):
            raise TypeError(f"a dataset's name is text; got {type(name).__name__}")
        named: list[Case] = []
        where: dict[str, int] = {}
        for position, case in enumerate(cases, 1):
            if not isinstance(case, Case):
                raise TypeError(
                    f"case {position} is a {type(case).__name__} ({case!r:.60}), not a Case"
                )
            if case.name is None:
                case = dataclasses.replace(case, name=f"case-{position}")
            assert case.name is not None
            if case.name in where:
                raise ValueError(
                    f"two cases are named {case.name!r} (cases {where[case.name]} and "
                    f"{position}); a dataset's case names are unique (an unnamed case is "
                    "named case-N by its position)"
                )
            where[case.name] = position
            named.append(case)
        self.cases: tuple[Case, ...] = tuple(named)
        self.name = name
        self._by_name: dict[str, Case] = {case.name: case for case in self.cases if case.name}

    # ---- a collection -----------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.cases)

    def __iter__(self) -> Iterator[Case]:
        return iter(self.cases)

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __getitem__(self, key: str | int) -> Case:
        if isinstance(key, int) and not isinstance(key, bool):
            return self.cases[key]
        if key in self._by_name:
            return self._by_name[key]
        names = ", ".join(list(self._by_name)[:8]) + (", ..." if len(self) > 8 else "")
        raise KeyError(f"no case named {key!r:.60} in the dataset; its cases: {names or 'none'}")

    @property
    def names(self) -> list[str]:
        """The cases' names, in order."""
        return list(self._by_name)

    def __repr__(self) -> str:
        count = f"{len(self)} case" + ("" if len(self) == 1 else "s")
        return f"Dataset({self.name!r}, {count})" if self.name else f"Dataset({count})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Dataset):
            return NotImplemented
        return self.name == other.name and self.cases == other.cases

    __hash__ = None  # type: ignore[assignment]

    # ---- new datasets from this one ----------------------------------------------------

    def with_expectations(self, *expectations: Expectation) -> Dataset:
        """The same cases, each with ``expectations`` added after its own."""
        extra = _expectations(expectations)
        return Dataset([case.replace(expect=case.expect + extra) for case in self], self.name)

    def to_data(self) -> dict[str, Any]:
        """Its plain-data form, as a YAML file holds it: ``{"name":, "cases": [...]}``."""
        return {"name": self.name, "cases": [case.to_data() for case in self]}

    @classmethod
    def from_data(cls, data: Any) -> Dataset:
        """The dataset ``to_data()`` made (``ValueError`` in one line when it is not one)."""
        dataset: Dataset = datafiles.from_data(data, Case, cls, "dataset data")
        return dataset

    def run(self, agents: Any, **options: Any) -> Any:
        """Run every case by every agent and judge each try: an ``Experiment``.

        ``agents`` maps a column name to an ``Agent`` (one ``Agent`` alone is one column).
        ``repeat`` tries each (case, agent) that many times; ``concurrency`` bounds the tries
        at once per server (default: 1 for a server on this machine, 4 for others, 8 for
        scripts; an int for all, or ``{endpoint: n}``); ``budget`` (dollars, or ``"Ntok"``)
        holds for the whole experiment; ``executor`` (a ``distributed.Client`` or its
        address) runs the tries on a cluster's workers; ``name`` names it (default: the
        dataset's). Also ``judge`` (the model an ``expect.judge`` without one asks; by
        default the agent's own when it asks a server), ``judge_budget`` (the most the
        judge's requests may spend, counted apart from the agents'),
        ``time_limit`` (seconds a try), ``store`` (None: not kept), ``progress`` and
        ``view`` (the live matrix; default: in a notebook), ``order`` (``"repeat"``: every
        case by every column, then again; ``"agent"``: a column's tries before the next's)
        and ``hooks`` (``running.Hooks``: what a preset such as ``evaluate()`` changes).
        Every try is an ordinary run in
        the store; a Stop keeps those that ended, and ``Experiment.resume(id)`` goes on.
        """
        # By name, as from_runs: the runner reads cases, so cases may not import it back.
        experiment = importlib.import_module("cortex_jupyter.experiments.experiment")
        return experiment.run_dataset(self, agents, **options)

    # ---- files --------------------------------------------------------------------------

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write it to ``path``, as YAML (``.yaml``/``.yml``) or JSONL (``.jsonl``).

        Every case is made plain data first: a case that cannot be saved (an expectation
        holding a function, a value of ``vars`` that is not plain data) is a
        ``ValueError`` naming it, and nothing is written. The file is replaced whole (a
        new file renamed over it), so a reader never sees half of it.
        """
        datafiles.save(self, path)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Dataset:
        """The dataset in ``path`` (``.yaml``/``.yml`` or ``.jsonl``). What is wrong with a
        file is a ``ValueError`` of one line naming the file, the line or case, and what."""
        dataset: Dataset = datafiles.load(path, Case, cls)
        return dataset

    # ---- other sources -----------------------------------------------------------------

    @classmethod
    def from_pandas(
        cls,
        df: Any,
        prompt: str = "question",
        name: str | None = None,
        expect: Callable[[Any], Any] | str | None = None,
        case_name: str | None = None,
        metadata: Sequence[str] | str | None = None,
        vars: Sequence[str] | str | None = None,
    ) -> Dataset:
        """One case per row of ``df``: its ``prompt`` column is the prompt.

        ``case_name`` is a column of case names; ``metadata`` and ``vars`` are lists of
        columns copied into each case's metadata and vars (a missing value becomes
        None); ``expect`` is a function of the row (a ``pandas.Series``) returning its
        expectations, or a column of expected answers (each becomes
        ``expect.answer(equals=...)``). A missing column is a ``ValueError`` naming it.
        """
        return cls(cases_from_frame(df, prompt, expect, case_name, metadata, vars, Case), name)

    @classmethod
    def from_runs(cls, ids_or_query: Any, store: Any = None, name: str | None = None) -> Dataset:
        """Cases from stored runs: each run's prompt, with its actions and answer as the
        expectations, for the user to edit (``experiments.recorded.cases_from_runs``)."""
        recorded = importlib.import_module("cortex_jupyter.experiments.recorded")
        return cls(recorded.cases_from_runs(ids_or_query, store=store), name)
