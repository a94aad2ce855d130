"""``%cortex keep COLUMN --to DATASET``: a comparison's column kept as a test case.

The column's latest run becomes a ``Case`` as ``Dataset.from_runs`` makes one
(``experiments.recorded.case_from_run``): the cell's prompt, and as its expectations the
top-level actions the run took and the answer it gave. ``DATASET`` is

- a notebook name (an identifier): the ``Dataset`` it holds is replaced by a new one with
  the case added (a name not yet bound gets a new dataset named after it);
- else a file path (``.yaml``, ``.yml``, ``.jsonl``): loaded if it exists, the case
  appended, and saved whole (``Dataset.save`` writes a new file and renames it over the
  old one, so a reader never sees half of it).

A case name the dataset already has gets a suffix (``" (2)"``); a run the dataset
already holds (its case's ``metadata["run"]``) is not added again. A column's keep button
(``display.compare_widget``) keeps into the notebook name ``kept`` (``BUTTON_DATASET``).
What cannot be kept (no comparison yet, an unknown column, a run that did not answer, a
file that is not a dataset) is a ``KeepRefused`` of one line. Its own module: the session's
coordinator is not visited again (STYLE.md).
"""

from __future__ import annotations

import builtins
import keyword
import os
from collections.abc import MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["BUTTON_DATASET", "KeepRefused", "keep_column"]

#: The notebook name a column's keep button adds to.
BUTTON_DATASET = "kept"


class KeepRefused(ValueError):
    """What cannot be kept, in one line."""


@dataclass
class _Kept:
    """A column's run as ``case_from_run`` reads a stored one."""

    id: str
    prompt: str
    answer: str
    actions: Any
    variables: Any
    options: dict[str, Any] = field(default_factory=dict)


def keep_column(namespace: MutableMapping[str, Any], comparison: Any, column: str,
                to: str) -> str:  # fmt: skip
    """Keep ``comparison[column]``'s latest run as a case of dataset ``to`` (see the
    module docstring); returns the line saying what was kept where."""
    from cortex_jupyter.experiments.cases import Dataset
    from cortex_jupyter.experiments.recorded import case_from_run

    if comparison is None or not hasattr(comparison, "values"):
        raise KeepRefused("there is no comparison yet: run a %%cortex --compare a,b cell first")
    if not isinstance(column, str) or column not in comparison:
        names = ", ".join(comparison)
        raise KeepRefused(f"the last comparison has no column {column!r:.60}; its columns: "
                          f"{names}")  # fmt: skip
    run = comparison[column].run
    if run is None or run.status != "completed":
        why = (
            "it never started" if run is None
            else "it is still running" if run.status == "running"
            else f"its run ended {run.status!r}"
        )  # fmt: skip
        reason = f" ({run.reason})" if run is not None and run.reason else ""
        raise KeepRefused(f"column {column} cannot be kept: {why}{reason}; only a run that "
                          "answered is a test case")  # fmt: skip
    script = bool(getattr(comparison.options, "script", False))
    kept = _Kept(run.id, comparison.prompt, run.answer, run.actions, run.variables,
                 {"script": script})  # fmt: skip
    dataset, where, save = _destination(namespace, to)
    twin = next((c for c in dataset.cases if c.metadata.get("run") == run.id), None)
    if twin is not None:  # a double click, or the line run again: one case a run
        raise KeepRefused(f"column {column}'s run {run.id} is already case {twin.name!r} "
                          f"in {where}; nothing was added")  # fmt: skip
    case = case_from_run(kept, set(dataset.names))  # type: ignore[arg-type]
    model = getattr(comparison[column], "model", None)
    extra = {"compare": getattr(comparison, "id", None), "column": column, "model": model}
    case = case.replace(metadata={**case.metadata, **extra})
    try:
        grown = Dataset([*dataset.cases, _redacted(case)], dataset.name)
        save(grown)
    except (OSError, ValueError) as exc:
        raise KeepRefused(f"{where}: {exc}") from None
    count = f"{len(grown)} case" + ("" if len(grown) == 1 else "s")
    return f"kept column {column} as case {case.name!r} in {where} ({count})"


def _redacted(case: Any) -> Any:
    """``case`` with every secret its prompt, actions and answer hold redacted, as a run
    read back from the store has them (``Dataset.from_runs``): the live run is not."""
    from cortex_jupyter.experiments.cases import Dataset
    from cortex_jupyter.runtime.core.trust.secrets import redact_value

    return Dataset.from_data({"cases": [redact_value(case.to_data())]}).cases[0]


def _destination(namespace: MutableMapping[str, Any], to: str) -> tuple[Any, str, Any]:
    """The dataset ``to`` names, how to name it in a line, and how to save it grown."""
    from cortex_jupyter.experiments.cases import Dataset

    if not isinstance(to, str) or not to.strip():
        raise KeepRefused("give the dataset: --to NAME (a notebook name) or --to FILE.yaml")
    if to.isidentifier():
        if keyword.iskeyword(to) or (to not in namespace and hasattr(builtins, to)):
            raise KeepRefused(f"{to} is Python's own name; give another (--to cases)")
        found = namespace.get(to)
        if to in namespace and not isinstance(found, Dataset):
            raise KeepRefused(f"{to} is a {type(found).__name__}, not a Dataset; give another "
                              "name, or a file (--to cases.yaml)")  # fmt: skip

        def bind(grown: Any) -> None:
            namespace[to] = grown

        return (found if found is not None else Dataset([], name=to)), to, bind
    path = Path(os.path.expanduser(to))
    if path.suffix.lower() not in (".yaml", ".yml", ".jsonl"):
        raise KeepRefused(f"{to}: a dataset file ends in .yaml, .yml or .jsonl (or give a "
                          "notebook name)")  # fmt: skip
    if path.exists():
        try:
            dataset = Dataset.load(path)
        except (OSError, ValueError) as exc:
            raise KeepRefused(f"not a dataset: {exc}") from None
    elif not path.parent.is_dir():
        raise KeepRefused(f"{to}: no folder {str(path.parent)!r:.80} to write it in")
    else:
        dataset = Dataset([], name=path.stem)
    return dataset, str(path), dataset_saver(path)


def dataset_saver(path: Path) -> Any:
    def save(grown: Any) -> None:
        grown.save(path)

    return save
