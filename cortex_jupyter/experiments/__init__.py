"""Experiments: test an agent on your own cases, across models and dialects, and see what
changed (docs/experiments.md).

- ``results``: the shapes every part shares: ``Verdict``, ``Expectation``, ``Try``;
- ``cases``: ``Case`` and ``Dataset`` (``datafiles``: YAML and JSONL; ``frames``: from a
  DataFrame; ``recorded``: from stored runs);
- ``expect``: what a try must show (``answer``, ``output``, ``tools``, ``graph``,
  ``limits``, ``judge``; ``protocol`` is always on);
- ``experiment``: ``Experiment`` (``to_pandas``, ``compare``, ``rescore``,
  ``assert_passes``, ``resume``), made by ``Dataset.run``; ``running`` makes its tries
  (ordinary ``Agent.run``s), ``schedule`` bounds them per server and by a budget,
  ``cluster`` runs them on a Dask cluster, ``live`` shows them as they end;
- ``report`` and ``stats``: the matrix, summaries, paired tests and baselines, read from
  the tries alone.
"""

from __future__ import annotations

from cortex_jupyter.experiments import expect
from cortex_jupyter.experiments.cases import Case, Dataset
from cortex_jupyter.experiments.experiment import Experiment
from cortex_jupyter.experiments.results import Expectation, Try, Verdict

__all__ = ["Case", "Dataset", "Expectation", "Experiment", "Try", "Verdict", "expect"]
