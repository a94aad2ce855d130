"""Cases from stored runs: what a run did, written down as what the next one must do.

``cases_from_runs`` turns each stored run into a ``Case``: its prompt, and as its
expectations the top-level actions it took (``expect.tools(..., order="in_order",
args="subset")``, each with the parameters the model wrote) and the answer it gave
(``expect.answer(equals=...)``), for the user to edit (``Dataset.from_runs``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

from cortex_jupyter import store as run_store
from cortex_jupyter.display.listing import prompt_words
from cortex_jupyter.experiments import _match, expect
from cortex_jupyter.experiments.cases import Case
from cortex_jupyter.experiments.results import Expectation
from cortex_jupyter.store import StoredRun, UnknownRun

__all__ = ["case_from_run", "cases_from_runs"]

#: The most words of the prompt a case's name keeps, and its most characters.
NAME_WORDS = 6
NAME_CHARS = 48
#: The most runs a search query turns into cases.
MOST_RUNS = 200

Where = str | os.PathLike[str] | None


def cases_from_runs(ids_or_query: str | Iterable[str], store: Where = None) -> list[Case]:
    """Cases from stored runs: ``ids_or_query`` a run id (or the unique start of one), a
    list of ids, or else words to search for (``cortex_jupyter.runs(query)``: every run
    whose prompt, answer, actions or outputs hold them, newest first). Each case is named
    by its prompt's first words (unique among these cases); ``UnknownRun`` names an id in
    a list that no stored run has."""
    if isinstance(ids_or_query, str):
        found = _by_id_or_words(ids_or_query, store)
    elif isinstance(ids_or_query, Iterable) and not isinstance(ids_or_query, Mapping):
        ids = list(ids_or_query)
        if not all(isinstance(i, str) for i in ids):
            raise TypeError("cases_from_runs takes a run id, a list of run ids, or search words")
        found = [run_store.open_run(i, store=store) for i in ids]
    else:
        raise TypeError("cases_from_runs takes a run id, a list of run ids, or search words")
    taken: set[str] = set()
    return [case_from_run(run, taken) for run in found]


def _by_id_or_words(text: str, store: Where) -> list[StoredRun]:
    if text.strip() and len(text.split()) == 1:
        try:
            return [run_store.open_run(text.strip(), store=store)]
        except UnknownRun:
            pass  # not an id: search for it
    rows = run_store.runs(text, limit=MOST_RUNS, store=store)
    return [run_store.open_run(row.id, store=store) for row in rows]


def case_from_run(run: StoredRun, taken: set[str] | None = None) -> Case:
    """The case ``run`` makes (``taken``: names already used, the new one added)."""
    expectations: list[Expectation] = []
    calls = [
        (call.name, dict(call.parameters)) if isinstance(call.parameters, Mapping) else call.name
        for call in _match.calls_of(run)
    ]
    if calls:
        expectations.append(expect.tools(calls, order="in_order", args="subset"))
    answer = run.answer
    if answer.strip():
        expectations.append(expect.answer(equals=answer))
    prompt = run.prompt if run.prompt.strip() else f"(run {run.id} kept no prompt)"
    name = _unique(_name(run), taken if taken is not None else set())
    return Case(prompt, name=name, expect=expectations, metadata={"run": run.id})


def _name(run: StoredRun) -> str:
    options: Any = getattr(run, "options", None) or {}
    words = prompt_words(run.prompt, script=bool(options.get("script"))).split()
    name = " ".join(words[:NAME_WORDS])[:NAME_CHARS].strip()
    return name or f"run {run.id}"


def _unique(name: str, taken: set[str]) -> str:
    out, number = name, 2
    while out in taken:
        out, number = f"{name} ({number})", number + 1
    taken.add(out)
    return out
